package serve

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"sync"
	"time"
)

// A streamed response's events are produced on its generation's goroutine,
// which in a batching server steps in lockstep with every other running
// generation: were it to write to the client's socket itself, one client
// that stops reading would stall the whole batch once the socket's buffers
// fill. So the events go through an outbox: a bounded per-request buffer
// drained by a writer goroutine of the request's own, which writes under a
// write deadline. Producing an event never blocks. A client that does not
// drain is cut at a clear limit, and its request cancelled (its generation
// leaves the batch at the next step boundary):
//
//   - slow_reader: more than the buffer's bytes (--stream-buffer-bytes) of
//     output are waiting for the client;
//   - write_timeout: one write to the client made no progress for the
//     write timeout (--write-timeout).

// errSlowReader and errWriteTimeout are the causes a request is cancelled
// with when its client does not read its stream.
var (
	errSlowReader   = errors.New("slow_reader")
	errWriteTimeout = errors.New("write_timeout")
	errClientGone   = errors.New("client_closed")
)

// cutError is why an outbox stopped: its cause (one of the errors above,
// for metrics) and the detail for the log.
type cutError struct {
	cause  error
	detail string
}

func (e *cutError) Error() string { return e.cause.Error() + ": " + e.detail }
func (e *cutError) Unwrap() error { return e.cause }

// outbox is one response's bounded output buffer and its writer.
type outbox struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	limit   int
	timeout time.Duration
	onCut   func(*cutError) // called once, when the outbox stops
	// tail, if not nil, is what a response cut for its backlog ends with
	// (an error event and [DONE]).
	tail func(*cutError) []byte

	mu      sync.Mutex
	buf     []byte // waiting for the writer
	spare   []byte // the writer's last batch, reused
	wake    chan struct{}
	closed  bool
	cut     *cutError
	ending  []byte // the tail to send after the write in progress
	started bool   // the writer has begun (the status line is out)
	done    chan struct{}
}

// newOutbox starts the writer. The header must be complete: the writer
// sends it with the first bytes.
func newOutbox(w http.ResponseWriter, limit int, timeout time.Duration, onCut func(*cutError), tail func(*cutError) []byte) *outbox {
	o := &outbox{w: w, rc: http.NewResponseController(w), limit: limit, timeout: timeout, onCut: onCut, tail: tail,
		wake: make(chan struct{}, 1), done: make(chan struct{})}
	go o.run()
	return o
}

// write queues b (copied). It never blocks on the client: past the limit
// it cuts the response and reports why.
func (o *outbox) write(b []byte) error {
	o.mu.Lock()
	if o.cut != nil || o.closed {
		o.mu.Unlock()
		return o.err()
	}
	if len(o.buf)+len(b) > o.limit {
		e := &cutError{errSlowReader, fmt.Sprintf("the client left more than %d bytes of its stream unread (--stream-buffer-bytes)", o.limit)}
		o.mu.Unlock()
		o.stop(e)
		return e
	}
	o.buf = append(o.buf, b...)
	o.mu.Unlock()
	select {
	case o.wake <- struct{}{}:
	default:
	}
	return nil
}

func (o *outbox) err() error {
	if o.cut != nil {
		return o.cut
	}
	return errors.New("output closed")
}

// stop cuts the response: nothing more is queued. Cut for its backlog
// (slow_reader), the write in progress may take cutTailWait more to
// finish and the response then ends with the events already queued and
// its tail (an error event and [DONE]); else what is queued is dropped, a write in progress returns at once (its deadline is moved
// to now) and nothing more is written.
func (o *outbox) stop(e *cutError) {
	o.mu.Lock()
	first := o.cut == nil
	if first {
		o.cut = e
		if o.tail != nil && errors.Is(e, errSlowReader) {
			o.ending = append(o.buf, o.tail(e)...) // the whole events queued, then the tail
		}
		o.buf = nil
	}
	ending := o.ending != nil
	o.mu.Unlock()
	if !first {
		return
	}
	if ending {
		o.rc.SetWriteDeadline(time.Now().Add(cutTailWait)) //nolint:errcheck // see below
	} else {
		o.rc.SetWriteDeadline(time.Now()) //nolint:errcheck // unsupported (a recorder): nothing blocks there
	}
	select {
	case o.wake <- struct{}{}:
	default:
	}
	if o.onCut != nil {
		o.onCut(e)
	}
}

// close lets the writer send what is queued and waits for it: at most
// the write timeout per write that makes no progress.
func (o *outbox) close() {
	o.mu.Lock()
	o.closed = true
	o.mu.Unlock()
	select {
	case o.wake <- struct{}{}:
	default:
	}
	<-o.done
}

// Started reports whether the writer has sent anything.
func (o *outbox) Started() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.started
}

func (o *outbox) run() {
	defer close(o.done)
	for {
		o.mu.Lock()
		for len(o.buf) == 0 && !o.closed && o.cut == nil {
			o.mu.Unlock()
			<-o.wake
			o.mu.Lock()
		}
		if o.cut != nil || len(o.buf) == 0 {
			tail := o.ending
			o.ending = nil
			o.mu.Unlock()
			if tail != nil {
				o.sendTail(tail)
			}
			return
		}
		b := o.buf
		o.buf, o.spare = o.spare[:0], nil
		o.started = true
		o.mu.Unlock()
		if err := o.send(b); err != nil {
			o.mu.Lock()
			o.ending = nil // the client cannot take the tail either
			o.mu.Unlock()
			o.stop(err)
			return
		}
		o.mu.Lock()
		if o.spare == nil && cap(b) <= 64<<10 {
			o.spare = b[:0] // keep a small buffer; let a large one go
		}
		o.mu.Unlock()
	}
}

// sendTail writes a cut response's tail, for at most cutTailWait.
func (o *outbox) sendTail(b []byte) {
	o.rc.SetWriteDeadline(time.Now().Add(cutTailWait)) //nolint:errcheck // see stop
	if _, err := o.w.Write(b); err == nil {
		o.rc.Flush() //nolint:errcheck // the response is over either way
	}
}

// cutTailWait is how long a stream cut for its backlog may take to finish
// the write in progress and to send its error event and [DONE].
const cutTailWait = time.Second

// send writes b and flushes it under the write deadline.
func (o *outbox) send(b []byte) *cutError {
	o.mu.Lock()
	ending := o.ending != nil
	o.mu.Unlock()
	if o.timeout > 0 && !ending {
		o.rc.SetWriteDeadline(time.Now().Add(o.timeout)) //nolint:errcheck // see stop
	}
	_, err := o.w.Write(b)
	if err == nil {
		err = o.rc.Flush()
		if errors.Is(err, http.ErrNotSupported) {
			err = nil
		}
	}
	if err == nil {
		return nil
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return &cutError{errWriteTimeout, fmt.Sprintf("the client accepted no bytes of its stream for %s (--write-timeout)", o.timeout)}
	}
	return &cutError{errClientGone, "writing the stream: " + err.Error()}
}

// The outbox's defaults (Config.StreamBufferBytes, Config.WriteTimeout),
// and the least buffer (MinStreamBufferBytes): a canvas event of the
// default --max-completion-tokens (1,024 slots) takes 10–20 KiB, so below
// 64 KiB a client that reads promptly could be cut for one event.
const (
	MinStreamBufferBytes = 64 << 10
	defaultStreamBuffer  = 1 << 20
	defaultWriteTimeout  = 30 * time.Second
)
