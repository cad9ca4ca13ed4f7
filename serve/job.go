package serve

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/dlmcache/dlmcache/cache"
	"github.com/dlmcache/dlmcache/model/sample"
)

// Jobs: a completion request's body parsed, encoded and validated into a
// job (the prompt's tokens and prefix, the method serving it, the
// generation options and the response's shape), and the result a job
// produces. Every 400 a request's fields can earn is given here.

// job is one parsed completion request.
type job struct {
	endpoint  string
	ids       []int32
	prefixLen int
	conv      *conversation // chat requests: the messages, for StoreAnswers
	meth      cache.Method  // the method serving it (the server's, or the modules')
	pos       []int32       // the prompt's position ids (module requests; nil: 0, 1, …)
	gen       sample.GenOptions
	salt      string
	maxTokens int      // cap on the returned tokens (0: the gen length)
	stop      []string // stop strings
	stream    bool     // stream: true
	usage     bool     // stream_options.include_usage
	canvas    bool     // dlmcache_stream_canvas
	sink      *sseSink // the streamed response, when streaming
}

// result is what a job produced.
type result struct {
	text         string
	finish       string
	completion   int
	stats        Stats
	promptTokens int
	cachedTokens int // prompt tokens whose K/V came from the store at every layer
}

// usage is the response's token counts.
func (r *result) usage() usage {
	return usage{PromptTokens: r.promptTokens, CompletionTokens: r.completion, TotalTokens: r.promptTokens + r.completion,
		PromptTokensDetails: promptTokensDetails{CachedTokens: r.cachedTokens}}
}

// parseChat parses a chat completion request into its job: its messages
// encoded by the chat template (or composed from prompt modules).
func (s *Server) parseChat(ctx context.Context, body io.Reader) (*job, *apiError) {
	var req chatRequest
	if e := decodeBody(body, &req); e != nil {
		return nil, e
	}
	if req.Messages == nil {
		return nil, badRequest("messages is required", "messages")
	}
	if req.Modules != nil {
		if s.cfg.Modules == nil {
			return nil, badRequest("modules: this server declares no prompt modules (serve --modules FILE)", "modules")
		}
		ids, m, pos, err := s.cfg.Modules.encode(ctx, s.cfg.Model.Tokenizer, req.Modules, req.Messages)
		if err != nil {
			return nil, asAPIError(err)
		}
		j, e := s.newJob(ctx, ids, m, &req.genFields, "messages", s.cfg.Modules.method)
		if j != nil {
			j.pos = pos
		}
		return j, e
	}
	_, blocks := cache.StoreOf(s.cfg.Method).(*cache.BlockStore)
	ids, m, conv, err := encodeConversation(ctx, s.cfg.Model.Tokenizer, req.Messages, blocks)
	if err != nil {
		return nil, asAPIError(err)
	}
	j, e := s.newJob(ctx, ids, m, &req.genFields, "messages", s.cfg.Method)
	if j != nil {
		j.conv = conv
	}
	return j, e
}

// parseCompletion parses a text completion request into its job.
func (s *Server) parseCompletion(ctx context.Context, body io.Reader) (*job, *apiError) {
	var req completionRequest
	if e := decodeBody(body, &req); e != nil {
		return nil, e
	}
	if req.Modules != nil {
		return nil, badRequest("modules: prompt modules are imported by chat requests (/v1/chat/completions), whose system message they extend", "modules")
	}
	prompt, err := req.promptText()
	if err != nil {
		return nil, asAPIError(err)
	}
	ids, m, err := encodeCompletion(s.cfg.Model.Tokenizer, req.System, prompt)
	if err != nil {
		return nil, asAPIError(err)
	}
	return s.newJob(ctx, ids, m, &req.genFields, "prompt", s.cfg.Method)
}

func asAPIError(err error) *apiError {
	var e *apiError
	if errors.As(err, &e) {
		return e
	}
	return internalError(err)
}

