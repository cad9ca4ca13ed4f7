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
	s := newTestServerOn(t, hostileTemplateModel(t), "none", 0, func(c *Config) {
		c.Events, c.MaxEventWaits = cache.NewEventLog(1<<10), chaosEventWaits
		c.MaxBatch, c.MaxConcurrency, c.MaxQueue = 8, 8, 256
		c.MaxBodyBytes = 64 << 10
		c.StreamBufferBytes = 64 << 20 // stalled streams stay stalled…
		c.WriteTimeout = 10 * time.Minute
		c.ReadTimeout = time.Second // …and a byte-a-time body is cut
	})
	h := newChaos(t, s)
	defer h.tr.CloseIdleConnections()
	limit := h.calmRun()

	h.tr.CloseIdleConnections()
	runtime.GC()
	runtime.GC()
	goroutines0 := runtime.NumGoroutine()
	heap0 := heapInUse()

	// The chaos.
	var stalled []net.Conn
	for range chaosStallers {
		stalled = append(stalled, stalledStream(t, h.base, 256))
	}
	defer closeAll(stalled)
	h.stop = time.Now().Add(chaosFor)
	h.ordinaryClients(limit)
	h.disconnectingClients()
	h.malformedClients()
	h.hostileTemplateClients()
	polls := h.unreadPolls()
	defer closeAll(polls)
	h.shortPolls()
	h.trickleBody()
	h.wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("%d ordinary requests in %v (slowest %v; the slowest of the calm run %v, limit %v), %d disconnects, %d malformed",
		h.served.Load(), chaosFor, time.Duration(h.slowest.Load()), time.Duration(h.calm.Load()), limit, h.cut.Load(), h.malformed.Load())

	// The stalled streams were still open and unread all along.
	if n := s.met.inFlightN.Load(); n < chaosStallers {
		t.Errorf("%d requests in flight after the chaos: want the %d stalled ones still open", n, chaosStallers)
	}
	h.checkNo5xx()
	closeAll(stalled)
	closeAll(polls)
	h.tr.CloseIdleConnections()
	eventually(t, "every request ends", func() bool { return s.met.inFlightN.Load() == 0 })
	eventually(t, "the goroutines come back", func() bool { return runtime.NumGoroutine() <= goroutines0+4 })
	runtime.GC()
	runtime.GC()
	if heap := heapInUse(); heap > heap0+32<<20 {
		t.Errorf("heap in use %d MiB after the chaos, %d MiB before", heap>>20, heap0>>20)
	}
}

// TestChaos's numbers.
const (
	chaosClients    = 64
	chaosStallers   = 2
	chaosFor        = 3 * time.Second
	chaosEventWaits = 4 // long-polls of /v1/kv_events open at once
	chaosDistinct   = 8 // the distinct ordinary requests
)

// chaos is TestChaos's live server, its clients, and what they counted.
type chaos struct {
	t      *testing.T
	s      *Server
	base   string
	tr     *http.Transport
	client *http.Client
	bodies []string // the ordinary requests…
	want   []string // …and their answers alone
	stop   time.Time
	wg     sync.WaitGroup

	calm, slowest          atomic.Int64 // the slowest request of the calm run, of the chaos
	served, cut, malformed atomic.Int64
}

// newChaos serves s live and asks it the ordinary requests alone.
func newChaos(t *testing.T, s *Server) *chaos {
	tr := &http.Transport{MaxIdleConnsPerHost: chaosClients}
	h := &chaos{t: t, s: s, base: liveServer(t, s), tr: tr, client: &http.Client{Transport: tr},
		bodies: make([]string, chaosDistinct), want: make([]string, chaosDistinct)}
	for i := range h.bodies {
		h.bodies[i] = chatBody("", fmt.Sprintf("question %d", i), fmt.Sprintf(`"seed":%d`, i))
		h.want[i] = decodeChat(t, post(t, s, "/v1/chat/completions", h.bodies[i])).Choices[0].Message.Content
	}
	return h
}

