package serve

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlmcache/dlmcache/cache"
	"github.com/dlmcache/dlmcache/internal/memlimit"
	"github.com/dlmcache/dlmcache/lut"
	"github.com/dlmcache/dlmcache/model"
	"github.com/dlmcache/dlmcache/model/load"
	"github.com/dlmcache/dlmcache/model/sample"
	"github.com/dlmcache/dlmcache/serve/kvevents"
)

// Config configures a Server.
type Config struct {
	Model *load.Model
	// Name is the model name reported in responses (default: the
	// directory's base name). Requests may name any model: one is served.
	Name string
	// Method is the caching method; every request gets its own planner
	// from it, and all share its store.
	Method cache.Method
	// Gen holds the default generation options (gen length, steps, block
	// length). Requests override them field by field.
	Gen sample.GenOptions

	// Guide is the guided decoder's guide: an autoregressive model of the
	// model's vocabulary and chat template (the caller checks they agree:
	// dlmcache serve --guide). Requests whose method decodes guided
	// (NAME@guided, a table's guided choice) are verified by it; its
	// forwards are batched as the model's are (MaxBatch above 1).
	Guide *load.Model
	// GuideStore, if not nil, is the guide's prefix store: a block store
	// of the guide's alone, from which each guided request's shared
	// prefix comes exactly at every layer (cache.GuidePrefix).
	GuideStore *cache.BlockStore

	// MaxConcurrency is how many generations run at once (default 1; see
	// docs/serving.md for why one is the right number on a CPU).
	MaxConcurrency int
	// MaxBatch, if above 1, runs the step forwards of up to MaxBatch
	// running generations as one batched forward (continuous batching;
	// see batch.go); MaxConcurrency then defaults to MaxBatch (over all
	// workers).
	MaxBatch int
	// Workers, with MaxBatch above 1, is how many batches run side by
	// side (default 1), each on its share of the backend's threads while
	// others have work (workers.go); more than one needs a backend that
	// divides its threads (backend.Threaded).
	Workers int
	// MaxQueue is how many more requests may wait for a slot (default
	// 4·MaxConcurrency); past it a request gets 429 at once.
	MaxQueue int
	// QueueWait bounds the wait for a slot (default: Timeout); past it a
	// request gets 503.
	QueueWait time.Duration
	// Timeout bounds one request, queueing included (default 5 minutes);
	// past it the request gets 504.
	Timeout time.Duration
	// ReadHeaderTimeout bounds reading a request's header (default 10 s),
	// ReadTimeout its header and body (default 30 s), IdleTimeout how
	// long a keep-alive connection may wait for its next request
	// (default 2 min).
	ReadHeaderTimeout, ReadTimeout, IdleTimeout time.Duration
	// MaxBodyBytes bounds a request body (default 1 MiB); past it 413.
	MaxBodyBytes int64
	// StreamBufferBytes (at least MinStreamBufferBytes) bounds a streamed
	// response's output waiting for
	// its client (default 1 MiB); past it the request is cancelled
	// (slow_reader; output.go).
	StreamBufferBytes int
	// WriteTimeout bounds one write to a client that makes no progress
	// (default 30 s); past it the response is cut and the request
	// cancelled (write_timeout).
	WriteTimeout time.Duration
	// MaxContext bounds prompt + gen length in tokens (default: the model's
	// max_sequence_length; DefaultMaxContext, with a warning, when that is
	// 0 or above MaxModelContext).
	MaxContext int
	// MaxGenLength bounds a request's gen length: the completion tokens
	// (max_tokens) it may ask for (default 1024).
	MaxGenLength int

	// Events, if not nil, is the block store's KV event log, served at
	// GET /v1/kv_events.
	Events *cache.EventLog

	// KVEvents, if not nil, publishes the event log in vLLM's wire format
	// (ZMQ; serve/kvevents): its counters are in /metrics, and
	// /v1/models names the block size a router must match.
	KVEvents *kvevents.Publisher

	// ResetPrefixCache serves POST /reset_prefix_cache (vLLM's), which
	// clears every tenant's blocks: off by default, as any client with a
	// key could otherwise empty the cache for all.
	ResetPrefixCache bool

	// StoreAnswers, with a block store, keeps each answered conversation's
	// blocks (the conversation and its answer as the next turn renders
	// them) so that the next turn reuses them all; it costs a fill forward
	// over the question and the answer per request.
	StoreAnswers bool

	// Modules, if not nil, is the prompt-module schema chat requests may
	// import from ("modules": […]; modules.go), served at GET /v1/modules.
	Modules *Modules

	// IdleTrim is how long the server must be idle (no request in
	// flight) before it returns the memory the last burst left (pooled
	// buffers, freed heap) to the kernel (default 2 s; negative: never).
	IdleTrim time.Duration

	// MaxEventWaits bounds the /v1/kv_events long-polls (wait > 0) open at
	// once (default 64); more get 429.
	MaxEventWaits int

	// APIKeys, if any, are the keys a request must carry (auth.go). Each
	// key is its own cache namespace unless SharedCacheAcrossKeys: then
	// only cache_salt separates tenants.
	APIKeys               []string
	SharedCacheAcrossKeys bool

	// Log, if not nil, gets one line per request.
	Log io.Writer
	// Now is the clock (tests); default time.Now.
	Now func() time.Time
}

