package serve

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlmcache/dlmcache/internal/testutil"
)

// smallBuffers shrinks the send buffer of every connection the server
// accepts, so that a client that stops reading blocks the server's writes
// after a few kilobytes instead of the megabytes loopback autotuning allows.
type smallBuffers struct{ net.Listener }

func (l smallBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetWriteBuffer(4096)
	}
	return c, err
}

// liveServer runs s on a loopback listener with small send buffers and
// returns its base URL; the server stops when the test ends.
func liveServer(t *testing.T, s *Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := s.httpServer()
	go hs.Serve(smallBuffers{ln})
	t.Cleanup(func() { hs.Close() })
	return "http://" + ln.Addr().String()
}

// stalledStream opens a streamed chat request with the canvas extension
// over a connection with a small receive buffer, reads the response up to
// its first canvas event (the generation is running) and then reads
// nothing more. Closing the returned connection ends the stall.
func stalledStream(t *testing.T, base string, genLength int) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	c.(*net.TCPConn).SetReadBuffer(4096)
	body := stallBody(genLength)
	fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	c.SetReadDeadline(time.Now().Add(time.Minute))
	r := bufio.NewReaderSize(c, 64)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("the stalled stream's first event: %v", err)
		}
		if strings.Contains(line, `"dlmcache.canvas"`) {
			return c
		}
		if strings.HasPrefix(line, "HTTP/1.1 ") && !strings.HasPrefix(line, "HTTP/1.1 200") {
			t.Fatalf("the stalled stream: %s", line)
		}
	}
}

// stallBody is a streamed chat request with the canvas extension and
// genLength one-token steps.
func stallBody(genLength int) string {
	return chatBody("", "stall", fmt.Sprintf(`"stream":true,"dlmcache_stream_canvas":true,"gen_length":%d,"steps":%d,"block_length":%d`, genLength, genLength, genLength))
}

// eventually polls cond until it holds or a minute passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(time.Minute); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("still not so after a minute: %s", what)
		}
	}
}

func metricsPage(t *testing.T, s *Server) string {
	t.Helper()
	return get(t, s, "/metrics").Body.String()
}

// victims runs rounds of n concurrent chat requests, each round after the
// previous, with the client timeout limit (0: none), and returns their
// answers in order and how long the rounds took.
func victims(t *testing.T, base string, rounds, n int, limit time.Duration) ([]string, time.Duration) {
	t.Helper()
	client := &http.Client{Timeout: limit}
	answers := make([]string, rounds*n)
	start := time.Now()
	for r := range rounds {
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				k := r*n + i
				resp, err := client.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(chatBody("", fmt.Sprintf("victim %d", k), "")))
				if err != nil {
					t.Errorf("victim %d: %v", k, err)
					return
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				if resp.StatusCode != 200 {
					t.Errorf("victim %d: %d %s", k, resp.StatusCode, b)
					return
				}
				answers[k] = string(b[bytes.Index(b, []byte(`"choices"`)):bytes.Index(b, []byte(`"usage"`))])
			})
		}
		wg.Wait()
	}
	return answers, time.Since(start)
}

