package serve

import (
	"context"
	"fmt"
	"net/http"
	"strconv"

	"github.com/dlmcache/dlmcache/cache"
)

// Routing: the HTTP API's mux (routes), ServeHTTP in front of it (the API
// key, OpenAI-shaped 404 and 405 answers), and the handlers: the two
// completion endpoints hand their requests to complete (complete.go)
// with their parse (job.go), response and stream-chunk builders; the
// others answer at once.

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

func (s *Server) handleChat(w http.ResponseWriter, r *http.Request) {
	s.complete(w, r, "/v1/chat/completions", s.parseChat, s.respondChat, s.chatChunk)
}

func (s *Server) handleCompletion(w http.ResponseWriter, r *http.Request) {
	s.complete(w, r, "/v1/completions", s.parseCompletion, s.respondCompletion, s.completionChunk)
}
