package serve

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dlmcache/dlmcache/cache"
	"github.com/dlmcache/dlmcache/lut"
)

// blockServer is a bicache server on a block store of 8-token blocks whose
// budget holds about blocks blocks, with its KV event log.
func blockServer(t *testing.T, blocks int, configure ...func(*Config)) (*Server, *cache.BlockStore) {
	t.Helper()
	m := loadTiny(t)
	// One block's bytes: K, V and the hidden state, per layer.
	perBlock := int64(4 * 8 * len(m.Blocks) * (2*m.Config.KVDim() + m.Config.DModel))
	ev := cache.NewEventLog(1 << 12)
	st := cache.NewBlockStore(m.Backend, 8, int64(blocks)*perBlock, true, ev)
	tab, err := lut.Build(lut.ModelID{Name: "tiny-f32", NLayers: len(m.Blocks), Fingerprint: m.Fingerprint}, 0.97,
		[]float64{0, 1}, []lut.Sample{{Ratio: 0.5, Depth: 2}})
	if err != nil {
		t.Fatal(err)
	}
	o := cache.DefaultOptions()
	o.Store, o.Table, o.Fingerprint, o.DeepSource = st, tab, m.Fingerprint, cache.SourceStore
	meth, err := cache.New("bicache", o)
	if err != nil {
		t.Fatal(err)
	}
	c := Config{Model: m, Method: meth, Gen: testGen, MaxConcurrency: 2, Events: ev}
	for _, f := range configure {
		f(&c)
	}
	s, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	return s, st
}

// Two system prompts sharing a document: the second reuses the document's
// blocks (hit tokens in /metrics); the KV event stream, replayed into a
// router's index under a load with evictions, reproduces the store's block
// set exactly, and a router resuming from its last seq sees only the new.
func TestKVEventsAndSharedDocument(t *testing.T) {
	s, st := blockServer(t, 12)
	doc := "Reference table: alpha is 12, beta is 7, gamma is 30, delta is 4, epsilon is 19, zeta is 8."
	post(t, s, "/v1/chat/completions", chatBody(doc+" Answer with the number only.", "What is beta?", ""))
	before := metric(t, get(t, s, "/metrics").Body.String(), "dlmcache_prefix_cache_hits_tokens_total")
	post(t, s, "/v1/chat/completions", chatBody(doc+" Answer in words.", "What is gamma?", ""))
	after := metric(t, get(t, s, "/metrics").Body.String(), "dlmcache_prefix_cache_hits_tokens_total")
	if after-before < 16 {
		t.Errorf("the second system prompt reused %v tokens of the shared document, want ≥ 2 blocks", after-before)
	}

	index := map[string]bool{}
	var last uint64
	apply := func(body string) int {
		n := 0
		sc := bufio.NewScanner(strings.NewReader(body))
		for sc.Scan() {
			var e cache.KVEvent
			if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
				t.Fatalf("event line %q: %v", sc.Text(), err)
			}
			if e.Seq != last+1 {
				t.Fatalf("seq %d after %d", e.Seq, last)
			}
			last = e.Seq
			if e.Type == "stored" {
				index[e.Hash] = true
			} else {
				delete(index, e.Hash)
			}
			n++
		}
		return n
	}
	rec := get(t, s, "/v1/kv_events")
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("GET /v1/kv_events: %d %s", rec.Code, rec.Header().Get("Content-Type"))
	}
	apply(rec.Body.String())
	for i := 0; i < 10; i++ { // more system messages than the budget holds
		post(t, s, "/v1/chat/completions", chatBody(fmt.Sprintf("You are assistant %d of the evening shift; keep answers short.", i), "Hello?", ""))
		apply(get(t, s, fmt.Sprintf("/v1/kv_events?since=%d", last)).Body.String())
	}
	if st.Stats().Evictions == 0 {
		t.Fatalf("no evictions: %+v", st.Stats())
	}
	replayed := slices.Sorted(maps.Keys(index))
	if !slices.Equal(replayed, st.Blocks()) {
		t.Errorf("replayed index %v\nstore blocks   %v", replayed, st.Blocks())
	}
	if n := apply(get(t, s, fmt.Sprintf("/v1/kv_events?since=%d&wait=0.01", last)).Body.String()); n != 0 {
		t.Errorf("resuming after the last event: %d events", n)
	}
	if rec := get(t, s, "/v1/kv_events?since=x"); rec.Code != http.StatusBadRequest {
		t.Errorf("since=x: %d", rec.Code)
	}
	// A whole-prefix server has no block events.
	if rec := get(t, newTestServer(t, "bicache", 1<<30, nil), "/v1/kv_events"); rec.Code != http.StatusNotFound {
		t.Errorf("whole-prefix store: %d", rec.Code)
	}
}

