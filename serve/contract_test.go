package serve

import (
	"context"
	"encoding/json"
	"io"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/dlmcache/dlmcache/cache"
	"github.com/dlmcache/dlmcache/internal/testutil"
	"github.com/dlmcache/dlmcache/model/tokenizer"
)

func TestMaxTokensCapsTextAndUsage(t *testing.T) {
	s := newTestServer(t, "none", 0, nil)
	full := decodeChat(t, post(t, s, "/v1/chat/completions", chatBody("Be brief.", "Hello", `"gen_length":16`)))
	if full.Usage.CompletionTokens < 6 {
		t.Skipf("the fixture's answer has %d tokens; the cap needs more", full.Usage.CompletionTokens)
	}
	for _, field := range []string{"max_tokens", "max_completion_tokens"} {
		// Alone, the cap also sets the gen length: never more tokens than asked.
		alone := decodeChat(t, post(t, s, "/v1/chat/completions", chatBody("Be brief.", "Hello", `"`+field+`":5`)))
		if alone.Usage.CompletionTokens > 5 {
			t.Errorf("%s 5 alone: %d completion tokens", field, alone.Usage.CompletionTokens)
		}
		// With the slots fixed, the cap cuts the same answer.
		r := decodeChat(t, post(t, s, "/v1/chat/completions", chatBody("Be brief.", "Hello", `"gen_length":16,"`+field+`":5`)))
		if r.Usage.CompletionTokens > 5 || r.Choices[0].FinishReason != "length" {
			t.Errorf("%s 5: %d completion tokens, finish %q", field, r.Usage.CompletionTokens, r.Choices[0].FinishReason)
		}
		if !strings.HasPrefix(full.Choices[0].Message.Content, r.Choices[0].Message.Content) || r.Choices[0].Message.Content == full.Choices[0].Message.Content {
			t.Errorf("%s 5: %q is not a strict prefix of the uncapped %q", field, r.Choices[0].Message.Content, full.Choices[0].Message.Content)
		}
		if r.Usage.TotalTokens != r.Usage.PromptTokens+r.Usage.CompletionTokens {
			t.Errorf("%s: usage %+v does not add up", field, r.Usage)
		}
	}
}

