package serve

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// A completion request's life (complete): the bounded body parsed into a
// job, the request's context (its client, --timeout, a cut stream, a
// shutdown; ctxError turns its end into the answer), the stream's sink
// when it streams, the run (queue.go, generate.go), then the response or
// the error in OpenAI's shape, with the request's metrics and log line.

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

// respondChat is a chat completion's response (unstreamed).
func (s *Server) respondChat(id string, created int64, res *result) any {
	return &chatResponse{ID: "chatcmpl-" + id, Object: "chat.completion", Created: created, Model: s.cfg.Name,
		SystemFingerprint: s.fingerprint(),
		Choices:           []chatChoice{{Index: 0, Message: responseMessage{Role: "assistant", Content: res.text}, FinishReason: res.finish}},
		Usage:             res.usage(), Dlmcache: res.stats}
}

// respondCompletion is a text completion's response (unstreamed).
func (s *Server) respondCompletion(id string, created int64, res *result) any {
	return &completionResponse{ID: "cmpl-" + id, Object: "text_completion", Created: created, Model: s.cfg.Name,
		SystemFingerprint: s.fingerprint(),
		Choices:           []completionChoice{{Index: 0, Text: res.text, FinishReason: res.finish}},
		Usage:             res.usage(), Dlmcache: res.stats}
}

func (s *Server) fingerprint() string {
	fp := s.cfg.Model.Fingerprint
	if len(fp) > 16 {
		fp = fp[:16]
	}
	return "dlmcache-" + s.cfg.Method.Name() + "-" + fp
}
