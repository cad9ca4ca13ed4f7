package serve

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	pmodel "github.com/prometheus/common/model"

	"github.com/dlmcache/dlmcache/cache"
	"github.com/dlmcache/dlmcache/internal/testmodel"
	"github.com/dlmcache/dlmcache/internal/testutil"
	"github.com/dlmcache/dlmcache/lut"
	"github.com/dlmcache/dlmcache/model/load"
	"github.com/dlmcache/dlmcache/model/sample"
	"github.com/dlmcache/dlmcache/regime"
)

// loadTiny loads the random-weights fixture once for the package's tests.
func loadTiny(t *testing.T) *load.Model { return testmodel.Shared(t, "tiny-f32") }

// testGen keeps generations short: 16 slots, 8 steps, blocks of 8.
var testGen = sample.GenOptions{Regime: regime.Regime{GenLength: 16, Steps: 8, BlockLength: 8}}

// newTestServer returns a server with the named method (any registered
// one, at its defaults; the bicache family gets a table serving depth 2 of
// the fixture's 3 layers at every ratio) on a store of budget bytes.
func newTestServer(t *testing.T, method string, budget int64, mod func(*Config)) *Server {
	t.Helper()
	return newTestServerOn(t, loadTiny(t), method, budget, mod)
}

// newTestServerOn is newTestServer on model m.
func newTestServerOn(t *testing.T, m *load.Model, method string, budget int64, mod func(*Config)) *Server {
	t.Helper()
	o := cache.DefaultOptions()
	o.BiCache.Refresh, o.Fingerprint = 4, m.Fingerprint
	if method != "none" {
		o.Store = cache.NewStore(m.Backend, budget, cache.FIFO)
	}
	if strings.HasPrefix(method, "bicache") {
		tab, err := lut.Build(lut.ModelID{Name: "tiny-f32", NLayers: len(m.Blocks), Fingerprint: m.Fingerprint}, 0.97,
			[]float64{0, 0.5, 1}, []lut.Sample{{Ratio: 0.2, Depth: 2}, {Ratio: 0.7, Depth: 2}})
		if err != nil {
			t.Fatal(err)
		}
		o.Table = tab
	}
	if method == "table" { // a calibrated table choosing other methods in other bins: batched together
		o.Table = &lut.Table{Format: lut.Format, Model: lut.ModelID{Name: "tiny-f32", NLayers: len(m.Blocks), Fingerprint: m.Fingerprint}, Tau: 1,
			Classes: []lut.Class{{Name: "all"}},
			Bins: []lut.Bin{
				{Lo: 0, Hi: 0.5, Choices: []*lut.Choice{{Class: "all", Setting: lut.Setting{Method: "d2cache", Decoder: "threshold:0.9"}}}},
				{Lo: 0.5, Hi: 1, Choices: []*lut.Choice{{Class: "all", Setting: lut.Setting{Method: "bicache", Decoder: "schedule", Knobs: map[string]float64{"depth": 2}, Source: "store"}}}},
			}}
	}
	meth, err := cache.New(method, o)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Model: m, Method: meth, Gen: testGen, MaxConcurrency: 2}
	if mod != nil {
		mod(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func post(t testing.TB, h http.Handler, path, body string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest("POST", path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func get(t testing.TB, h http.Handler, path string) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
	return rec
}

func chatBody(system, user string, extra string) string {
	var msgs []map[string]string
	if system != "" {
		msgs = append(msgs, map[string]string{"role": "system", "content": system})
	}
	msgs = append(msgs, map[string]string{"role": "user", "content": user})
	b, _ := json.Marshal(map[string]any{"model": "tiny", "messages": msgs})
	if extra != "" {
		b = append(b[:len(b)-1], []byte(","+extra+"}")...)
	}
	return string(b)
}

func decodeChat(t *testing.T, rec *httptest.ResponseRecorder) *chatResponse {
	t.Helper()
	if rec.Code != 200 {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	var r chatResponse
	if err := json.Unmarshal(rec.Body.Bytes(), &r); err != nil {
		t.Fatal(err)
	}
	return &r
}

// metric returns the value of one sample of a /metrics page, parsed with
// the Prometheus text parser: name is a metric name, optionally with
// labels in braces (`dlmcache_requests_total{endpoint="/v1/x",code="200"}`,
// any order); a histogram's count is name_count.
func metric(t *testing.T, page, name string) float64 {
	t.Helper()
	fams, err := parseMetrics(page)
	if err != nil {
		t.Fatalf("/metrics does not parse: %v\n%s", err, page)
	}
	base, sel, _ := strings.Cut(strings.TrimSuffix(name, "}"), "{")
	want := map[string]string{}
	for _, m := range regexp.MustCompile(`(\w+)="([^"]*)"`).FindAllStringSubmatch(sel, -1) {
		want[m[1]] = m[2]
	}
	count := strings.HasSuffix(base, "_count")
	fam, ok := fams[base]
	if !ok && count {
		fam, ok = fams[strings.TrimSuffix(base, "_count")]
	}
	if !ok {
		t.Fatalf("metric %s not in /metrics:\n%s", name, page)
	}
	for _, m := range fam.GetMetric() {
		got := map[string]string{}
		for _, l := range m.GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		if !maps.Equal(got, want) {
			continue
		}
		switch {
		case count && m.GetHistogram() != nil:
			return float64(m.GetHistogram().GetSampleCount())
		case m.GetCounter() != nil:
			return m.GetCounter().GetValue()
		case m.GetGauge() != nil:
			return m.GetGauge().GetValue()
		case m.GetUntyped() != nil:
			return m.GetUntyped().GetValue()
		}
	}
	t.Fatalf("metric %s not in /metrics:\n%s", name, page)
	return 0
}

// parseMetrics parses a text exposition as Prometheus does.
func parseMetrics(page string) (map[string]*dto.MetricFamily, error) {
	p := expfmt.NewTextParser(pmodel.UTF8Validation)
	return p.TextToMetricFamilies(strings.NewReader(page))
}

func TestChatCompletion(t *testing.T) {
	s := newTestServer(t, "bicache", 1<<30, nil)
	const sys = "You are a terse assistant. Answer in one word."
	r1 := decodeChat(t, post(t, s, "/v1/chat/completions", chatBody(sys, "Say hi.", "")))
	if r1.Object != "chat.completion" || !strings.HasPrefix(r1.ID, "chatcmpl-") || len(r1.Choices) != 1 ||
		r1.Choices[0].Message.Role != "assistant" || r1.Created == 0 || r1.Model == "" {
		t.Fatalf("response shape: %+v", r1)
	}
	if f := r1.Choices[0].FinishReason; f != "stop" && f != "length" {
		t.Errorf("finish_reason %q", f)
	}
	u := r1.Usage
	if u.PromptTokens <= 0 || u.CompletionTokens < 0 || u.CompletionTokens > testGen.GenLength || u.TotalTokens != u.PromptTokens+u.CompletionTokens {
		t.Errorf("usage %+v", u)
	}
	d := r1.Dlmcache
	if d.Method != "bicache" || d.Depth != 2 || d.PrefixHit || d.PrefixTokens <= 0 || d.NFE != testGen.Steps ||
		d.RowsFraction <= 0 || d.RowsFraction >= 1 || d.GenLength != 16 || d.Seconds <= 0 {
		t.Errorf("first request's dlmcache object: %+v", d)
	}
	if want := float64(d.PrefixTokens) / float64(u.PromptTokens+16); d.Ratio != want {
		t.Errorf("ratio %g, want %g", d.Ratio, want)
	}

	// The same system message: the prefix comes from the store.
	r2 := decodeChat(t, post(t, s, "/v1/chat/completions", chatBody(sys, "Say bye, please.", "")))
	if !r2.Dlmcache.PrefixHit || r2.Dlmcache.PrefixTokens != d.PrefixTokens {
		t.Errorf("second request with the same system message: %+v", r2.Dlmcache)
	}
	// Found in the store, but bicache at depth 2 of 3 computes the prefix
	// rows in the last layer: none of its tokens is a cached prompt token.
	if r1.Dlmcache.PrefixHitTokens != 0 || r2.Dlmcache.PrefixHitTokens != d.PrefixTokens ||
		r1.Usage.PromptTokensDetails.CachedTokens != 0 || r2.Usage.PromptTokensDetails.CachedTokens != 0 {
		t.Errorf("prefix tokens found in the store %d, %d (want 0, %d); cached prompt tokens %d, %d (want 0, 0)",
			r1.Dlmcache.PrefixHitTokens, r2.Dlmcache.PrefixHitTokens, d.PrefixTokens,
			r1.Usage.PromptTokensDetails.CachedTokens, r2.Usage.PromptTokensDetails.CachedTokens)
	}
	page := get(t, s, "/metrics").Body.String()
	// The backend and its GEMM library, as `dlmcache version` says them.
	if fams, err := parseMetrics(page); err != nil || len(fams["dlmcache_backend_info"].GetMetric()) != 1 {
		t.Errorf("dlmcache_backend_info: %v\n%s", err, page)
	} else {
		labels := map[string]string{}
		for _, l := range fams["dlmcache_backend_info"].GetMetric()[0].GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["backend"] != "cpu" || !strings.Contains(labels["gemm"], "OpenBLAS") {
			t.Errorf("dlmcache_backend_info labels %v", labels)
		}
	}
	if q, h := metric(t, page, "dlmcache_prefix_cache_queries_tokens_total"), metric(t, page, "dlmcache_prefix_cache_hits_tokens_total"); q != float64(2*d.PrefixTokens) || h != float64(d.PrefixTokens) {
		t.Errorf("store tokens: queries %g hits %g, want %d and %d", q, h, 2*d.PrefixTokens, d.PrefixTokens)
	}
	for name, want := range map[string]float64{
		`dlmcache_requests_total{endpoint="/v1/chat/completions",code="200"}`:      2,
		`dlmcache_depth_requests_total{depth="2"}`:                                 2,
		`dlmcache_prefix_requests_total{hit="true"}`:                               1,
		`dlmcache_prefix_cache_entries`:                                            1,
		`dlmcache_generated_tokens_total`:                                          32,
		`dlmcache_forward_evaluations_total`:                                       16,
		`dlmcache_request_duration_seconds_count{endpoint="/v1/chat/completions"}`: 2,
		`dlmcache_requests_in_flight`:                                              0,
	} {
		if got := metric(t, page, name); got != want {
			t.Errorf("%s = %g, want %g", name, got, want)
		}
	}
	if metric(t, page, "dlmcache_tokens_per_second") <= 0 {
		t.Error("tokens/s gauge is zero after two generations")
	}
	// FLOPs: the first request paid the prefix-alone fill, both skipped
	// the shallow prefix rows at every step; the rows saved more than the
	// fill cost.
	if f, full := metric(t, page, "dlmcache_flops_total"), metric(t, page, "dlmcache_flops_full_total"); !(f > 0 && f < full) {
		t.Errorf("FLOPs %g of %g: want 0 < done < full", f, full)
	}

	// A salt isolates tenants: the same prefix misses under another salt.
	r3 := decodeChat(t, post(t, s, "/v1/chat/completions", chatBody(sys, "Say hi.", `"cache_salt":"tenant-b"`)))
	if r3.Dlmcache.PrefixHit {
		t.Error("a request with another cache_salt hit the store")
	}
	// The same request again is deterministic (greedy, same seed).
	r4 := decodeChat(t, post(t, s, "/v1/chat/completions", chatBody(sys, "Say hi.", "")))
	if r4.Choices[0].Message.Content != r1.Choices[0].Message.Content {
		t.Errorf("same request, different answers: %q vs %q", r4.Choices[0].Message.Content, r1.Choices[0].Message.Content)
	}
}

func TestCompletionEndpoint(t *testing.T) {
	s := newTestServer(t, "prefix-all", 1<<30, nil)
	rec := post(t, s, "/v1/completions", `{"model":"x","prompt":"Once upon a time","system":"Stories. ","max_tokens":8}`)
	if rec.Code != 200 {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	var r completionResponse
	if err := json.Unmarshal(rec.Body.Bytes(), &r); err != nil {
		t.Fatal(err)
	}
	if r.Object != "text_completion" || len(r.Choices) != 1 || r.Dlmcache.GenLength != 8 || r.Dlmcache.Depth != len(loadTiny(t).Blocks) || r.Dlmcache.PrefixTokens == 0 {
		t.Errorf("completion: %s", rec.Body)
	}
	// A one-string array prompt is the same prompt.
	rec = post(t, s, "/v1/completions", `{"prompt":["Once upon a time"],"system":"Stories. ","max_tokens":8}`)
	var r2 completionResponse
	json.Unmarshal(rec.Body.Bytes(), &r2)
	if rec.Code != 200 || !r2.Dlmcache.PrefixHit || r2.Choices[0].Text != r.Choices[0].Text {
		t.Errorf("array prompt: %d %s", rec.Code, rec.Body)
	}
}

func TestMalformedRequests(t *testing.T) {
	s := newTestServer(t, "bicache", 1<<30, func(c *Config) { c.MaxBodyBytes = 4096 })
	long := strings.Repeat("word ", 1200)
	for _, c := range []struct {
		name, path, body string
		status           int
		param, code      string
	}{
		{"bad json", "/v1/chat/completions", `{"messages": [`, 400, "", ""},
		{"not json", "/v1/chat/completions", `hello`, 400, "", ""},
		{"empty body", "/v1/chat/completions", ``, 400, "", ""},
		{"array body", "/v1/chat/completions", `[1,2]`, 400, "", ""},
		{"trailing data", "/v1/chat/completions", chatBody("", "hi", "") + "{}", 400, "", ""},
		{"messages wrong type", "/v1/chat/completions", `{"messages":"hi"}`, 400, "messages", ""},
		{"max_tokens wrong type", "/v1/chat/completions", chatBody("", "hi", `"max_tokens":"8"`), 400, "max_tokens", ""},
		{"temperature wrong type", "/v1/chat/completions", chatBody("", "hi", `"temperature":true`), 400, "temperature", ""},
		{"missing messages", "/v1/chat/completions", `{"model":"x"}`, 400, "messages", ""},
		{"empty messages", "/v1/chat/completions", `{"messages":[]}`, 400, "messages", ""},
		{"bad role", "/v1/chat/completions", `{"messages":[{"role":"tool","content":"x"}]}`, 400, "messages[0].role", ""},
		{"no role", "/v1/chat/completions", `{"messages":[{"content":"x"}]}`, 400, "messages[0].role", ""},
		{"ends with assistant", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"},{"role":"assistant","content":"y"}]}`, 400, "messages", ""},
		{"late system", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"},{"role":"system","content":"y"}]}`, 400, "messages[1].role", ""},
		{"content number", "/v1/chat/completions", `{"messages":[{"role":"user","content":5}]}`, 400, "messages[0].content", ""},
		{"role number", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"},{"role":5,"content":"y"}]}`, 400, "messages[1].role", ""},
		{"message not an object", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"},"hi"]}`, 400, "messages[1]", ""},
		{"max_tokens over the cap", "/v1/chat/completions", chatBody("", "hi", `"max_tokens":2000`), 400, "max_tokens", ""},
		{"gen_length over the cap", "/v1/chat/completions", chatBody("", "hi", `"gen_length":1040`), 400, "gen_length", ""},
		{"image part", "/v1/chat/completions", `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{}}]}]}`, 400, "messages[0].content", ""},
		{"canvas without stream", "/v1/chat/completions", chatBody("", "hi", `"dlmcache_stream_canvas":true`), 400, "dlmcache_stream_canvas", ""},
		{"n=2", "/v1/chat/completions", chatBody("", "hi", `"n":2`), 400, "n", ""},
		{"negative max_tokens", "/v1/chat/completions", chatBody("", "hi", `"max_tokens":-1`), 400, "max_tokens", ""},
		{"block does not divide", "/v1/chat/completions", chatBody("", "hi", `"gen_length":12,"block_length":8`), 400, "block_length", ""},
		{"steps do not fit", "/v1/chat/completions", chatBody("", "hi", `"gen_length":16,"steps":3`), 400, "steps", ""},
		{"too many steps", "/v1/chat/completions", chatBody("", "hi", `"gen_length":16,"block_length":16,"steps":32`), 400, "steps", ""},
		{"gen too long", "/v1/chat/completions", chatBody("", "hi", `"max_tokens":100000`), 400, "max_tokens", ""},
		{"context exceeded", "/v1/chat/completions", chatBody("", "hi", `"gen_length":1024,"block_length":1024,"steps":1024`), 400, "messages", "context_length_exceeded"},
		{"body too large", "/v1/chat/completions", chatBody("", long, ""), 413, "", "request_too_large"},
		{"temperature range", "/v1/chat/completions", chatBody("", "hi", `"temperature":3`), 400, "temperature", ""},
		{"completion no prompt", "/v1/completions", `{"model":"x"}`, 400, "prompt", ""},
		{"completion token prompt", "/v1/completions", `{"prompt":[1,2,3]}`, 400, "prompt", ""},
		{"completion batch", "/v1/completions", `{"prompt":["a","b"]}`, 400, "prompt", ""},
		{"unknown path", "/v1/embeddings", `{}`, 404, "", "not_found"},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec := post(t, s, c.path, c.body)
			if rec.Code != c.status {
				t.Fatalf("status %d, want %d: %s", rec.Code, c.status, rec.Body)
			}
			var e struct {
				Error struct {
					Message string  `json:"message"`
					Type    string  `json:"type"`
					Param   *string `json:"param"`
					Code    *string `json:"code"`
				} `json:"error"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error.Message == "" || e.Error.Type == "" {
				t.Fatalf("error body %q (%v)", rec.Body, err)
			}
			if c.param != "" && (e.Error.Param == nil || *e.Error.Param != c.param) {
				t.Errorf("param %v, want %q (%s)", e.Error.Param, c.param, e.Error.Message)
			}
			if c.code != "" && (e.Error.Code == nil || *e.Error.Code != c.code) {
				t.Errorf("code %v, want %q", e.Error.Code, c.code)
			}
		})
	}
	if rec := get(t, s, "/v1/chat/completions"); rec.Code != 405 || rec.Header().Get("Allow") != "POST" {
		t.Errorf("GET on a POST endpoint: %d %s", rec.Code, rec.Body)
	}
	// Unknown fields are ignored; the server still serves.
	decodeChat(t, post(t, s, "/v1/chat/completions", chatBody("sys", "hi", `"top_p":0.5,"frobnicate":{"a":1}`)))
	if rec := get(t, s, "/healthz"); rec.Code != 200 {
		t.Errorf("healthz after malformed requests: %d", rec.Code)
	}
	page := get(t, s, "/metrics").Body.String()
	if got := metric(t, page, `dlmcache_requests_total{endpoint="/v1/chat/completions",code="400"}`); got < 20 {
		t.Errorf("400s counted: %g", got)
	}
}

func TestGenOptions(t *testing.T) {
	s := newTestServer(t, "none", 0, nil) // defaults 16/8/8: two tokens per step
	checkGenOptions(t, s, []genCase{
		{"defaults", genFields{}, [3]int{16, 8, 8}},
		{"max_tokens rounds up to blocks", genFields{MaxTokens: ip(20)}, [3]int{24, 12, 8}},
		{"max_tokens below a block", genFields{MaxTokens: ip(6)}, [3]int{6, 3, 6}},
		{"max_completion_tokens", genFields{MaxCompletionTokens: ip(32)}, [3]int{32, 16, 8}},
		{"gen_length wins", genFields{GenLength: ip(8), MaxTokens: ip(64)}, [3]int{8, 4, 8}},
		{"explicit", genFields{GenLength: ip(32), Steps: ip(32), BlockLength: ip(16)}, [3]int{32, 32, 16}},
	})
}

func ip(v int) *int { return &v }

// genCase is a request's generation fields and the gen length, steps and
// block length the server makes of them.
type genCase struct {
	name string
	g    genFields
	want [3]int // gen, steps, block
}

func checkGenOptions(t *testing.T, s *Server, cases []genCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o, e := s.genOptions(&c.g)
			if e != nil {
				t.Fatal(e)
			}
			if got := [3]int{o.GenLength, o.Steps, o.BlockLength}; got != c.want {
				t.Errorf("got %v, want %v", got, c.want)
			}
		})
	}
}

func TestEncodeConversation(t *testing.T) {
	tok := loadTiny(t).Tokenizer
	msgs := func(pairs ...string) []chatMessage {
		var ms []chatMessage
		for i := 0; i < len(pairs); i += 2 {
			c, _ := json.Marshal(pairs[i+1])
			ms = append(ms, chatMessage{Role: pairs[i], Content: c})
		}
		return ms
	}
	// One turn is EncodeChat.
	ids, m, _, err := encodeConversation(context.Background(), tok, msgs("system", "Be brief.", "user", "Hello there"), false)
	if err != nil {
		t.Fatal(err)
	}
	wids, wm, err := tok.EncodeChat("Be brief.", "Hello there")
	if err != nil || m != wm || fmt.Sprint(ids) != fmt.Sprint(wids) {
		t.Fatalf("one turn: %v %d, EncodeChat %v %d (%v)", ids, m, wids, wm, err)
	}
	// Several system messages are one prefix; earlier turns follow it.
	ids2, m2, _, err := encodeConversation(context.Background(), tok, msgs("system", "Be", "developer", "brief.", "user", "Hi", "assistant", "Hello", "user", "Again"), false)
	if err != nil {
		t.Fatal(err)
	}
	pre, pm, _ := tok.EncodeChat("Be\n\nbrief.", "x")
	if m2 != pm || fmt.Sprint(ids2[:m2]) != fmt.Sprint(pre[:pm]) || len(ids2) <= len(ids) {
		t.Errorf("multi-turn prefix %d tokens, want %d", m2, pm)
	}
	// Content parts are concatenated.
	parts := []chatMessage{{Role: "user", Content: json.RawMessage(`[{"type":"text","text":"Hello "},{"type":"text","text":"there"}]`)}}
	ids3, _, _, err := encodeConversation(context.Background(), tok, append(msgs("system", "Be brief."), parts...), false)
	if err != nil || fmt.Sprint(ids3) != fmt.Sprint(ids) {
		t.Errorf("content parts: %v (%v)", ids3, err)
	}
}

func TestAdmissionQueuesThenRefuses(t *testing.T) {
	s := newTestServer(t, "none", 0, func(c *Config) {
		c.MaxConcurrency, c.MaxQueue, c.QueueWait = 1, 1, 50*time.Millisecond
	})
	// Occupy the only slot as a running request would.
	s.slots <- struct{}{}
	s.waiting.Add(1)
	// One may wait: it times out in the queue (503).
	rec := post(t, s, "/v1/chat/completions", chatBody("", "hi", ""))
	if rec.Code != 503 || !strings.Contains(rec.Body.String(), "queue_timeout") || rec.Header().Get("Retry-After") == "" {
		t.Errorf("queue timeout: %d %s", rec.Code, rec.Body)
	}
	// With the queue full too, the next is refused at once (429).
	s.waiting.Add(1)
	rec = post(t, s, "/v1/chat/completions", chatBody("", "hi", ""))
	if rec.Code != 429 || !strings.Contains(rec.Body.String(), "queue_full") {
		t.Errorf("queue full: %d %s", rec.Code, rec.Body)
	}
	s.waiting.Add(-2)
	<-s.slots
	decodeChat(t, post(t, s, "/v1/chat/completions", chatBody("", "hi", "")))
	page := get(t, s, "/metrics").Body.String()
	if metric(t, page, `dlmcache_requests_rejected_total{reason="queue_full"}`) != 1 || metric(t, page, `dlmcache_requests_rejected_total{reason="queue_timeout"}`) != 1 {
		t.Errorf("rejections not counted:\n%s", page)
	}

	// A request past its timeout gets 504.
	s2 := newTestServer(t, "none", 0, func(c *Config) { c.Timeout = time.Nanosecond })
	if rec := post(t, s2, "/v1/chat/completions", chatBody("", "hi", "")); rec.Code != 504 {
		t.Errorf("timeout: %d %s", rec.Code, rec.Body)
	}
}

// serveOn runs s.Serve on a loopback listener with the grace period; it
// returns the base URL, cancel (which starts the shutdown) and Serve's
// result.
func serveOn(t *testing.T, s *Server, grace time.Duration) (string, context.CancelFunc, <-chan error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln, grace) }()
	return "http://" + ln.Addr().String(), cancel, done
}

// answer is an HTTP response's status and body (-1 and the error when the
// request failed).
type answer struct {
	code int
	body string
}

// postLater posts a chat completion body to url in the background.
func postLater(url, body string) <-chan answer {
	got := make(chan answer, 1)
	go func() {
		got <- answerOf(http.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(body)))
	}()
	return got
}

// answerOf reads a response to its end: its status and body, or status
// -1 and the error.
func answerOf(resp *http.Response, err error) answer {
	if err != nil {
		return answer{-1, err.Error()}
	}
	return answer{resp.StatusCode, string(readAndClose(resp))}
}

// TestGracefulShutdown: a request in flight when shutdown starts finishes
// with 200; requests after it get 503; Serve returns nil.
func TestGracefulShutdown(t *testing.T) {
	s := newTestServer(t, "none", 0, func(c *Config) { c.MaxConcurrency = 1 })
	url, cancel, done := serveOn(t, s, 30*time.Second)

	s.slots <- struct{}{} // hold the slot so that the request queues
	s.waiting.Add(1)
	got := postLater(url, chatBody("", "hi", ""))
	for s.met.snapshotQueued() == 0 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	for !s.closing.Load() {
		time.Sleep(time.Millisecond)
	}
	// New requests on the handler are refused while draining.
	if rec := post(t, s, "/v1/chat/completions", chatBody("", "hi", "")); rec.Code != 503 {
		t.Errorf("request while shutting down: %d", rec.Code)
	}
	if rec := get(t, s, "/healthz"); rec.Code != 503 {
		t.Errorf("healthz while shutting down: %d", rec.Code)
	}
	s.waiting.Add(-1)
	<-s.slots
	if a := <-got; a.code != 200 {
		t.Errorf("in-flight request finished with %d", a.code)
	}
	if err := <-done; err != nil {
		t.Errorf("Serve: %v", err)
	}
}

// TestConcurrentRequests runs many requests over a few shared prefixes at
// once on a store that holds one prefix at a time. Requests never batch
// their forwards (each runs its own), and a prefix is computed alone
// whatever else runs, so every answer must equal, token for token, the one
// the same request gets alone on a fresh server.
func TestConcurrentRequests(t *testing.T) {
	systems := []string{
		"You are a helpful assistant that answers questions about the weather.",
		"You translate English to French. Keep it short.",
		"You are a calculator. Reply with digits only, nothing else at all.",
	}
	users := []string{"hello", "what now?", "two plus two", "Paris"}
	var reqs []string
	for i := 0; i < 12; i++ {
		reqs = append(reqs, chatBody(systems[i%len(systems)], users[i%len(users)], fmt.Sprintf(`"seed":%d`, i%2)))
	}

	// One prefix's bytes: 3 layers × (K, V, H) × m × 64 floats.
	probe := newTestServer(t, "bicache", 1<<30, nil)
	decodeChat(t, post(t, probe, "/v1/chat/completions", reqs[0]))
	one := cache.StoreOf(probe.Method()).Stats().Bytes
	budget := one * 3 / 2 // room for one prefix (they are all about the same size)

	want := make([]string, len(reqs))
	for i, b := range reqs {
		alone := newTestServer(t, "bicache", budget, nil)
		want[i] = decodeChat(t, post(t, alone, "/v1/chat/completions", b)).Choices[0].Message.Content
	}

	s := newTestServer(t, "bicache", budget, func(c *Config) { c.MaxConcurrency = 4; c.MaxQueue = len(reqs) })
	store := cache.StoreOf(s.Method())
	stop := make(chan struct{})
	var over []cache.Stats
	var watch sync.WaitGroup
	watch.Add(1)
	go func() {
		defer watch.Done()
		for {
			if st := store.Stats(); st.Bytes > st.BudgetBytes {
				over = append(over, st)
			}
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Microsecond):
			}
		}
	}()
	got := make([]string, len(reqs))
	hits := make([]bool, len(reqs))
	var wg sync.WaitGroup
	for i, b := range reqs {
		wg.Go(func() {
			rec := post(t, s, "/v1/chat/completions", b)
			if rec.Code != 200 {
				t.Errorf("request %d: %d %s", i, rec.Code, rec.Body)
				return
			}
			var r chatResponse
			json.Unmarshal(rec.Body.Bytes(), &r)
			got[i], hits[i] = r.Choices[0].Message.Content, r.Dlmcache.PrefixHit
		})
	}
	wg.Wait()
	close(stop)
	watch.Wait()
	for i := range reqs {
		if got[i] != want[i] {
			t.Errorf("request %d: concurrent answer %q, alone %q", i, got[i], want[i])
		}
	}
	if len(over) > 0 {
		t.Errorf("store over budget %d times, e.g. %+v", len(over), over[0])
	}
	st := store.Stats()
	if st.Evictions == 0 || st.Queries != int64(len(reqs)) || st.Bytes > st.BudgetBytes {
		t.Errorf("store after the run: %+v (want evictions with a one-prefix budget)", st)
	}
	t.Logf("store: %+v", st)
}

// TestShutdownAnswersWhatItCuts: a request still running when the grace
// period ends is cancelled and answered 503 shutting_down, logged and
// counted; Serve says how many it cut.
func TestShutdownAnswersWhatItCuts(t *testing.T) {
	var log testutil.SyncBuffer
	s := newTestServer(t, "none", 0, func(c *Config) { c.Log = &log })
	url, cancel, done := serveOn(t, s, 50*time.Millisecond)
	// 960 one-token steps: far longer than the grace period.
	got := postLater(url, chatBody("", "long", `"gen_length":960,"steps":960,"block_length":960`))
	eventually(t, "the generation runs", func() bool { return metric(t, metricsPage(t, s), "dlmcache_generations_running") == 1 })
	cancel()
	a := <-got
	if a.code != 503 || !strings.Contains(a.body, "shutting_down") {
		t.Errorf("the cut request: %d %s", a.code, a.body)
	}
	if err := <-done; err == nil || !strings.Contains(err.Error(), "1 requests still running") {
		t.Errorf("Serve: %v", err)
	}
	if c := metric(t, metricsPage(t, s), `dlmcache_requests_cancelled_total{reason="shutdown"}`); c != 1 {
		t.Errorf("shutdown cancellations: %g", c)
	}
	if l := log.String(); !strings.Contains(l, "cancelling them (503)") || !strings.Contains(l, " 503 ") || !strings.Contains(l, "cancelled=shutdown") {
		t.Errorf("the log does not name the cut:\n%s", l)
	}
}

// max_tokens (or max_completion_tokens) up to --max-completion-tokens is
// served though it rounds up past it to whole blocks; past it the 400
// names the field the client sent.
func TestMaxTokensBoundBeforeRounding(t *testing.T) {
	s := newTestServer(t, "none", 0, func(c *Config) { c.MaxGenLength = 20 }) // blocks of 8: 20 → 24 slots
	for _, c := range []struct {
		field string
		n     int
		code  int
	}{{"max_tokens", 20, 200}, {"max_completion_tokens", 20, 200}, {"max_tokens", 21, 400}, {"max_completion_tokens", 21, 400}} {
		rec := post(t, s, "/v1/chat/completions", chatBody("", "hi", fmt.Sprintf(`"%s":%d`, c.field, c.n)))
		if rec.Code != c.code {
			t.Errorf("%s %d: %d %s, want %d", c.field, c.n, rec.Code, rec.Body, c.code)
		}
		if c.code == 400 && !strings.Contains(rec.Body.String(), `"param":"`+c.field+`"`) {
			t.Errorf("%s %d: the error does not name %s: %s", c.field, c.n, c.field, rec.Body)
		}
		if c.code == 200 {
			if r := decodeChat(t, rec); r.Usage.CompletionTokens > c.n {
				t.Errorf("%s %d: %d completion tokens", c.field, c.n, r.Usage.CompletionTokens)
			}
		}
	}
}

// A model whose context length bounds nothing (0, or 2^31 from a hostile
// file) is served with DefaultMaxContext and a start-up warning: a prompt
// past it gets 400, not minutes of forwards.
func TestAbsurdContextLengthBounded(t *testing.T) {
	for _, n := range []int{0, 1 << 31} {
		m := testmodel.Load(t, "tiny-f32")
		m.Config.MaxSequenceLength = n
		none, err := cache.New("none", cache.Options{})
		if err != nil {
			t.Fatal(err)
		}
		s, err := New(Config{Model: m, Method: none, Gen: testGen})
		if err != nil {
			t.Fatal(err)
		}
		if s.cfg.MaxContext != DefaultMaxContext || len(s.Warnings()) != 1 || !strings.Contains(s.Warnings()[0], "--max-context") {
			t.Errorf("context length %d: served with max context %d, warnings %q", n, s.cfg.MaxContext, s.Warnings())
		}
		rec := post(t, s, "/v1/chat/completions", chatBody("", strings.Repeat("word ", 5000), ""))
		if rec.Code != 400 || !strings.Contains(rec.Body.String(), "context_length_exceeded") {
			t.Errorf("context length %d: a 5,000-word prompt got %d %s", n, rec.Code, abbrev(rec.Body.String()))
		}
	}
}
