package serve

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlmcache/dlmcache/cache"
	"github.com/dlmcache/dlmcache/internal/memlimit"
)

// The Server: its state, New (which settles the Config, config.go, and
// builds the metrics, the batch workers and the routes), and its log
// lines. A completion request's stages are each in a file named for it:
//
//	routing.go   ServeHTTP (API key: auth.go), the mux, the handlers
//	job.go       the body parsed into a job (encode.go: the chat
//	             template; api.go: the wire types; contract.go: stop
//	             strings, unsupported fields), its generation options
//	complete.go  the request's life: its context, stream, response, error
//	queue.go     admission to a generation slot (429, 503)
//	generate.go  the generation (batch.go, workers.go: the batched
//	             forwards) and its answer, stats and metrics
//	stream.go    the streamed response's events (output.go: its buffer)
//	shutdown.go  Serve and the graceful shutdown

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
	warned   sync.Map // table regimes warned about (regime.Regime → true)
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

// Warnings are what New bounded or found doubtful in the configuration,
// for the start-up lines.
func (s *Server) Warnings() []string { return s.warnings }

// Method is the caching method served.
func (s *Server) Method() cache.Method { return s.cfg.Method }

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

// logf writes a log line (when the server logs).
func (s *Server) logf(format string, args ...any) {
	if s.cfg.Log == nil {
		return
	}
	s.logMu.Lock()
	defer s.logMu.Unlock()
	fmt.Fprintf(s.cfg.Log, "%s %s\n", s.cfg.Now().UTC().Format(time.RFC3339), fmt.Sprintf(format, args...))
}