// newJob validates the generation fields against the schedule and the
// context bound, for a request meth serves. paramPrompt names the field
// blamed for a too-long prompt.
func (s *Server) newJob(ctx context.Context, ids []int32, prefixLen int, g *genFields, paramPrompt string, meth cache.Method) (*job, *apiError) {
	if g.StreamCanvas && (g.Stream == nil || !*g.Stream) {
		return nil, badRequest("dlmcache_stream_canvas needs stream: true", "dlmcache_stream_canvas")
	}
	if g.N != nil && *g.N != 1 {
		return nil, badRequest(fmt.Sprintf("n=%d is not supported: want 1", *g.N), "n")
	}
	if e := g.unsupported(); e != nil {
		return nil, e
	}
	stop, e := stopStrings(g.Stop)
	if e != nil {
		return nil, e
	}
	gen, e := s.genOptions(g)
	if e != nil {
		return nil, e
	}
	meth, gen = cache.Choose(meth, len(ids), prefixLen, gen) // the table's choice for this request, once
	if s.cfg.MaxContext > 0 && len(ids)+gen.GenLength > s.cfg.MaxContext {
		return nil, newAPIError(http.StatusBadRequest, "invalid_request_error", "context_length_exceeded", paramPrompt,
			fmt.Sprintf("the prompt has %d tokens and the answer %d slots: %d in all exceed the model's context of %d tokens",
				len(ids), gen.GenLength, len(ids)+gen.GenLength, s.cfg.MaxContext))
	}
	j := &job{ids: ids, prefixLen: prefixLen, gen: gen, meth: meth, salt: requestSalt(ctx, g.CacheSalt), stop: stop,
		stream: g.Stream != nil && *g.Stream, canvas: g.StreamCanvas}
	if g.StreamOptions != nil {
		j.usage = g.StreamOptions.IncludeUsage
	}
	if g.MaxTokens != nil {
		j.maxTokens = *g.MaxTokens
	} else if g.MaxCompletionTokens != nil {
		j.maxTokens = *g.MaxCompletionTokens
	}
	return j, nil
}