// TestStalledReaderIsolated: a client that opens a canvas stream and stops
// reading does not slow the requests beside it in the batch. They finish
// while the stalled stream is still open and unread (its generation went
// on without waiting for it), with the answers they get beside the same
// stream read by its client, within a generous multiple of the time they
// take there; then the stalled client closes its connection, and the
// request ends, counted.
//
// Without the outbox (the events written on the generation's goroutine),
// the stalled generation blocks in its step callback once the socket
// buffers fill, the batcher waits for its forward, and the victims hang
// until their client timeout: this test fails.
func TestStalledReaderIsolated(t *testing.T) {
	s := newTestServer(t, "none", 0, func(c *Config) {
		c.MaxBatch, c.MaxConcurrency = 4, 4
		c.StreamBufferBytes = 64 << 20    // not cut for its backlog…
		c.WriteTimeout = 10 * time.Minute // …nor for its stall
	})
	base := liveServer(t, s)
	const rounds, n = 4, 3
	// The baseline: the victims beside the same stream read by its client.
	reader, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(stallBody(256)))
	if err != nil {
		t.Fatal(err)
	}
	want, alone := victims(t, base, rounds, n, 0)
	reader.Body.Close() // cancels it
	if t.Failed() {
		t.FailNow()
	}
	// 256 canvas events of about 1.5 kB each: far more than the socket
	// buffers hold.
	stalled := stalledStream(t, base, 256)
	defer stalled.Close()
	limit := 20*alone + 30*time.Second
	got, took := victims(t, base, rounds, n, limit)
	t.Logf("%d×%d victims: %v beside a stream read by its client, %v beside the same stream stalled (limit %v)", rounds, n, alone, took, limit)
	if t.Failed() {
		t.FailNow()
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("victim %d: %s beside the stalled stream, %s alone", i, got[i], want[i])
		}
	}
	page := metricsPage(t, s)
	if n := metric(t, page, "dlmcache_requests_in_flight"); n != 1 {
		t.Errorf("%g requests in flight after the victims: want the stalled one, still unread", n)
	}
	stalled.Close()
	eventually(t, "the stalled request ends when its client closes", func() bool { return s.met.inFlightN.Load() == 0 })
	page = metricsPage(t, s)
	// Both streams were cancelled by their clients.
	if c := metric(t, page, `dlmcache_requests_cancelled_total{reason="client_closed"}`); c != 2 {
		t.Errorf("client_closed counted %g times, want 2", c)
	}
}

// cutStalled starts a live server with the settings set makes (its log
// kept), stalls a 256-token stream on it and waits until the server has
// cut the stream; the connection stays open until the test ends.
func cutStalled(t *testing.T, set func(*Config)) (*Server, *testutil.SyncBuffer) {
	t.Helper()
	log := &testutil.SyncBuffer{}
	s := newTestServer(t, "none", 0, func(c *Config) { set(c); c.Log = log })
	stalled := stalledStream(t, liveServer(t, s), 256)
	t.Cleanup(func() { stalled.Close() })
	eventually(t, "the stalled request is cut", func() bool { return s.met.inFlightN.Load() == 0 })
	return s, log
}

// TestSlowReaderCut: a stream whose unread output passes the buffer is cut
// (slow_reader): its generation is cancelled and leaves at once, its
// forwards are counted, the log names the reason, and the metrics count it
// — while its client still holds the connection.
func TestSlowReaderCut(t *testing.T) {
	s, log := cutStalled(t, func(c *Config) {
		c.MaxBatch, c.MaxConcurrency = 4, 4
		c.StreamBufferBytes = 64 << 10
		c.WriteTimeout = 10 * time.Minute
	})
	page := metricsPage(t, s)
	if c := metric(t, page, `dlmcache_requests_cancelled_total{reason="slow_reader"}`); c != 1 {
		t.Errorf("slow_reader counted %g times, want 1", c)
	}
	// It was cut midway: some forwards ran, far from all 256.
	if f := metric(t, page, "dlmcache_forward_evaluations_total"); f < 1 || f >= 256 {
		t.Errorf("forward_evaluations_total %g: want the cut generation's forwards, 1…255", f)
	}
	if !strings.Contains(log.String(), " 499 ") || !strings.Contains(log.String(), "cancelled=slow_reader") {
		t.Errorf("the log does not name the cut:\n%s", log.String())
	}
}

// TestWriteTimeoutCut: a stream whose client accepts no bytes for the
// write timeout is cut (write_timeout), even when its whole output fits in
// the buffer.
func TestWriteTimeoutCut(t *testing.T) {
	s, log := cutStalled(t, func(c *Config) {
		c.StreamBufferBytes = 64 << 20
		c.WriteTimeout = 300 * time.Millisecond
	})
	if c := metric(t, metricsPage(t, s), `dlmcache_requests_cancelled_total{reason="write_timeout"}`); c != 1 {
		t.Errorf("write_timeout counted %g times, want 1", c)
	}
	if !strings.Contains(log.String(), "cancelled=write_timeout") {
		t.Errorf("the log does not name the cut:\n%s", log.String())
	}
}
