package serve

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/dlmcache/dlmcache/cache"
	"github.com/dlmcache/dlmcache/model/load"
	"github.com/dlmcache/dlmcache/model/sample"
	"github.com/dlmcache/dlmcache/serve/kvevents"
)

// The server's configuration: Config, the bounds' constants, and settle,
// where every default is decided and what cannot be served is refused
// (New calls it first).

// Config configures a Server.
type Config struct {
	Model *load.Model
	// Name is the model name reported in responses (default: the
	// directory's base name). Requests may name any model: one is served.
	Name string
	// Method is the caching method (engine.Build's); every request gets
	// its own planner from it, and all share its store.
	Method cache.Method
	// Gen holds the default generation options (gen length, steps, block
	// length), settled (engine.Model.GenOptions). Requests override them
	// field by field.
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

// settle fills the server's own defaults in (the queue, the limits, the
// timeouts), refusing what cannot be served; it returns what it bounded
// or found doubtful, for the start-up lines. The method and the
// generation options come settled (engine.Build): they are checked here,
// not defaulted.
func (c *Config) settle() (warnings []string, err error) {
	if c.Method == nil {
		return nil, errors.New("serve: no method (engine.Build settles the served method)")
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
