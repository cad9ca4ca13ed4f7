package serve

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/dlmcache/dlmcache/cache"
	"github.com/dlmcache/dlmcache/internal/testmodel"
	"github.com/dlmcache/dlmcache/model/sample"
	"github.com/dlmcache/dlmcache/regime"
)

// A block-causal model served with the exact block cache and a block store
// at its block size: four questions under each of two system messages and
// a three-turn conversation get the answers of a server computing every
// row, unbatched and batched; every repeated system message's full blocks
// are counted as prefix tokens served from the store; a stream sends its
// answer a committed block at a time. Two workers give the same answers
// and hits as one.
func TestExactBlockServe(t *testing.T) {
	const B = 8
	m := testmodel.Load(t, "tiny-block")                                                                                            // block-causal, blocks of 8
	gen := sample.BlockDefaults(m.Config, sample.GenOptions{Regime: regime.Regime{GenLength: 4 * B, Steps: 2 * B, BlockLength: B}}) // its own decoder, as engine.Model.GenOptions settles it
	server := func(method string, batch, workers int) *Server {
		o := cache.Options{Fingerprint: m.Fingerprint}
		if method != "none" {
			o.Store = cache.NewBlockStore(m.Backend, B, 1<<30, true, nil)
		}
		meth, err := cache.New(method, o)
		if err != nil {
			t.Fatal(err)
		}
		s, err := New(Config{Model: m, Method: meth, Gen: gen, MaxConcurrency: max(1, batch), MaxBatch: batch, Workers: workers})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	none, exact := server("none", 1, 1), server("exact-block", 1, 1)
	batched, workers := server("exact-block", 4, 1), server("exact-block", 4, 2)
	var bodies []string
	systems := []string{"You are a terse assistant. Follow the house rules: be brief, be kind, never guess.", "Answer in one word."}
	for _, sys := range systems {
		for q := range 4 {
			bodies = append(bodies, chatBody(sys, fmt.Sprintf("Question %d: what is %d plus %d?", q, q, q+1), ""))
		}
	}
	conv := []map[string]string{{"role": "system", "content": systems[0]}}
	for turn := range 3 {
		conv = append(conv, map[string]string{"role": "user", "content": fmt.Sprintf("Turn %d: and then?", turn)})
		raw, _ := json.Marshal(map[string]any{"messages": conv})
		bodies = append(bodies, string(raw))
		conv = append(conv, map[string]string{"role": "assistant", "content": fmt.Sprintf("Answer %d.", turn)})
	}
	want := make([]string, len(bodies))
	for i, b := range bodies {
		want[i] = decodeChat(t, post(t, none, "/v1/chat/completions", b)).Choices[0].Message.Content
		r := decodeChat(t, post(t, exact, "/v1/chat/completions", b))
		if got := r.Choices[0].Message.Content; got != want[i] {
			t.Errorf("request %d: exact-block %q, none %q", i, got, want[i])
		}
		// Every layer's K/V of the prefix tokens found in the store come
		// from it: they are OpenAI's cached prompt tokens, whole blocks.
		d := r.Dlmcache
		if c := r.Usage.PromptTokensDetails.CachedTokens; c != d.PrefixHitTokens || c > d.PrefixTokens || c%B != 0 && c != d.PrefixTokens {
			t.Errorf("request %d: %d cached prompt tokens, %d prefix tokens found in the store of %d", i, c, d.PrefixHitTokens, d.PrefixTokens)
		}
		if q := i % 4; i < 8 && q > 0 && d.PrefixHitTokens < d.PrefixTokens/B*B {
			t.Errorf("request %d, a repeated system message: %d of its %d prefix tokens found in the store", i, d.PrefixHitTokens, d.PrefixTokens)
		}
	}
	var wg sync.WaitGroup
	for _, s := range []*Server{batched, workers} {
		for i, b := range bodies {
			wg.Go(func() {
				if r := chatFrom(t, i, s, b); r != nil && r.Choices[0].Message.Content != want[i] {
					t.Errorf("request %d batched, %d workers: exact-block %q, none %q", i, s.cfg.Workers, r.Choices[0].Message.Content, want[i])
				}
			})
		}
	}
	wg.Wait()

	// Each system message's repeats hit its full blocks; each turn of the
	// conversation the blocks of the one before.
	st := cache.StoreOf(exact.Method()).Stats()
	tok := m.Tokenizer
	hits := int64(0)
	for _, sys := range systems {
		_, pm, err := tok.EncodeChat(sys, "x")
		if err != nil {
			t.Fatal(err)
		}
		hits += int64(3 * (pm / B * B))
	}
	if st.HitTokens < hits {
		t.Errorf("%d prefix tokens served from the store, want at least the repeated system messages' %d", st.HitTokens, hits)
	}
	// Sent all at once to the batching server, the requests sharing a
	// system message wait for the first one's first step to store its
	// blocks instead of computing them beside it (and a waiting request
	// holds up no batch: it joins at its first forward).
	for _, s := range []*Server{batched, workers} {
		if bst := cache.StoreOf(s.Method()).Stats(); bst.HitTokens < hits {
			t.Errorf("batched, %d workers, sent at once: %d prefix tokens served from the store, want at least the repeated system messages' %d", s.cfg.Workers, bst.HitTokens, hits)
		}
	}
	rec := httptest.NewRecorder()
	exact.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if got := metric(t, rec.Body.String(), "dlmcache_prefix_cache_hits_tokens_total"); got != float64(st.HitTokens) {
		t.Errorf("metrics: %g prefix tokens hit, the store %d", got, st.HitTokens)
	}

	// Streaming: a delta per committed block at most, joining to the answer.
	srec := post(t, exact, "/v1/chat/completions", chatBody(systems[0], "Question 0: what is 0 plus 1?", `"stream":true`))
	deltas, text := 0, ""
	for _, e := range sseEvents(t, srec.Body.String()) {
		var c struct {
			Choices []struct {
				Delta struct{ Content string } `json:"delta"`
			} `json:"choices"`
		}
		if e == "[DONE]" || json.Unmarshal([]byte(e), &c) != nil || len(c.Choices) == 0 || c.Choices[0].Delta.Content == "" {
			continue
		}
		deltas++
		text += c.Choices[0].Delta.Content
	}
	if text != want[0] || deltas > gen.GenLength/B+1 {
		t.Errorf("stream: %d deltas joining to %q, want at most %d joining to %q", deltas, text, gen.GenLength/B+1, want[0])
	}
}

// A bidirectional model is refused at start by the exact block cache.
func TestExactBlockServeRefusesBidirectional(t *testing.T) {
	meth, err := cache.New("exact-block", cache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(Config{Model: loadTiny(t), Method: meth, Gen: testGen}); err == nil || !strings.Contains(err.Error(), "block-causal") {
		t.Errorf("serve.New with a bidirectional model: %v", err)
	}
}