// Server serves completions with one model and one caching method. It is
// an http.Handler; Serve runs it on a listener with graceful shutdown.
type Server struct {
	cfg     Config
	mux     *http.ServeMux
	slots   chan struct{}
	waiting atomic.Int64
	met     *metrics
	logMu   sync.Mutex
	closing atomic.Bool
	// draining is closed when a shutdown starts: the KV-event long-polls
	// are answered at once, so they never hold up a graceful shutdown.
	draining   chan struct{}
	drainOnce  sync.Once
	eventWaits atomic.Int64 // KV-event long-polls open
	warnings   []string     // said at start-up (Warnings)
	// base ends (cause errShutdown) when a shutdown's grace period is
	// over: the requests still running are cancelled and answered 503.
	base     context.Context
	shutdown context.CancelCauseFunc
	warned   sync.Map // table regimes warned about (lut.Regime → true)
	batch    *workers // nil: each generation runs its own forwards
	keys     apiKeys  // nil: no API key needed
	trim     *memlimit.Trimmer
}

// New checks cfg and returns a Server.
func New(cfg Config) (*Server, error) {
	if cfg.Model == nil {
		return nil, errors.New("serve: no model")
	}
	if cfg.Model.Tokenizer == nil {
		return nil, fmt.Errorf("serve: model %s has no tokenizer", cfg.Model.Dir)
	}
	warnings, err := cfg.settle()
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, mux: http.NewServeMux(), slots: make(chan struct{}, cfg.MaxConcurrency), draining: make(chan struct{}), warnings: warnings}
	s.base, s.shutdown = context.WithCancelCause(context.Background())
	for i, k := range cfg.APIKeys {
		if strings.TrimSpace(k) == "" || strings.TrimSpace(k) != k {
			return nil, fmt.Errorf("serve: API key %d is empty or has surrounding spaces", i+1)
		}
	}
	s.keys = newAPIKeys(cfg.APIKeys)
	if cfg.IdleTrim >= 0 {
		s.trim = &memlimit.Trimmer{After: cmp.Or(cfg.IdleTrim, 2*time.Second), Trimmed: func(before, after uint64) {
			s.logf("idle: memory trimmed, heap held %d → %d MiB", before>>20, after>>20)
		}}
	}
	s.met = newServerMetrics(cfg)
	if cfg.MaxBatch > 1 {
		w, err := newWorkers(cfg.Model.Network, max(1, cfg.Workers), cfg.MaxBatch, func(n int) { s.met.batchSize.Observe(float64(n)) })
		if err != nil {
			return nil, fmt.Errorf("serve: %w", err)
		}
		if cfg.Guide != nil {
			w.addGuide(cfg.Guide.Network, cfg.MaxBatch, func(n int) { s.met.guide.batchSize.Observe(float64(n)) })
		}
		s.batch = w
	}
	s.routes()
	return s, nil
}

