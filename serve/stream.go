package serve

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/dlmcache/dlmcache/model/sample"
)

// Streaming (stream: true) sends OpenAI's server-sent events: chunks whose
// deltas carry the answer's text as each semi-autoregressive block is
// committed (a block's text is final once the block ends: later blocks
// never change it), a last chunk with the finish reason, a usage chunk when
// stream_options.include_usage asks for it, and "data: [DONE]". A diffusion
// model fills a whole block at once, so a one-block answer arrives in one
// chunk. The finish chunk carries the dlmcache object of an unstreamed
// response. The opt-in extension dlmcache_stream_canvas adds, after every
// denoising step, an event with the whole answer canvas (which slots are
// still masked), for clients that show the diffusion.

// streamOptions is OpenAI's stream_options.
type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// chunkFunc builds one endpoint's chunk object: a text delta (role set on
// the first chat chunk), a finish reason, or (choices empty) the usage.
type chunkFunc func(id string, created int64, delta string, first bool, finish *string, u *usage) any

// sseSink writes one streamed response through an outbox (output.go): its
// methods run on the generation's goroutine and never block on the client.
type sseSink struct {
	w       http.ResponseWriter
	chunk   chunkFunc
	id      string
	created int64
	usage   bool // stream_options.include_usage
	canvas  bool // the dlmcache_stream_canvas extension

	// limit and timeout bound the outbox; onCut is told when it cuts the
	// response (the client does not drain it).
	limit   int
	timeout time.Duration
	onCut   func(*cutError)

	mu      sync.Mutex
	out     *outbox // nil until the first event
	started bool
	sent    string // text sent so far
	done    bool   // the answer ended: later blocks are not sent
}

func newSSESink(w http.ResponseWriter, chunk chunkFunc, id string, created int64, usage, canvas bool) *sseSink {
	return &sseSink{w: w, chunk: chunk, id: id, created: created, usage: usage, canvas: canvas,
		limit: defaultStreamBuffer, timeout: defaultWriteTimeout}
}

// event queues one data line (the outbox, with the headers, on the first).
func (k *sseSink) event(v any) {
	b, _ := json.Marshal(v)
	k.raw(append(append([]byte("data: "), b...), "\n\n"...))
}

func (k *sseSink) raw(b []byte) {
	if !k.started {
		h := k.w.Header()
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Accel-Buffering", "no")
		k.out = newOutbox(k.w, k.limit, k.timeout, k.onCut, k.tail)
		k.started = true
	}
	k.out.write(b) //nolint:errcheck // a cut is reported through onCut
}

// tail is how a stream cut for its backlog ends: an error event and
// [DONE].
func (k *sseSink) tail(c *cutError) []byte {
	e := newAPIError(http.StatusServiceUnavailable, "server_error", c.cause.Error(), "", c.detail+"; the stream was cut and the request cancelled")
	b, _ := json.Marshal(map[string]*apiError{"error": e})
	return append(append([]byte("data: "), b...), "\n\ndata: [DONE]\n\n"...)
}

// close waits until the queued events are written (or the response is
// cut) and returns why it was cut, or nil.
func (k *sseSink) close() *cutError {
	k.mu.Lock()
	out := k.out
	k.mu.Unlock()
	if out == nil {
		return nil
	}
	out.close()
	out.mu.Lock()
	defer out.mu.Unlock()
	return out.cut
}

// text sends the part of text not sent yet. Unless final, it holds back a
// trailing incomplete UTF-8 sequence and the last hold bytes (a stop string
// may still complete there).
func (k *sseSink) text(text string, final bool, hold int) {
	if k.done || !strings.HasPrefix(text, k.sent) {
		return
	}
	end := len(text)
	if !final {
		end = max(len(k.sent), end-hold)
		for end > len(k.sent) && !utf8.ValidString(text[len(k.sent):end]) {
			end--
		}
	}
	if end > len(k.sent) || !k.started {
		k.event(k.chunk(k.id, k.created, text[len(k.sent):end], !k.started, nil, nil))
		k.sent = text[:end]
	}
	if final {
		k.done = true
	}
}

// block is called when a block is committed: answer is the answer region
// up to the block's end, and answerText the server's reading of it (text,
// whether the answer ended inside).
func (k *sseSink) block(text string, ended bool, hold int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.text(text, ended, hold)
}

