package serve

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlmcache/dlmcache/cache"
	"github.com/dlmcache/dlmcache/internal/testmodel"
	"github.com/dlmcache/dlmcache/model/load"
	"github.com/dlmcache/dlmcache/model/tokenizer"
)

// TestChaos runs, for a fixed few seconds against one batching server, 64
// clients sending ordinary requests beside clients that stall their
// streams, clients that disconnect midway, clients sending malformed or
// oversized bodies, one sending its body a byte at a time, clients whose
// messages drive a hostile chat template (a recursive macro, 10^10 loop
// iterations) past its limits, and KV-event long-polls, half of them
// past the limit on open ones and never read. It checks that
//
//   - no response is a 5xx (none is intended here: the queue is deep
//     enough), the malformed requests and the hostile template's get 4xx,
//     and the long-polls open never pass the limit;
//   - every ordinary answer equals the same request's answer alone;
//   - the ordinary clients are not slowed by the stalled ones: they finish
//     while the stalled streams are still open and unread, each within a
//     generous multiple of the slowest request of a calm run before;
//   - afterwards the goroutines and the heap come back near where they were
//     before the chaos.
func TestChaos(t *testing.T) {
	const (
		clients    = 64
		stallers   = 2
		chaosFor   = 3 * time.Second
		eventWaits = 4 // long-polls of /v1/kv_events open at once
	)
	s := newTestServerOn(t, hostileTemplateModel(t), "none", 0, func(c *Config) {
		c.Events, c.MaxEventWaits = cache.NewEventLog(1<<10), eventWaits
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
	for c := range 2 {
		wg.Go(func() { // messages that drive the hostile template past its limits
			for k := c; time.Now().Before(stop); k++ {
				content := []string{"boom", "spin"}[k%2]
				resp, err := client.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(chatBody("", content, "")))
				if err != nil {
					t.Errorf("hostile template request: %v", err)
					return
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 400 || !strings.Contains(string(b), "chat_template_limit") {
					t.Errorf("%q through the hostile template: %d %s", content, resp.StatusCode, b)
				}
			}
		})
	}
	var polls []net.Conn
	for range 2 * eventWaits { // long-polls of the KV events whose clients never read
		c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "GET /v1/kv_events?since=1000000&wait=60 HTTP/1.1\r\nHost: x\r\n\r\n")
		polls = append(polls, c)
	}
	defer func() {
		for _, c := range polls {
			c.Close()
		}
	}()
	for range 2 {
		wg.Go(func() { // short long-polls: answered, or refused while the limit is reached
			for time.Now().Before(stop) {
				resp, err := client.Get(base + "/v1/kv_events?since=1000000&wait=0.05")
				if err != nil {
					t.Errorf("kv_events: %v", err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 && resp.StatusCode != 429 {
					t.Errorf("kv_events: status %d", resp.StatusCode)
				}
				if n := s.eventWaits.Load(); n > eventWaits {
					t.Errorf("%d KV-event long-polls open, past the limit of %d", n, eventWaits)
				}
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
	for _, c := range polls {
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

// hostileTemplateModel is the tiny fixture with a chat template that
// renders LLaDA's format, except that a message "boom" calls a macro that
// recurses forever and a message "spin" runs 10^10 loop iterations: both
// stopped at the template's limits (a 400 for that request alone), where
// they once overflowed the stack (a fatal error) or held the request for
// minutes.
func hostileTemplateModel(t *testing.T) *load.Model {
	t.Helper()
	m := testmodel.Load(t, "tiny-f32")
	tokJSON, err := os.ReadFile(filepath.Join(testmodel.Dir("tiny-f32"), "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	tpl := "{% macro f(x) %}{{ f(x) }}{% endmacro %}{% for message in messages %}" +
		"{% if message['content'] == 'boom' %}{{ f(1) }}{% endif %}" +
		"{% if message['content'] == 'spin' %}{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}{% endif %}" +
		"{% endfor %}" + tokenizer.LLaDATemplate
	cfg, _ := json.Marshal(map[string]any{"chat_template": tpl, "bos_token": tokenizer.TokenBOS, "eos_token": tokenizer.TokenEOS})
	if m.Tokenizer, err = tokenizer.Parse(tokJSON, cfg, "hostile tokenizer_config.json"); err != nil {
		t.Fatal(err)
	}
	return m
}

func heapInUse() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}