// TestFourTurnConversation: a conversation of four turns through the
// server with StoreAnswers; turns 2–4 reuse every earlier turn but the
// last partial block: the prefix hit tokens (/metrics) of each are at
// least its shared prefix (the system message and the earlier turns,
// answers included) minus one block, and no more than it (storing an
// answered conversation is not a hit).
func TestFourTurnConversation(t *testing.T) {
	const block = 8
	s, _ := blockServer(t, 1000, func(c *Config) { c.StoreAnswers = true })
	msgs := []map[string]string{{"role": "system", "content": "Reference table: alpha is 12, beta is 7, gamma is 30, delta is 4. Answer with the number only."}}
	for turn, q := range []string{"What is beta?", "And gamma?", "What is alpha?", "And delta?"} {
		msgs = append(msgs, map[string]string{"role": "user", "content": q})
		body, _ := json.Marshal(map[string]any{"model": "tiny", "messages": msgs})
		before := metric(t, get(t, s, "/metrics").Body.String(), "dlmcache_prefix_cache_hits_tokens_total")
		r := decodeChat(t, post(t, s, "/v1/chat/completions", string(body)))
		hit := metric(t, get(t, s, "/metrics").Body.String(), "dlmcache_prefix_cache_hits_tokens_total") - before
		if turn > 0 && hit < float64(r.Dlmcache.PrefixTokens-block) {
			t.Errorf("turn %d: %v prefix tokens hit of %d shared, want ≥ %d", turn+1, hit, r.Dlmcache.PrefixTokens, r.Dlmcache.PrefixTokens-block)
		}
		if hit > float64(r.Dlmcache.PrefixTokens) {
			t.Errorf("turn %d: %v prefix tokens hit, more than the %d shared: a lookup counted twice", turn+1, hit, r.Dlmcache.PrefixTokens)
		}
		if turn > 0 && r.Dlmcache.PrefixTokens <= r.Usage.PromptTokens/2 {
			t.Errorf("turn %d: shared prefix %d of %d prompt tokens: the earlier turns are not in it", turn+1, r.Dlmcache.PrefixTokens, r.Usage.PromptTokens)
		}
		t.Logf("turn %d: prompt %d tokens, shared prefix %d, hit %v", turn+1, r.Usage.PromptTokens, r.Dlmcache.PrefixTokens, hit)
		msgs = append(msgs, map[string]string{"role": "assistant", "content": r.Choices[0].Message.Content})
	}
}

// deadlineRecorder is a recorder that records its write deadline.
type deadlineRecorder struct {
	*httptest.ResponseRecorder
	deadline time.Time
}

func (d *deadlineRecorder) SetWriteDeadline(t time.Time) error { d.deadline = t; return nil }

// The KV-event answer is written under --write-timeout; at most
// MaxEventWaits long-polls are open at once (429 beyond), and a shutdown
// answers the open ones at once: Serve returns within its grace, nil.
func TestKVEventsLimits(t *testing.T) {
	s, _ := blockServer(t, 12, func(c *Config) { c.MaxEventWaits = 2; c.WriteTimeout = 7 * time.Second })
	rec := &deadlineRecorder{ResponseRecorder: httptest.NewRecorder()}
	before := time.Now()
	s.ServeHTTP(rec, httptest.NewRequest("GET", "/v1/kv_events", nil))
	if rec.Code != 200 || rec.deadline.Before(before.Add(7*time.Second)) {
		t.Errorf("kv_events: %d, write deadline %v after the request (want --write-timeout's 7s)", rec.Code, rec.deadline.Sub(before))
	}

	url, cancel, done := serveOn(t, s, time.Hour)
	polls := make(chan answer, 2)
	for range 2 {
		go func() {
			polls <- answerOf(http.Get(url + "/v1/kv_events?since=1000000&wait=60"))
		}()
	}
	for s.eventWaits.Load() < 2 {
		time.Sleep(time.Millisecond)
	}
	resp, err := http.Get(url + "/v1/kv_events?since=1000000&wait=60")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 429 || !strings.Contains(string(b), "max-event-waits") {
		t.Errorf("a long-poll past the limit: %d %s", resp.StatusCode, b)
	}
	// Without wait the endpoint still answers.
	if r, err := http.Get(url + "/v1/kv_events"); err != nil || r.StatusCode != 200 {
		t.Errorf("a poll without wait: %v %v", r, err)
	} else {
		r.Body.Close()
	}
	// Shutdown with a grace of an hour: the long-polls are answered now.
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Serve: %v", err)
	}
	for range 2 {
		if a := <-polls; a.code != 200 {
			t.Errorf("a long-poll at shutdown: %d %s", a.code, a.body)
		}
	}
}
