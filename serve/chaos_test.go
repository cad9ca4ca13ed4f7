package serve

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestChaos runs, for a fixed few seconds against one batching server, 64
// clients sending ordinary requests beside clients that stall their
// streams, clients that disconnect midway, clients sending malformed or
// oversized bodies and one sending its body a byte at a time. It checks
// that
//
//   - no response is a 5xx (none is intended here: the queue is deep
//     enough), and the malformed requests get 4xx;
//   - every ordinary answer equals the same request's answer alone;
//   - the ordinary clients are not slowed by the stalled ones: they finish
//     while the stalled streams are still open and unread, each within a
//     generous multiple of the slowest request of a calm run before;
//   - afterwards the goroutines and the heap come back near where they were
//     before the chaos.
func TestChaos(t *testing.T) {
	const (
		clients  = 64
		stallers = 2
		chaosFor = 3 * time.Second
	)
	s := newTestServer(t, "none", 0, func(c *Config) {
		c.MaxBatch, c.MaxConcurrency, c.MaxQueue = 8, 8, 256
		c.MaxBodyBytes = 64 << 10
		c.StreamBufferBytes = 64 << 20 // stalled streams stay stalled…
		c.WriteTimeout = 10 * time.Minute
		c.ReadTimeout = time.Second // …and a byte-a-time body is cut
	})
	base := liveServer(t, s)
	tr := &http.Transport{MaxIdleConnsPerHost: clients}
	client := &http.Client{Transport: tr}
	defer tr.CloseIdleConnections()

	// The ordinary requests and their answers alone.
	const distinct = 8
	bodies := make([]string, distinct)
	want := make([]string, distinct)
	for i := range bodies {
		bodies[i] = chatBody("", fmt.Sprintf("question %d", i), fmt.Sprintf(`"seed":%d`, i))
		want[i] = decodeChat(t, post(t, s, "/v1/chat/completions", bodies[i])).Choices[0].Message.Content
	}
	ask := func(i int, limit time.Duration) (time.Duration, error) {
		ctx, cancel := context.WithTimeout(context.Background(), limit)
		defer cancel()
		start := time.Now()
		req, _ := http.NewRequestWithContext(ctx, "POST", base+"/v1/chat/completions", strings.NewReader(bodies[i]))
		resp, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			return 0, fmt.Errorf("status %d: %s", resp.StatusCode, b)
		}
		var r chatResponse
		if err := json.Unmarshal(b, &r); err != nil {
			return 0, err
		}
		if got := r.Choices[0].Message.Content; got != want[i] {
			return 0, fmt.Errorf("answer %q, alone %q", got, want[i])
		}
		return time.Since(start), nil
	}

	// A calm run: every client once, together.
	var calm atomic.Int64
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			d, err := ask(c%distinct, 5*time.Minute)
			if err != nil {
				t.Errorf("calm run, client %d: %v", c, err)
				return
			}
			for v := calm.Load(); int64(d) > v && !calm.CompareAndSwap(v, int64(d)); v = calm.Load() {
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	limit := 20*time.Duration(calm.Load()) + 30*time.Second

	tr.CloseIdleConnections()
	runtime.GC()
	runtime.GC()
	goroutines0 := runtime.NumGoroutine()
	heap0 := heapInUse()

	// The chaos.
	var stalled []net.Conn
	for range stallers {
		stalled = append(stalled, stalledStream(t, base, 256))
	}
	defer func() {
		for _, c := range stalled {
			c.Close()
		}
	}()
	stop := time.Now().Add(chaosFor)
	var served, cut, malformed atomic.Int64
	var slowest atomic.Int64
	for c := range clients {
		wg.Go(func() { // ordinary clients
			for k := c; time.Now().Before(stop); k++ {
				d, err := ask(k%distinct, limit)
				if err != nil {
					t.Errorf("client %d: %v", c, err)
					return
				}
				served.Add(1)
				for v := slowest.Load(); int64(d) > v && !slowest.CompareAndSwap(v, int64(d)); v = slowest.Load() {
				}
			}
		})
	}
	for c := range 4 {
		wg.Go(func() { // disconnecting clients: streamed and not, gone after 0–20 ms
			rng := rand.New(rand.NewPCG(uint64(c), 1))
			for k := 0; time.Now().Before(stop); k++ {
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rng.IntN(20))*time.Millisecond)
				body := bodies[k%distinct]
				if k%2 == 0 {
					body = stallBody(64)
				}
				req, _ := http.NewRequestWithContext(ctx, "POST", base+"/v1/chat/completions", strings.NewReader(body))
				if resp, err := client.Do(req); err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode >= 500 {
						t.Errorf("a disconnecting client got %d", resp.StatusCode)
					}
				}
				cancel()
				cut.Add(1)
			}
		})
	}
	bad := []string{`{"messages": [`, `hello`, `{"messages":"x"}`, `{"messages":[{"role":5,"content":"x"}]}`,
		chatBody("", "x", `"max_tokens":100000`), chatBody("", strings.Repeat("long ", 20000), "")}
	for c := range 4 {
		wg.Go(func() { // malformed and oversized bodies
			for k := c; time.Now().Before(stop); k++ {
				resp, err := client.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(bad[k%len(bad)]))
				if err != nil {
					t.Errorf("malformed request: %v", err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 400 && resp.StatusCode != 413 {
					t.Errorf("malformed request %d: status %d", k%len(bad), resp.StatusCode)
				}
				malformed.Add(1)
			}
		})
	}
	wg.Go(func() { // a body sent a byte at a time: cut by the read timeout
		c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close()
		body := bodies[0]
		fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(body))
		for i := 0; i < len(body); i++ {
			if _, err := c.Write([]byte{body[i]}); err != nil {
				return // the server closed the connection
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Error("a body sent a byte every 100 ms was read to its end past the 1 s read timeout")
	})
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("%d ordinary requests in %v (slowest %v; the slowest of the calm run %v, limit %v), %d disconnects, %d malformed",
		served.Load(), chaosFor, time.Duration(slowest.Load()), time.Duration(calm.Load()), limit, cut.Load(), malformed.Load())

	// The stalled streams were still open and unread all along.
	if n := s.met.inFlightN.Load(); n < stallers {
		t.Errorf("%d requests in flight after the chaos: want the %d stalled ones still open", n, stallers)
	}
	page := metricsPage(t, s)
	fams, err := parseMetrics(page)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range fams["dlmcache_requests_total"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "code" && l.GetValue() >= "500" && m.GetCounter().GetValue() > 0 {
				t.Errorf("%g responses with status %s", m.GetCounter().GetValue(), l.GetValue())
			}
		}
	}
	for _, c := range stalled {
		c.Close()
	}
	tr.CloseIdleConnections()
	eventually(t, "every request ends", func() bool { return s.met.inFlightN.Load() == 0 })
	eventually(t, "the goroutines come back", func() bool { return runtime.NumGoroutine() <= goroutines0+4 })
	runtime.GC()
	runtime.GC()
	if heap := heapInUse(); heap > heap0+32<<20 {
		t.Errorf("heap in use %d MiB after the chaos, %d MiB before", heap>>20, heap0>>20)
	}
}

func heapInUse() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}