// ask sends ordinary request i and checks its answer is the one alone.
func (h *chaos) ask(i int, limit time.Duration) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	start := time.Now()
	req, _ := http.NewRequestWithContext(ctx, "POST", h.base+"/v1/chat/completions", strings.NewReader(h.bodies[i]))
	resp, err := h.client.Do(req)
	if err != nil {
		return 0, err
	}
	b := readAndClose(resp)
	if resp.StatusCode != 200 {
		return 0, fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	var r chatResponse
	if err := json.Unmarshal(b, &r); err != nil {
		return 0, err
	}
	if got := r.Choices[0].Message.Content; got != h.want[i] {
		return 0, fmt.Errorf("answer %q, alone %q", got, h.want[i])
	}
	return time.Since(start), nil
}

// calmRun sends every client's request once, together, and returns the
// chaos's limit on one: a generous multiple of the calm run's slowest.
func (h *chaos) calmRun() time.Duration {
	for c := range chaosClients {
		h.wg.Go(func() {
			d, err := h.ask(c%chaosDistinct, 5*time.Minute)
			if err != nil {
				h.t.Errorf("calm run, client %d: %v", c, err)
				return
			}
			storeMax(&h.calm, d)
		})
	}
	h.wg.Wait()
	if h.t.Failed() {
		h.t.FailNow()
	}
	return 20*time.Duration(h.calm.Load()) + 30*time.Second
}

// untilStop runs f(k), k = from, from+1, …, on a goroutine of its own
// until the chaos stops or f returns false.
func (h *chaos) untilStop(from int, f func(k int) bool) {
	h.wg.Go(func() {
		for k := from; time.Now().Before(h.stop); k++ {
			if !f(k) {
				return
			}
		}
	})
}

// ordinaryClients ask the ordinary requests, each within limit.
func (h *chaos) ordinaryClients(limit time.Duration) {
	for c := range chaosClients {
		h.untilStop(c, func(k int) bool {
			d, err := h.ask(k%chaosDistinct, limit)
			if err != nil {
				h.t.Errorf("client %d: %v", c, err)
				return false
			}
			h.served.Add(1)
			storeMax(&h.slowest, d)
			return true
		})
	}
}

// disconnectingClients send requests, streamed and not, and are gone
// after 0–20 ms.
func (h *chaos) disconnectingClients() {
	for c := range 4 {
		rng := rand.New(rand.NewPCG(uint64(c), 1))
		h.untilStop(0, func(k int) bool {
			ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rng.IntN(20))*time.Millisecond)
			body := h.bodies[k%chaosDistinct]
			if k%2 == 0 {
				body = stallBody(64)
			}
			req, _ := http.NewRequestWithContext(ctx, "POST", h.base+"/v1/chat/completions", strings.NewReader(body))
			if resp, err := h.client.Do(req); err == nil {
				readAndClose(resp)
				if resp.StatusCode >= 500 {
					h.t.Errorf("a disconnecting client got %d", resp.StatusCode)
				}
			}
			cancel()
			h.cut.Add(1)
			return true
		})
	}
}

// malformedClients send malformed and oversized bodies: 400 or 413.
func (h *chaos) malformedClients() {
	bad := []string{`{"messages": [`, `hello`, `{"messages":"x"}`, `{"messages":[{"role":5,"content":"x"}]}`,
		chatBody("", "x", `"max_tokens":100000`), chatBody("", strings.Repeat("long ", 20000), "")}
	for c := range 4 {
		h.untilStop(c, func(k int) bool {
			code, _, err := h.postChat(bad[k%len(bad)])
			if err != nil {
				h.t.Errorf("malformed request: %v", err)
				return false
			}
			if code != 400 && code != 413 {
				h.t.Errorf("malformed request %d: status %d", k%len(bad), code)
			}
			h.malformed.Add(1)
			return true
		})
	}
}