// settle fills c's defaults in (every serve default is decided here),
// refusing what cannot be served; it returns what it bounded or found
// doubtful, for the start-up lines.
func (c *Config) settle() (warnings []string, err error) {
	if c.Method == nil {
		none, err := cache.New("none", cache.Options{})
		if err != nil {
			return nil, err
		}
		c.Method = none
	}
	if err := cache.CheckModel(c.Method, c.Model.Config); err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	if err := checkGuide(*c); err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	if c.Name == "" {
		c.Name = c.Model.Name()
	}
	if c.Gen.GenLength == 0 {
		card := c.Model.Card
		c.Gen.GenLength, c.Gen.Steps, c.Gen.BlockLength = card.GenLength, card.Steps, card.BlockLength
	}
	c.Gen = sample.BlockDefaults(c.Model.Config, c.Gen) // a block-causal model's own blocks and decoder
	if c.Gen.BlockLength == 0 {
		c.Gen.BlockLength = c.Gen.GenLength
	}
	if _, err := sample.ScheduleFor(c.Model.Config, 0, c.Gen); err != nil {
		return nil, fmt.Errorf("serve: default generation options: %w", err)
	}
	if c.MaxConcurrency <= 0 {
		c.MaxConcurrency = max(1, c.MaxBatch)
	}
	if c.MaxQueue < 0 {
		c.MaxQueue = 0
	} else if c.MaxQueue == 0 {
		c.MaxQueue = 4 * c.MaxConcurrency
	}
	if c.Timeout <= 0 {
		c.Timeout = 5 * time.Minute
	}
	if c.QueueWait <= 0 || c.QueueWait > c.Timeout {
		c.QueueWait = c.Timeout
	}
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = 1 << 20
	}
	c.ReadHeaderTimeout = cmp.Or(max(c.ReadHeaderTimeout, 0), 10*time.Second)
	c.ReadTimeout = cmp.Or(max(c.ReadTimeout, 0), 30*time.Second)
	c.IdleTimeout = cmp.Or(max(c.IdleTimeout, 0), 2*time.Minute)
	if c.StreamBufferBytes <= 0 {
		c.StreamBufferBytes = defaultStreamBuffer
	} else if c.StreamBufferBytes < MinStreamBufferBytes {
		return nil, fmt.Errorf("serve: --stream-buffer-bytes %d: want at least %d (one canvas event of 1,024 slots takes up to 20 KiB: a smaller buffer cuts streams read promptly)", c.StreamBufferBytes, MinStreamBufferBytes)
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = defaultWriteTimeout
	}
	if c.MaxContext <= 0 {
		c.MaxContext = c.Model.Config.MaxSequenceLength
		if c.MaxContext <= 0 || c.MaxContext > MaxModelContext {
			warnings = append(warnings, fmt.Sprintf("the model's context length (max_sequence_length or context_length) is %d, which bounds nothing: requests are held to %d tokens, prompt and answer (set --max-context to change it)",
				c.MaxContext, DefaultMaxContext))
			c.MaxContext = DefaultMaxContext
		}
	}
	if c.MaxGenLength <= 0 {
		c.MaxGenLength = DefaultMaxGenLength
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.MaxEventWaits <= 0 {
		c.MaxEventWaits = DefaultMaxEventWaits
	}
	return warnings, nil
}

// newServerMetrics registers c's metrics: the prefix stores' counters
// (the method's store and the modules'), the KV events' and the guide's.
func newServerMetrics(c Config) *metrics {
	// The prefix-store metrics count the method's store and the modules'.
	var stores []cache.PrefixStore
	for _, m := range []cache.Method{c.Method, c.Modules.Method()} {
		if st := cache.StoreOf(m); m != nil && st != nil {
			stores = append(stores, st)
		}
	}
	var store func() cache.Stats
	if len(stores) > 0 {
		store = func() cache.Stats {
			var sum cache.Stats
			for _, st := range stores {
				sum = sum.Plus(st.Stats())
			}
			return sum
		}
	}
	m := newMetrics(c.Method.Name(), c.Model.Backend, store, c.Now)
	if c.KVEvents != nil {
		m.addKVEvents(c.KVEvents.Stats)
	}
	if c.Guide != nil {
		var gstore func() cache.Stats
		if c.GuideStore != nil {
			gstore = c.GuideStore.Stats
		}
		m.addGuide(c.Guide.Name(), gstore)
	}
	return m
}

// routes registers the HTTP API.
func (s *Server) routes() {
	s.mux.HandleFunc("POST /v1/chat/completions", s.handleChat)
	s.mux.HandleFunc("POST /v1/completions", s.handleCompletion)
	s.mux.HandleFunc("GET /v1/models", s.handleModels)
	s.mux.HandleFunc("GET /metrics", s.handleMetrics)
	s.mux.HandleFunc("GET /healthz", s.handleHealth)
	s.mux.HandleFunc("GET /health", s.handleHealth) // the path vLLM and SGLang serve
	s.mux.HandleFunc("GET /v1/kv_events", s.handleKVEvents)
	s.mux.HandleFunc("POST /tokenize", s.handleTokenize)
	s.mux.HandleFunc("POST /detokenize", s.handleDetokenize)
	s.mux.HandleFunc("POST /reset_prefix_cache", s.handleResetPrefixCache)
	s.mux.HandleFunc("GET /v1/modules", s.handleModules)
	s.mux.HandleFunc("GET /{$}", s.handlePlayground)
}

// Warnings are what New bounded or found doubtful in the configuration,
// for the start-up lines.
func (s *Server) Warnings() []string { return s.warnings }