// step sends the canvas extension's event after a denoising step.
func (k *sseSink) step(st *sample.Step, slots []string) {
	if !k.canvas {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.event(map[string]any{"id": k.id, "object": "dlmcache.canvas", "created": k.created,
		"step": st.Index + 1, "block": st.Block, "slots": slots})
}

// finish sends what is left of the final text, the finish chunk, the usage
// chunk when asked for, and [DONE].
func (k *sseSink) finish(res *result) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.done = false
	k.text(res.text, true, 0)
	f := res.finish
	last := k.chunk(k.id, k.created, "", false, &f, nil)
	if m, ok := last.(map[string]any); ok {
		m["dlmcache"] = res.stats // what the caching method did, as in an unstreamed response
	}
	k.event(last)
	if k.usage {
		u := res.usage()
		k.event(k.chunk(k.id, k.created, "", false, nil, &u))
	}
	k.raw([]byte("data: [DONE]\n\n"))
}

// fail reports an error: as a JSON error response before the stream
// started, else as an error event and [DONE].
func (k *sseSink) fail(e *apiError) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.started {
		return false
	}
	k.event(map[string]*apiError{"error": e})
	k.raw([]byte("data: [DONE]\n\n"))
	return true
}

// chatChunk and completionChunk are the endpoints' chunk objects.
func (s *Server) chatChunk(id string, created int64, delta string, first bool, finish *string, u *usage) any {
	type deltaMsg struct {
		Role    string `json:"role,omitempty"`
		Content string `json:"content"`
	}
	type choice struct {
		Index        int      `json:"index"`
		Delta        deltaMsg `json:"delta"`
		FinishReason *string  `json:"finish_reason"`
		Logprobs     any      `json:"logprobs"`
	}
	d := deltaMsg{Content: delta}
	if first {
		d.Role = "assistant"
	}
	return s.chunk("chatcmpl-"+id, "chat.completion.chunk", created, choice{Delta: d, FinishReason: finish}, u)
}

func (s *Server) completionChunk(id string, created int64, delta string, _ bool, finish *string, u *usage) any {
	type choice struct {
		Index        int     `json:"index"`
		Text         string  `json:"text"`
		FinishReason *string `json:"finish_reason"`
		Logprobs     any     `json:"logprobs"`
	}
	return s.chunk("cmpl-"+id, "text_completion", created, choice{Text: delta, FinishReason: finish}, u)
}

// chunk is a streamed chunk object: its one choice, or, for the usage
// chunk (u set), no choice and the usage.
func (s *Server) chunk(id, object string, created int64, choice any, u *usage) map[string]any {
	c := map[string]any{"id": id, "object": object, "created": created, "model": s.cfg.Name,
		"system_fingerprint": s.fingerprint()}
	if u != nil {
		c["choices"], c["usage"] = []any{}, u
		return c
	}
	c["choices"] = []any{choice}
	return c
}

// streamHooks wires a job's sink into its generation options: committed
// blocks become text deltas, steps canvas events.
func (s *Server) streamHooks(j *job) {
	k := j.sink
	if k == nil {
		return
	}
	hold := 0
	for _, st := range j.stop {
		hold = max(hold, len(st)-1)
	}
	promptLen := len(j.ids)
	mask := int32(s.cfg.Model.Config.MaskTokenID)
	j.gen.OnBlock = func(_, end int, canvas []int32) {
		ans := canvas[promptLen:end]
		text, n, finish := s.answer(ans, j.maxTokens, j.stop)
		ended := s.cfg.Model.AnswerEnd(ans) < len(ans) || finish == "stop" || (j.maxTokens > 0 && len(ans) >= j.maxTokens)
		if !ended && end < len(canvas) {
			// A character cut at the block's end waits for the next block.
			text = s.cfg.Model.Tokenizer.DecodePrefix(ans[:n])
		}
		k.block(text, ended, hold)
	}
	if k.canvas {
		tok := s.cfg.Model.Tokenizer
		j.gen.OnStep = func(st *sample.Step, _ []int32) {
			slots := make([]string, j.gen.GenLength)
			for i := range slots {
				if t := st.Canvas[promptLen+i]; t != mask {
					slots[i] = tok.Decode([]int32{t})
				} else {
					slots[i] = "\u2591" // ░: still masked
				}
			}
			k.step(st, slots)
		}
	}
}