// genOptions resolves a request's generation options:
//
//   - gen_length, else max_tokens (or max_completion_tokens) rounded up to a
//     whole number of the default blocks, else the default;
//   - block_length, else the default when it divides the gen length, else
//     the gen length (one block);
//   - steps, else the default's tokens per step kept (at least one step
//     per block, a whole number of steps per block).
//
// The result must satisfy LLaDA's schedule rules; a 400 names the field.
func (s *Server) genOptions(g *genFields) (sample.GenOptions, *apiError) {
	def := s.cfg.Gen
	o := def
	positive := func(p *int, name string) *apiError {
		if p != nil && *p <= 0 {
			return badRequest(fmt.Sprintf("%s must be positive, got %d", name, *p), name)
		}
		return nil
	}
	for _, f := range []struct {
		p    *int
		name string
	}{{g.GenLength, "gen_length"}, {g.MaxTokens, "max_tokens"}, {g.MaxCompletionTokens, "max_completion_tokens"}, {g.Steps, "steps"}, {g.BlockLength, "block_length"}} {
		if e := positive(f.p, f.name); e != nil {
			return o, e
		}
	}
	maxTok, maxName := g.MaxTokens, "max_tokens"
	if maxTok == nil {
		maxTok, maxName = g.MaxCompletionTokens, "max_completion_tokens"
	}
	tooMany := func(name string, n int) *apiError {
		return badRequest(fmt.Sprintf("%s %d exceeds the server's limit of %d completion tokens per request (serve --max-completion-tokens)", name, n, s.cfg.MaxGenLength), name)
	}
	param := "gen_length"
	switch {
	case g.GenLength != nil:
		o.GenLength = *g.GenLength
		if o.GenLength > s.cfg.MaxGenLength {
			return o, tooMany(param, o.GenLength)
		}
	case maxTok != nil:
		// The bound is on the tokens asked for, before the rounding up
		// to whole blocks (the answer is cut at max_tokens).
		param = maxName
		if *maxTok > s.cfg.MaxGenLength {
			return o, tooMany(param, *maxTok)
		}
		o.GenLength = *maxTok
		if g.BlockLength == nil && def.BlockLength < def.GenLength && o.GenLength > def.BlockLength {
			o.GenLength = (o.GenLength + def.BlockLength - 1) / def.BlockLength * def.BlockLength
		}
	default:
		if o.GenLength > s.cfg.MaxGenLength {
			return o, tooMany(param, o.GenLength)
		}
	}
	if B := s.cfg.Model.Config.CausalBlock(); B > 0 {
		return s.blockGenOptions(g, o, B, param)
	}
	switch {
	case g.BlockLength != nil:
		o.BlockLength = *g.BlockLength
	case def.BlockLength < def.GenLength && o.GenLength%def.BlockLength == 0:
		o.BlockLength = def.BlockLength
	default:
		o.BlockLength = o.GenLength
	}
	if o.BlockLength > o.GenLength || o.GenLength%o.BlockLength != 0 {
		return o, badRequest(fmt.Sprintf("gen length %d is not a multiple of block_length %d", o.GenLength, o.BlockLength), "block_length")
	}
	blocks := o.Blocks()
	if g.Steps != nil {
		o.Steps = *g.Steps
	} else if o.GenLength != def.GenLength || o.BlockLength != def.BlockLength {
		perStep := max(1, def.GenLength/def.Steps) // tokens a step commits by default
		spb := max(1, o.BlockLength/perStep)
		o.Steps = spb * blocks
	}
	if _, err := sample.NewSchedule(0, o); err != nil {
		p := "steps"
		if g.Steps == nil {
			p = param
		}
		return o, badRequest(fmt.Sprintf("generation options (gen_length %d, steps %d, block_length %d): %v", o.GenLength, o.Steps, o.BlockLength, err), p)
	}
	return sampling(g, o)
}

// sampling sets a request's temperature and seed.
func sampling(g *genFields, o sample.GenOptions) (sample.GenOptions, *apiError) {
	if g.Temperature != nil {
		if *g.Temperature < 0 || *g.Temperature > 2 {
			return o, badRequest(fmt.Sprintf("temperature %g: want 0…2", *g.Temperature), "temperature")
		}
		o.Temperature = *g.Temperature
	}
	if g.Seed != nil {
		o.Seed = uint64(*g.Seed)
	}
	return o, nil
}

// blockGenOptions finishes genOptions for a block-causal model with
// blocks of B: the block length is the model's (a request may only
// restate it), and without steps the default's steps per block are kept
// where they divide the gen length (else one step per slot at most).
func (s *Server) blockGenOptions(g *genFields, o sample.GenOptions, B int, param string) (sample.GenOptions, *apiError) {
	def := s.cfg.Gen
	if g.BlockLength != nil && *g.BlockLength != B {
		return o, badRequest(fmt.Sprintf("block_length %d: this block-causal model decodes in its own blocks of %d", *g.BlockLength, B), "block_length")
	}
	o.BlockLength = B
	switch {
	case g.Steps != nil:
		o.Steps = *g.Steps
	case o.GenLength != def.GenLength:
		spb := def.Steps * B / def.GenLength
		o.Steps = o.GenLength
		if spb*o.GenLength%B == 0 {
			o.Steps = spb * o.GenLength / B
		}
	}
	if _, err := sample.ScheduleFor(s.cfg.Model.Config, 0, o); err != nil {
		p := "steps"
		if g.Steps == nil {
			p = param
		}
		return o, badRequest(fmt.Sprintf("generation options (gen_length %d, steps %d): %v", o.GenLength, o.Steps, err), p)
	}
	return sampling(g, o)
}