// A model's context length of 0 or above MaxModelContext bounds nothing
// (a zero config field, a corrupt or hostile file): the server then holds
// requests to DefaultMaxContext tokens (LLaDA-8B's context) with a warning.
const (
	DefaultMaxContext = 4096
	MaxModelContext   = 1 << 20
)

// DefaultMaxGenLength is Config.MaxGenLength's default: a request's
// completion tokens at most.
const DefaultMaxGenLength = 1024

// Method is the caching method served.
func (s *Server) Method() cache.Method { return s.cfg.Method }

// ServeHTTP implements http.Handler. Without a valid API key (when the
// server has keys) a request gets 401; unknown paths get a 404 and wrong
// methods a 405; all in OpenAI's error shape.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ok, key := s.keys.allows(r)
	if !ok {
		s.unauthorized(w, r)
		return
	}
	if key != nil && !s.cfg.SharedCacheAcrossKeys {
		r = r.WithContext(context.WithValue(r.Context(), keyNamespace{}, namespaceOf(key)))
	}
	if _, pattern := s.mux.Handler(r); pattern == "" {
		rec := &statusWriter{ResponseWriter: w}
		start := s.cfg.Now()
		allow := ""
		for _, m := range []string{"GET", "POST"} {
			probe := r.Clone(r.Context())
			probe.Method = m
			if _, p := s.mux.Handler(probe); p != "" {
				allow = m
			}
		}
		if allow != "" {
			w.Header().Set("Allow", allow)
			writeError(rec, newAPIError(http.StatusMethodNotAllowed, "invalid_request_error", "method_not_allowed", "",
				fmt.Sprintf("%s %s: method not allowed (use %s)", r.Method, r.URL.Path, allow)))
		} else {
			writeError(rec, newAPIError(http.StatusNotFound, "invalid_request_error", "not_found", "",
				fmt.Sprintf("%s %s: no such endpoint (have POST /v1/chat/completions, POST /v1/completions, GET /v1/models, GET /metrics, GET /health, GET /healthz, GET /v1/kv_events, POST /tokenize, POST /detokenize, POST /reset_prefix_cache, GET / (the playground))", r.Method, r.URL.Path)))
		}
		s.met.unrouted.WithLabelValues(strconv.Itoa(rec.status)).Inc()
		s.logRequest(r, rec.status, s.cfg.Now().Sub(start), "")
		return
	}
	s.mux.ServeHTTP(w, r)
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	if s.closing.Load() {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "shutting down"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"status": "ok", "model": s.cfg.Name, "method": s.cfg.Method.Name()})
}

