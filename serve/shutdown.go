package serve

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"
)

// Serving on a listener and the graceful shutdown: Serve, Drain (new
// completions 503, long-polls answered), the grace period, then the
// requests still running cancelled with errShutdown and answered 503.

// errShutdown is the cause of the requests a shutdown cuts after its grace
// period.
var errShutdown = errors.New("shutdown")

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
