package serve

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// The queue: admission to the MaxConcurrency generation slots. Up to
// MaxQueue more requests wait for one (429 at once past that), each for
// QueueWait at most (503), or until its context ends; the queued gauge
// and the rejections are counted here.

// admit waits for a generation slot; release gives it back (run defers
// it). It fails with the queue's 429 or 503, or the context's error when
// the request's context ends first.
func (s *Server) admit(ctx context.Context) (release func(), e *apiError) {
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
	return func() {
		<-s.slots
		s.waiting.Add(-1)
	}, nil
}