func (s *Server) handleModels(w http.ResponseWriter, r *http.Request) {
	m := map[string]any{"id": s.cfg.Name, "object": "model", "created": 0, "owned_by": "dlmcache", "max_model_len": s.cfg.MaxContext}
	// The block size a cache-aware router must hash prompts in to find
	// this replica's blocks (vLLM's --block-size).
	if bs, ok := cache.StoreOf(s.cfg.Method).(*cache.BlockStore); ok {
		m["block_size"] = bs.BlockSize()
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": []map[string]any{m}})
}

func (s *Server) handleModules(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Modules == nil {
		writeError(w, newAPIError(http.StatusNotFound, "invalid_request_error", "no_modules", "", "this server declares no prompt modules (serve --modules FILE)"))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": s.cfg.Modules.Infos()})
}

func (s *Server) handleMetrics(w http.ResponseWriter, r *http.Request) {
	s.met.handler().ServeHTTP(w, r)
}

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

func (s *Server) handleChat(w http.ResponseWriter, r *http.Request) {
	s.complete(w, r, "/v1/chat/completions", func(ctx context.Context, body io.Reader) (*job, *apiError) {
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
	}, func(id string, created int64, res *result) any {
		return &chatResponse{ID: "chatcmpl-" + id, Object: "chat.completion", Created: created, Model: s.cfg.Name,
			SystemFingerprint: s.fingerprint(),
			Choices:           []chatChoice{{Index: 0, Message: responseMessage{Role: "assistant", Content: res.text}, FinishReason: res.finish}},
			Usage:             res.usage(), Dlmcache: res.stats}
	}, s.chatChunk)
}

func (s *Server) handleCompletion(w http.ResponseWriter, r *http.Request) {
	s.complete(w, r, "/v1/completions", func(ctx context.Context, body io.Reader) (*job, *apiError) {
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
	}, func(id string, created int64, res *result) any {
		return &completionResponse{ID: "cmpl-" + id, Object: "text_completion", Created: created, Model: s.cfg.Name,
			SystemFingerprint: s.fingerprint(),
			Choices:           []completionChoice{{Index: 0, Text: res.text, FinishReason: res.finish}},
			Usage:             res.usage(), Dlmcache: res.stats}
	}, s.completionChunk)
}

func (s *Server) fingerprint() string {
	fp := s.cfg.Model.Fingerprint
	if len(fp) > 16 {
		fp = fp[:16]
	}
	return "dlmcache-" + s.cfg.Method.Name() + "-" + fp
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
	meth = cache.Resolve(meth, len(ids), prefixLen, gen) // the table's choice for this request
	gen = meth.Gen(gen)
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
	blocks := o.GenLength / o.BlockLength
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

// complete runs the shared part of both completion endpoints: bounded body,
// parse, admission, generation, response.
func (s *Server) complete(w http.ResponseWriter, r *http.Request, endpoint string,
	parse func(context.Context, io.Reader) (*job, *apiError), respond func(id string, created int64, res *result) any, chunk chunkFunc) {
	start := s.cfg.Now()
	status := http.StatusOK
	note := ""
	s.met.inFlight.Inc()
	s.met.inFlightN.Add(1)
	if s.trim != nil {
		s.trim.Busy()
		defer s.trim.Idle()
	}
	defer func() {
		s.met.inFlight.Dec()
		s.met.inFlightN.Add(-1)
		d := s.cfg.Now().Sub(start)
		s.met.request(endpoint, status, d)
		s.logRequest(r, status, d, note)
	}()
	cancelled := "" // why the request was cancelled, if it was
	defer func() {
		if cancelled != "" {
			s.met.cancel(cancelled)
		}
	}()
	rc := http.NewResponseController(w)
	writeBody := func(code int, v any) {
		rc.SetWriteDeadline(time.Now().Add(s.cfg.WriteTimeout)) //nolint:errcheck // unsupported: a recorder (tests)
		writeJSON(w, code, v)
	}
	var sink *sseSink
	fail := func(e *apiError) {
		status = e.Status
		note = "error=" + strings.ReplaceAll(abbrev(e.Message), " ", "_")
		if e.cancelled != "" {
			cancelled = e.cancelled
			note = "cancelled=" + e.cancelled + " " + note
		}
		if sink == nil || !sink.fail(e) {
			if e.Status == http.StatusTooManyRequests || e.Status == http.StatusServiceUnavailable {
				w.Header().Set("Retry-After", "1")
			}
			writeBody(e.Status, map[string]*apiError{"error": e})
		}
	}
	if s.closing.Load() {
		fail(newAPIError(http.StatusServiceUnavailable, "server_error", "shutting_down", "", "the server is shutting down"))
		return
	}
	// The request's context ends when its client goes away, at its
	// deadline (--timeout, from here: the chat template's rendering is
	// under it too), when its stream is cut (a client that does not read
	// it), or when a shutdown's grace period is over; its cause says which.
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	defer context.AfterFunc(s.base, func() { cancel(context.Cause(s.base)) })()
	ctx, cancelT := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancelT()
	j, e := parse(ctx, http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if e != nil {
		if ctx.Err() != nil {
			e = s.ctxError(ctx)
		}
		fail(e)
		return
	}
	j.endpoint = endpoint
	id := newID()
	if j.stream {
		sink = newSSESink(w, chunk, id, start.Unix(), j.usage, j.canvas)
		sink.limit, sink.timeout = s.cfg.StreamBufferBytes, s.cfg.WriteTimeout
		sink.onCut = func(c *cutError) { cancel(c) }
		j.sink = sink
		s.streamHooks(j)
		// The writer must be done before the handler returns.
		defer func() {
			if c := sink.close(); c != nil {
				// Cut: the client has not read (or could not be sent)
				// the rest, whatever ended the request first.
				status, cancelled = 499, c.cause.Error()
				note = fmt.Sprintf("cancelled=%s (%s)", c.cause, c.detail)
			}
		}()
	}
	res, e := s.run(ctx, j)
	if e != nil {
		fail(e)
		return
	}
	note = fmt.Sprintf("prompt=%d prefix=%d depth=%d hit=%t gen=%d nfe=%d rows=%.3f queue=%.3fs gen_s=%.3f",
		res.promptTokens, res.stats.PrefixTokens, res.stats.Depth, res.stats.PrefixHit, res.stats.GenLength,
		res.stats.NFE, res.stats.RowsFraction, res.stats.QueueSeconds, res.stats.Seconds)
	if sink != nil {
		sink.finish(res)
		return
	}
	writeBody(http.StatusOK, respond(id, start.Unix(), res))
}

// run waits for a generation slot and generates.
func (s *Server) run(ctx context.Context, j *job) (*result, *apiError) {
	qstart := s.cfg.Now()
	if n := s.waiting.Add(1); n > int64(s.cfg.MaxQueue)+int64(s.cfg.MaxConcurrency) {
		s.waiting.Add(-1)
		s.met.reject("queue_full")
		return nil, newAPIError(http.StatusTooManyRequests, "rate_limit_error", "queue_full", "",
			fmt.Sprintf("the server is busy: %d generations running and %d waiting (the limits); retry later", s.cfg.MaxConcurrency, s.cfg.MaxQueue))
	}
	s.met.setQueued(1)
	wait := time.NewTimer(s.cfg.QueueWait)
	defer wait.Stop()
	select {
	case s.slots <- struct{}{}:
		s.met.setQueued(-1)
	case <-wait.C:
		s.met.setQueued(-1)
		s.waiting.Add(-1)
		if ctx.Err() != nil {
			return nil, s.ctxError(ctx)
		}
		s.met.reject("queue_timeout")
		return nil, newAPIError(http.StatusServiceUnavailable, "server_error", "queue_timeout", "",
			fmt.Sprintf("no generation slot became free within %s; retry later", s.cfg.QueueWait))
	case <-ctx.Done():
		s.met.setQueued(-1)
		s.waiting.Add(-1)
		return nil, s.ctxError(ctx)
	}
	defer func() {
		<-s.slots
		s.waiting.Add(-1)
	}()
	queued := s.cfg.Now().Sub(qstart)
	s.met.running.Inc()
	defer s.met.running.Dec()

	meth := j.meth
	s.checkRegime(j.gen)
	lm := s.cfg.Model
	g0, steps, e := s.guided(j)
	if e != nil {
		return nil, e
	}
	gen, leave := s.batched(ctx, g0)
	defer leave()
	// Count every forward, those of a generation cancelled midway too.
	forwards, forward := 0, gen.Forward
	if forward == nil {
		forward = lm.Network.Forward
	}
	gen.Forward = func(in model.Input, plan model.Plan) (*model.Output, error) {
		out, err := forward(in, plan)
		if err == nil {
			forwards++
		}
		return out, err
	}
	first, onBlock := true, gen.OnBlock
	gen.OnBlock = func(b, end int, canvas []int32) {
		if first {
			first = false
			s.met.firstBlock.Observe(s.cfg.Now().Sub(qstart).Seconds())
		}
		if onBlock != nil {
			onBlock(b, end, canvas)
		}
	}
	res, err := cache.Run(ctx, lm.Network, meth, cache.Request{Prompt: j.ids, PrefixLen: j.prefixLen, Salt: j.salt, Positions: j.pos}, gen)
	if err != nil {
		s.met.nfe.Add(float64(forwards))
		if ctx.Err() != nil {
			return nil, s.ctxError(ctx)
		}
		return nil, internalError(fmt.Errorf("generation failed: %w", err))
	}
	g, info := res.Generation, res.Info
	text, n, finish := s.answer(g.Answer, j.maxTokens, j.stop)
	if s.cfg.StoreAnswers && j.conv != nil {
		if toks, err := j.conv.answered(ctx, lm.Tokenizer, text); err == nil {
			if _, _, err := cache.StorePrefix(lm.Network, meth, toks, j.salt); err != nil {
				return nil, internalError(fmt.Errorf("storing the answered conversation: %w", err))
			}
		}
	}
	st := Stats{Method: meth.Name(), Depth: info.Depth, Ratio: float64(j.prefixLen) / float64(len(j.ids)+j.gen.GenLength),
		Clamped: info.Clamped, PrefixTokens: j.prefixLen, PrefixHit: info.Hit, PrefixHitTokens: info.HitTokens, NFE: g.NFE,
		GenLength: j.gen.GenLength, Steps: j.gen.Steps, BlockLength: j.gen.BlockLength,
		Seconds: g.Duration.Seconds(), QueueSeconds: queued.Seconds()}
	if g.RowsFull > 0 {
		st.RowsFraction = float64(g.RowsComputed) / float64(g.RowsFull)
	}
	if g.Duration > 0 {
		st.TokensPerSec = float64(j.gen.GenLength) / g.Duration.Seconds()
	}
	if steps != nil {
		gs := g.Guide
		st.Guide = &GuideStats{Model: s.cfg.Guide.Name(), NFE: gs.NFE, Steps: gs.Steps, Committed: gs.Committed, Accepted: gs.Accepted, Kept: gs.Kept,
			AcceptLen: gs.AcceptLen(), StepTokens: *steps, PrefixTokens: gs.PrefixTokens, PrefixHitTokens: gs.PrefixHitTokens,
			DLMSeconds: gs.DLMTime.Seconds(), GuideSeconds: gs.GuideTime.Seconds()}
		s.met.guided(gs)
	}
	s.met.generation(&st, len(j.ids), n, s.cfg.Now())
	s.met.rows(g.RowsComputed, g.RowsFull, g.FLOPs+info.PrefixFLOPs, g.FLOPsFull)
	cached := 0
	if info.Depth >= len(lm.Network.Blocks) {
		cached = info.HitTokens
	}
	return &result{text: text, finish: finish, completion: n, stats: st, promptTokens: len(j.ids), cachedTokens: cached}, nil
}

// guided gives a job whose method decodes guided the server's guide, its
// prefix store and a record of the tokens each step commits (steps; nil
// for another decoder).
func (s *Server) guided(j *job) (sample.GenOptions, *[]int, *apiError) {
	o := j.gen
	if !sample.DecodingOf(o).Guided() {
		return o, nil, nil
	}
	g := s.cfg.Guide
	if g == nil {
		return o, nil, internalError(fmt.Errorf("method %s decodes with the guided decoder, but the server holds no guide (serve --guide)", j.meth.Name()))
	}
	o.Guide = g.Network
	if st := s.cfg.GuideStore; st != nil {
		o.GuidePrefix = cache.GuidePrefix(st, g.Fingerprint, j.salt)
	}
	steps := new([]int)
	onStep := o.OnStep
	o.OnStep = func(st *sample.Step, committed []int32) {
		*steps = append(*steps, len(committed))
		s.met.guide.stepTokens.Observe(float64(len(committed)))
		if onStep != nil {
			onStep(st, committed)
		}
	}
	return o, steps, nil
}

// checkGuide refuses a guide that is not autoregressive, a guide store
// without a guide, and a method that decodes guided without a guide.
func checkGuide(cfg Config) error {
	g := cfg.Guide
	switch {
	case g == nil && cfg.GuideStore != nil:
		return errors.New("a guide prefix store without a guide")
	case g == nil && sample.DecodingOf(cfg.Method.Gen(cfg.Gen)).Guided():
		return fmt.Errorf("method %s decodes with the guided decoder: it needs a guide (serve --guide MODEL)", cfg.Method.Name())
	case g == nil && cache.TableOf(cfg.Method) != nil && cache.TableOf(cfg.Method).GuidedChoices():
		return errors.New("the table's choices decode with the guided decoder: they need a guide (serve --guide MODEL)")
	case g == nil:
		return nil
	case !g.Config.Causal:
		return fmt.Errorf("the guide %s (%s) is not an autoregressive model", g.Name(), g.Config.ArchName())
	case g.Config.VocabSize != cfg.Model.Config.VocabSize:
		return fmt.Errorf("the guide %s has %d tokens, the model %d: they must share a vocabulary", g.Name(), g.Config.VocabSize, cfg.Model.Config.VocabSize)
	}
	return nil
}

// answer decodes the answer slots up to the first stop token, then applies
// the request's cap (maxTokens > 0) and stop strings. finish is "stop" when
// a stop token or string ended the answer, "length" when the slots or the
// cap did. n counts the tokens whose text is returned.
func (s *Server) answer(ids []int32, maxTokens int, stop []string) (text string, n int, finish string) {
	lm := s.cfg.Model
	n = lm.AnswerEnd(ids)
	finish = "length"
	if n < len(ids) {
		finish = "stop"
	}
	if maxTokens > 0 && n > maxTokens {
		n, finish = maxTokens, "length"
	}
	text = lm.Tokenizer.Decode(ids[:n])
	if cut, ok := cutAtStop(text, stop); ok {
		text, finish = cut, "stop"
		for n > 0 && len(lm.Tokenizer.Decode(ids[:n])) > len(cut) {
			n--
		}
	}
	return text, n, finish
}

// errShutdown is the cause of the requests a shutdown cuts after its grace
// period.
var errShutdown = errors.New("shutdown")

// ctxError turns a request context's end into its response, by cause.
func (s *Server) ctxError(ctx context.Context) *apiError {
	cause := context.Cause(ctx)
	var cut *cutError
	var e *apiError
	switch {
	case errors.As(cause, &cut):
		// The client reads nothing more.
		e = newAPIError(499, "invalid_request_error", cut.cause.Error(), "", "the response was cut: "+cut.detail)
		e.cancelled = cut.cause.Error()
	case errors.Is(cause, errShutdown):
		e = newAPIError(http.StatusServiceUnavailable, "server_error", "shutting_down", "",
			"the server shut down before the request finished; retry")
		e.cancelled = "shutdown"
	case errors.Is(cause, context.DeadlineExceeded):
		e = newAPIError(http.StatusGatewayTimeout, "server_error", "timeout", "",
			fmt.Sprintf("the request did not finish within the server's limit of %s (--timeout)", s.cfg.Timeout))
		e.cancelled = "timeout"
	default:
		// The client went away; 499 as nginx logs it (nobody reads the body).
		e = newAPIError(499, "invalid_request_error", "client_closed_request", "", "the client closed the request")
		e.cancelled = "client_closed"
	}
	return e
}

func newID() string {
	var b [12]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// checkRegime warns, once per regime, when a request is generated in
// another regime than the one its method's table was profiled in (its
// depths were measured there), and counts it.
func (s *Server) checkRegime(o sample.GenOptions) {
	t := cache.TableOf(s.cfg.Method)
	if t == nil {
		return
	}
	g := lut.Regime{GenLength: o.GenLength, Steps: o.Steps, BlockLength: o.BlockLength}
	err := t.CheckRegime(g)
	if err == nil {
		return
	}
	s.met.regimeMismatch.Inc()
	if _, seen := s.warned.LoadOrStore(g, true); !seen && s.cfg.Log != nil {
		s.logMu.Lock()
		fmt.Fprintf(s.cfg.Log, "%s warning: a request at %s: %v; served with the table's depths anyway\n", s.cfg.Now().UTC().Format(time.RFC3339), g, err)
		s.logMu.Unlock()
	}
}

func (s *Server) logRequest(r *http.Request, status int, d time.Duration, note string) {
	if s.cfg.Log == nil {
		return
	}
	if status == 0 {
		status = http.StatusOK
	}
	s.logMu.Lock()
	defer s.logMu.Unlock()
	fmt.Fprintf(s.cfg.Log, "%s %s %s %s %d %.3fs %s\n", s.cfg.Now().UTC().Format(time.RFC3339), r.RemoteAddr, r.Method, r.URL.Path, status, d.Seconds(), note)
}

// Serve serves on ln until ctx is done, then shuts down gracefully: it
// stops accepting, answers new completion requests with 503 and /healthz
// with 503, and waits up to grace for the requests in flight. Those still
// running then are cancelled, answered 503 (shutting_down) and logged; the
// connections left after a few more seconds are closed. It returns nil
// after a shutdown that cut nothing.
func (s *Server) Serve(ctx context.Context, ln net.Listener, grace time.Duration) error {
	hs := s.httpServer()
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	s.Drain()
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	err := hs.Shutdown(sctx)
	if err != nil {
		n := s.met.inFlightN.Load()
		s.logf("shutdown: %d requests still running after the %s grace period: cancelling them (503)", n, grace)
		s.shutdown(errShutdown)
		// A generation stops at its next step boundary; give the handlers
		// that long to answer, then close what is left.
		cctx, ccancel := context.WithTimeout(context.Background(), shutdownAnswer)
		defer ccancel()
		if cerr := hs.Shutdown(cctx); cerr != nil {
			hs.Close()
		}
		err = fmt.Errorf("serve: %d requests still running after the %s grace period were cancelled (503)", n, grace)
	}
	if serr := <-errc; serr != nil && !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}

// Drain starts a shutdown's first part (Serve calls it): new completion
// requests get 503, and the KV-event long-polls are answered now with the
// events they have.
func (s *Server) Drain() {
	s.closing.Store(true)
	s.drainOnce.Do(func() { close(s.draining) })
}

// shutdownAnswer is how long a shutdown waits, after cancelling the
// requests still running, for their handlers to answer them.
const shutdownAnswer = 10 * time.Second

// httpServer is the http.Server Serve runs, with the connection timeouts.
func (s *Server) httpServer() *http.Server {
	return &http.Server{Handler: s, ReadHeaderTimeout: s.cfg.ReadHeaderTimeout, ReadTimeout: s.cfg.ReadTimeout,
		IdleTimeout: s.cfg.IdleTimeout}
}

// logf writes a log line (when the server logs).
func (s *Server) logf(format string, args ...any) {
	if s.cfg.Log == nil {
		return
	}
	s.logMu.Lock()
	defer s.logMu.Unlock()
	fmt.Fprintf(s.cfg.Log, "%s %s\n", s.cfg.Now().UTC().Format(time.RFC3339), fmt.Sprintf(format, args...))
}