func TestStopStrings(t *testing.T) {
	s := newTestServer(t, "none", 0, nil)
	full := decodeChat(t, post(t, s, "/v1/chat/completions", chatBody("Be brief.", "Hello", "")))
	text := full.Choices[0].Message.Content
	if len([]rune(text)) < 4 {
		t.Skipf("the fixture's answer %q is too short to cut", text)
	}
	r := []rune(text)
	stop := string(r[len(r)/2 : len(r)/2+2])
	want := text[:strings.Index(text, stop)]
	for _, field := range []string{`"stop":` + quote(stop), `"stop":["zzzz-not-there",` + quote(stop) + `]`} {
		got := decodeChat(t, post(t, s, "/v1/chat/completions", chatBody("Be brief.", "Hello", field)))
		if c := got.Choices[0]; c.Message.Content != want || c.FinishReason != "stop" {
			t.Errorf("%s: %q (finish %q), want %q (stop)", field, c.Message.Content, c.FinishReason, want)
		}
		if got.Usage.CompletionTokens > full.Usage.CompletionTokens {
			t.Errorf("%s: %d completion tokens, more than the uncut %d", field, got.Usage.CompletionTokens, full.Usage.CompletionTokens)
		}
	}
	// The completions endpoint applies them too.
	comp := post(t, s, "/v1/completions", `{"prompt":"Hello","stop":"zzzz-not-there"}`)
	if comp.Code != 200 {
		t.Errorf("completions with stop: %d %s", comp.Code, comp.Body)
	}
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func TestRefusedFields(t *testing.T) {
	s := newTestServer(t, "none", 0, nil)
	for _, tc := range []struct{ extra, param string }{
		{`"tools":[{"type":"function","function":{"name":"f"}}]`, "tools"},
		{`"tool_choice":"auto"`, "tool_choice"},
		{`"response_format":{"type":"json_object"}`, "response_format"},
		{`"logprobs":true`, "logprobs"},
		{`"top_logprobs":3`, "top_logprobs"},
		{`"functions":[{"name":"f"}]`, "functions"},
		{`"stop":["a","b","c","d","e"]`, "stop"},
		{`"stop":""`, "stop"},
		{`"stop":5`, "stop"},
	} {
		rec := post(t, s, "/v1/chat/completions", chatBody("Be brief.", "Hello", tc.extra))
		var e struct {
			Error apiError `json:"error"`
		}
		json.Unmarshal(rec.Body.Bytes(), &e)
		if rec.Code != 400 || e.Error.Param == nil || *e.Error.Param != tc.param {
			t.Errorf("%s: %d %s, want a 400 naming %s", tc.extra, rec.Code, rec.Body, tc.param)
		}
	}
	// Fields that ask for the default are accepted.
	for _, extra := range []string{`"tools":[]`, `"tool_choice":"none"`, `"response_format":{ "type": "text" }`, `"logprobs":false`, `"logprobs":null`} {
		if rec := post(t, s, "/v1/chat/completions", chatBody("Be brief.", "Hello", extra)); rec.Code != 200 {
			t.Errorf("%s: %d %s, want 200", extra, rec.Code, rec.Body)
		}
	}
	// A message without content is a 400 naming it.
	for _, body := range []string{
		`{"messages":[{"role":"user"}]}`,
		`{"messages":[{"role":"system","content":"x"},{"role":"user","content":null}]}`,
	} {
		if rec := post(t, s, "/v1/chat/completions", body); rec.Code != 400 || !strings.Contains(rec.Body.String(), "content is required") {
			t.Errorf("%s: %d %s", body, rec.Code, rec.Body)
		}
	}
}

func TestHealthAlias(t *testing.T) {
	s := newTestServer(t, "none", 0, nil)
	for _, p := range []string{"/health", "/healthz"} {
		if rec := get(t, s, p); rec.Code != 200 || !strings.Contains(rec.Body.String(), `"ok"`) {
			t.Errorf("GET %s: %d %s", p, rec.Code, rec.Body)
		}
	}
}

// An explicit empty system message is a system turn, as Hugging Face's
// template renders it; no system message is none.
func TestEmptySystemMessage(t *testing.T) {
	tok := loadTiny(t).Tokenizer
	msg := func(role, content string) chatMessage {
		c, _ := json.Marshal(content)
		return chatMessage{Role: role, Content: c}
	}
	ids, m, _, err := encodeConversation(context.Background(), tok, []chatMessage{msg("system", ""), msg("user", "Hi")}, false)
	if err != nil {
		t.Fatal(err)
	}
	full, err := tok.ApplyChat([]tokenizer.Message{{Role: "system", Content: ""}, {Role: "user", Content: "Hi"}}, true)
	if err != nil {
		t.Fatal(err)
	}
	if want := tok.Encode(full); !slices.Equal(ids, want) {
		t.Errorf("empty system turn: %v, want the template's %v", ids, want)
	}
	none, m0, _, err := encodeConversation(context.Background(), tok, []chatMessage{msg("user", "Hi")}, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(none) >= len(ids) || m0 >= m {
		t.Errorf("no system message: %d tokens (prefix %d); empty system message: %d (prefix %d)", len(none), m0, len(ids), m)
	}
}

// /metrics is prometheus/client_golang's: it parses with the Prometheus
// text parser and has the histograms, the process and Go collectors, and
// counts of requests no endpoint took.
func TestMetricsExposition(t *testing.T) {
	s := newTestServer(t, "bicache", 1<<30, nil)
	decodeChat(t, post(t, s, "/v1/chat/completions", chatBody("Be brief.", "Hello", "")))
	get(t, s, "/nope")
	post(t, s, "/v1/models", "{}") // GET only: 405
	page := get(t, s, "/metrics").Body.String()
	fams, err := parseMetrics(page)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"dlmcache_request_duration_seconds", "dlmcache_queue_wait_seconds",
		"dlmcache_generation_duration_seconds", "dlmcache_generation_nfe", "dlmcache_time_to_first_block_seconds", "dlmcache_batch_size"} {
		if f := fams[name]; f == nil || f.GetType().String() != "HISTOGRAM" {
			t.Errorf("%s: not a histogram in /metrics", name)
		}
	}
	for _, name := range []string{"process_resident_memory_bytes", "go_goroutines", "dlmcache_prefix_cache_bytes", "dlmcache_info"} {
		if fams[name] == nil {
			t.Errorf("%s missing from /metrics", name)
		}
	}
	// testGen has two blocks: the first block is seen once per request.
	if metric(t, page, "dlmcache_time_to_first_block_seconds_count") != 1 || metric(t, page, "dlmcache_batch_size_count") != 0 {
		t.Errorf("time to first block count %v, batch size count %v (unbatched)", metric(t, page, "dlmcache_time_to_first_block_seconds_count"), metric(t, page, "dlmcache_batch_size_count"))
	}
	if metric(t, page, "dlmcache_generation_nfe_count") != 1 || metric(t, page, `dlmcache_requests_unrouted_total{code="404"}`) != 1 ||
		metric(t, page, `dlmcache_requests_unrouted_total{code="405"}`) != 1 {
		t.Errorf("nfe count %v, 404s %v, 405s %v", metric(t, page, "dlmcache_generation_nfe_count"),
			metric(t, page, `dlmcache_requests_unrouted_total{code="404"}`), metric(t, page, `dlmcache_requests_unrouted_total{code="405"}`))
	}
	// A batching server observes the size of every batched forward: one
	// request alone runs testGen's 8 steps as batches of one.
	b := newTestServer(t, "bicache", 1<<30, func(c *Config) { c.MaxConcurrency = 0; c.MaxBatch = 4 })
	decodeChat(t, post(t, b, "/v1/chat/completions", chatBody("Be brief.", "Hello", "")))
	page = get(t, b, "/metrics").Body.String()
	if n := metric(t, page, "dlmcache_batch_size_count"); n != float64(testGen.Steps) {
		t.Errorf("batched: batch size count %v, want one per forward (%d)", n, testGen.Steps)
	}
}

// A request in another regime than the table's is served, counted and
// warned about once.
func TestRegimeWarning(t *testing.T) {
	var log strings.Builder
	s := newTestServer(t, "bicache", 1<<30, func(c *Config) { c.Log = &log })
	tab := cache.TableOf(s.cfg.Method)
	tab.GenLength, tab.Steps, tab.BlockLength = 16, 8, 8
	decodeChat(t, post(t, s, "/v1/chat/completions", chatBody("Be brief.", "Hello", "")))
	for range 2 {
		decodeChat(t, post(t, s, "/v1/chat/completions", chatBody("Be brief.", "Hello", `"gen_length":32`)))
	}
	page := get(t, s, "/metrics").Body.String()
	if n := metric(t, page, "dlmcache_regime_mismatch_total"); n != 2 {
		t.Errorf("mismatches %v, want 2", n)
	}
	if c := strings.Count(log.String(), "warning: a request at gen length 32"); c != 1 {
		t.Errorf("%d warnings, want 1:\n%s", c, log.String())
	}
}

// TestAPIKeys: with keys, a request without one, with a wrong one or with
// another scheme gets 401 in OpenAI's shape (counted and logged); each key
// is accepted; the health checks and the playground page stay open.
func TestAPIKeys(t *testing.T) {
	var log testutil.SyncBuffer
	s := newTestServer(t, "none", 0, func(c *Config) { c.APIKeys = []string{"sk-one", "sk-two"}; c.Log = &log })
	send := func(method, path, auth string) *httptest.ResponseRecorder {
		var body io.Reader
		if method == "POST" {
			body = strings.NewReader(chatBody("", "hi", ""))
		}
		req := httptest.NewRequest(method, path, body)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		return rec
	}
	for _, auth := range []string{"", "Bearer sk-three", "Bearer sk-on", "Basic c2stb25lOg==", "sk-one", "Bearer "} {
		for _, path := range []string{"/v1/chat/completions", "/v1/models", "/metrics", "/v1/nothing"} {
			method := "GET"
			if path == "/v1/chat/completions" {
				method = "POST"
			}
			rec := send(method, path, auth)
			var e struct {
				Error struct{ Type, Code string } `json:"error"`
			}
			if rec.Code != 401 || json.Unmarshal(rec.Body.Bytes(), &e) != nil || e.Error.Code != "invalid_api_key" || rec.Header().Get("WWW-Authenticate") == "" {
				t.Errorf("%s %s with %q: %d %s", method, path, auth, rec.Code, rec.Body)
			}
		}
	}
	for _, auth := range []string{"Bearer sk-one", "Bearer sk-two", "bearer sk-two"} {
		if rec := send("POST", "/v1/chat/completions", auth); rec.Code != 200 {
			t.Errorf("with %q: %d %s", auth, rec.Code, rec.Body)
		}
	}
	for _, path := range []string{"/health", "/healthz", "/"} {
		if rec := send("GET", path, ""); rec.Code != 200 {
			t.Errorf("%s without a key: %d", path, rec.Code)
		}
	}
	page := send("GET", "/metrics", "Bearer sk-one").Body.String()
	if n := metric(t, page, "dlmcache_requests_unauthorized_total"); n != 24 {
		t.Errorf("401s counted: %g, want 24", n)
	}
	if !strings.Contains(log.String(), " 401 ") {
		t.Errorf("401s not logged:\n%s", log.String())
	}
	if _, err := New(Config{Model: loadTiny(t), Method: noneMethod(t), Gen: testGen, APIKeys: []string{" "}}); err == nil {
		t.Error("an empty key: accepted")
	}
}

// With API keys each key is its own cache namespace: one key's system
// prompt is a prefix hit for that key only, so no key confirms another's
// prompt from prefix_hit; with SharedCacheAcrossKeys they share.
func TestAPIKeysIsolateTheCache(t *testing.T) {
	for _, shared := range []bool{false, true} {
		s := newTestServer(t, "prefix-all", 1<<30, func(c *Config) {
			c.APIKeys, c.SharedCacheAcrossKeys = []string{"sk-one", "sk-two"}, shared
		})
		hit := func(key, salt string) bool {
			extra := ""
			if salt != "" {
				extra = `"cache_salt":"` + salt + `"`
			}
			req := httptest.NewRequest("POST", "/v1/chat/completions", strings.NewReader(chatBody("The secret system prompt of tenant one.", "hi", extra)))
			req.Header.Set("Authorization", "Bearer "+key)
			rec := httptest.NewRecorder()
			s.ServeHTTP(rec, req)
			if rec.Code != 200 {
				t.Fatalf("%s: %d %s", key, rec.Code, rec.Body)
			}
			return decodeChat(t, rec).Dlmcache.PrefixHit
		}
		hit("sk-one", "")
		if !hit("sk-one", "") {
			t.Errorf("shared %v: the same key's second request missed its own prefix", shared)
		}
		if got := hit("sk-two", ""); got != shared {
			t.Errorf("shared %v: another key's request hit the first key's prefix: %v", shared, got)
		}
		hit("sk-one", "team")
		if got := hit("sk-two", "team"); got != shared {
			t.Errorf("shared %v: another key with the same cache_salt hit: %v", shared, got)
		}
	}
}