// hostileTemplateClients send messages that drive the hostile template
// past its limits: 400 chat_template_limit.
func (h *chaos) hostileTemplateClients() {
	for c := range 2 {
		h.untilStop(c, func(k int) bool {
			content := []string{"boom", "spin"}[k%2]
			code, b, err := h.postChat(chatBody("", content, ""))
			if err != nil {
				h.t.Errorf("hostile template request: %v", err)
				return false
			}
			if code != 400 || !strings.Contains(string(b), "chat_template_limit") {
				h.t.Errorf("%q through the hostile template: %d %s", content, code, b)
			}
			return true
		})
	}
}

// postChat posts body to the chat endpoint and reads the response.
func (h *chaos) postChat(body string) (int, []byte, error) {
	resp, err := h.client.Post(h.base+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	return resp.StatusCode, readAndClose(resp), nil
}

// unreadPolls opens twice the limit's long-polls of the KV events, whose
// clients never read.
func (h *chaos) unreadPolls() []net.Conn {
	var polls []net.Conn
	for range 2 * chaosEventWaits {
		c, err := net.Dial("tcp", strings.TrimPrefix(h.base, "http://"))
		if err != nil {
			h.t.Fatal(err)
		}
		fmt.Fprintf(c, "GET /v1/kv_events?since=1000000&wait=60 HTTP/1.1\r\nHost: x\r\n\r\n")
		polls = append(polls, c)
	}
	return polls
}

// shortPolls are short long-polls: answered, or refused while the limit
// is reached, which the open ones never pass.
func (h *chaos) shortPolls() {
	for range 2 {
		h.untilStop(0, func(int) bool {
			resp, err := h.client.Get(h.base + "/v1/kv_events?since=1000000&wait=0.05")
			if err != nil {
				h.t.Errorf("kv_events: %v", err)
				return false
			}
			readAndClose(resp)
			if resp.StatusCode != 200 && resp.StatusCode != 429 {
				h.t.Errorf("kv_events: status %d", resp.StatusCode)
			}
			if n := h.s.eventWaits.Load(); n > chaosEventWaits {
				h.t.Errorf("%d KV-event long-polls open, past the limit of %d", n, chaosEventWaits)
			}
			return true
		})
	}
}

// trickleBody sends a body a byte at a time: cut by the read timeout.
func (h *chaos) trickleBody() {
	h.wg.Go(func() {
		c, err := net.Dial("tcp", strings.TrimPrefix(h.base, "http://"))
		if err != nil {
			h.t.Error(err)
			return
		}
		defer c.Close()
		body := h.bodies[0]
		fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(body))
		for i := 0; i < len(body); i++ {
			if _, err := c.Write([]byte{body[i]}); err != nil {
				return // the server closed the connection
			}
			time.Sleep(100 * time.Millisecond)
		}
		h.t.Error("a body sent a byte every 100 ms was read to its end past the 1 s read timeout")
	})
}

// checkNo5xx checks the metrics count no response with a 5xx status.
func (h *chaos) checkNo5xx() {
	fams, err := parseMetrics(metricsPage(h.t, h.s))
	if err != nil {
		h.t.Fatal(err)
	}
	for _, m := range fams["dlmcache_requests_total"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "code" && l.GetValue() >= "500" && m.GetCounter().GetValue() > 0 {
				h.t.Errorf("%g responses with status %s", m.GetCounter().GetValue(), l.GetValue())
			}
		}
	}
}

// storeMax raises a to d when d is above it.
func storeMax(a *atomic.Int64, d time.Duration) {
	for v := a.Load(); int64(d) > v && !a.CompareAndSwap(v, int64(d)); v = a.Load() {
	}
}

// readAndClose reads resp's body to its end and closes it.
func readAndClose(resp *http.Response) []byte {
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return b
}

func closeAll(conns []net.Conn) {
	for _, c := range conns {
		c.Close()
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
