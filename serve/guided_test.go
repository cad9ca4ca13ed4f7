package serve

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/dlmcache/dlmcache/cache"
	"github.com/dlmcache/dlmcache/internal/testmodel"
	"github.com/dlmcache/dlmcache/lut"
	"github.com/dlmcache/dlmcache/model/load"
	"github.com/dlmcache/dlmcache/model/sample"
)

// The fixtures that share a tokenizer (vocabulary and chat template): the
// diffusion model tiny-llada-moe and the causal LM tiny-llama, its guide.
func guidedFixtures(t *testing.T) (dlm, guide *load.Model) {
	return testmodel.Shared(t, "tiny-llada-moe"), testmodel.Shared(t, "tiny-llama")
}

// guidedPrompts share system messages (four questions each) so that a
// store has prefixes to reuse.
var guidedPrompts = []struct{ system, user string }{
	{"You are a careful assistant who answers in one short line.", "Name a color."},
	{"You are a careful assistant who answers in one short line.", "Count to three."},
	{"You are a careful assistant who answers in one short line.", "What is in the attic?"},
	{"You are a careful assistant who answers in one short line.", "Say hi."},
	{"Answer every question as a pirate would, briefly.", "Where is the ship?"},
	{"Answer every question as a pirate would, briefly.", "Name a color."},
	{"Answer every question as a pirate would, briefly.", "What is two plus two?"},
	{"Answer every question as a pirate would, briefly.", "x"},
}

// newGuidedServer serves method on dlm guided by guide; store adds the
// guide's block store of 8-token blocks.
func newGuidedServer(t *testing.T, dlm, guide *load.Model, method string, store bool, mod func(*Config)) *Server {
	t.Helper()
	return newTestServerOn(t, dlm, method, 1<<30, func(c *Config) {
		c.Guide, c.MaxQueue = guide, 64
		if store {
			c.GuideStore = cache.NewBlockStore(guide.Backend, 8, 1<<30, true, nil)
		}
		if mod != nil {
			mod(c)
		}
	})
}

// wantGuided is what generating the request of a chat body on dlm under
// method (with the guide, no store) answers: the text the server returns
// and the guide's work.
func wantGuided(t *testing.T, s *Server, dlm, guide *load.Model, method, system, user string) (string, sample.GuideStats) {
	t.Helper()
	ids, m := encodeChat(t, dlm, system, user)
	o := cache.DefaultOptions()
	o.BiCache.Refresh, o.Fingerprint = 4, dlm.Fingerprint
	o.Store = cache.NewStore(dlm.Backend, 1<<30, cache.FIFO)
	meth, err := cache.New(method, o)
	if err != nil {
		t.Fatal(err)
	}
	gen := testGen
	gen.Guide = guide.Network
	res, err := cache.Run(context.Background(), dlm.Network, meth, cache.Request{Prompt: ids, PrefixLen: m}, gen)
	if err != nil {
		t.Fatal(err)
	}
	text, _, _ := s.answer(res.Answer, 0, nil)
	return text, res.Guide
}

// encodeChat is the server's prompt of a chat request and its shared
// prefix's length.
func encodeChat(t *testing.T, dlm *load.Model, system, user string) ([]int32, int) {
	t.Helper()
	str := func(v string) json.RawMessage { b, _ := json.Marshal(v); return b }
	msgs := []chatMessage{{Role: "user", Content: str(user)}}
	if system != "" {
		msgs = append([]chatMessage{{Role: "system", Content: str(system)}}, msgs...)
	}
	ids, m, _, err := encodeConversation(context.Background(), dlm.Tokenizer, msgs, false)
	if err != nil {
		t.Fatal(err)
	}
	return ids, m
}

// Guided methods served, alone and batched (the guide's forwards batched
// too), answer what generating the same request with the same guide
// does, with the same guide forwards; the response's dlmcache object and
// /metrics count the guide's work and each step's tokens.
func TestGuidedServeMatchesGenerate(t *testing.T) {
	dlm, guide := guidedFixtures(t)
	for _, method := range []string{"none@guided", "freecache@guided", "d2cache@guided:0.0001:272"} {
		t.Run(method, func(t *testing.T) {
			for _, batch := range []int{1, 4} {
				s := newGuidedServer(t, dlm, guide, method, false, func(c *Config) { c.MaxBatch, c.MaxConcurrency = batch, 0 })
				got := make([]*chatResponse, len(guidedPrompts))
				var wg sync.WaitGroup
				for i, p := range guidedPrompts {
					wg.Go(func() { got[i] = chatFrom(t, i, s, chatBody(p.system, p.user, "")) })
				}
				wg.Wait()
				steps := 0
				for i, p := range guidedPrompts {
					r := got[i]
					if r == nil {
						continue
					}
					text, gs := wantGuided(t, s, dlm, guide, method, p.system, p.user)
					g := r.Dlmcache.Guide
					if r.Choices[0].Message.Content != text {
						t.Errorf("batch %d, request %d: %q, generated %q", batch, i, r.Choices[0].Message.Content, text)
					}
					if g == nil {
						t.Fatalf("batch %d, request %d: no guide in the dlmcache object: %+v", batch, i, r.Dlmcache)
					}
					sum := 0
					for _, n := range g.StepTokens {
						sum += n
					}
					if g.NFE != gs.NFE || g.Steps != gs.Steps || g.Committed != gs.Committed || g.Accepted != gs.Accepted ||
						g.Steps != r.Dlmcache.NFE || len(g.StepTokens) != g.Steps || sum != g.Committed || g.Model != guide.Name() || g.PrefixTokens != 0 {
						t.Errorf("batch %d, request %d: guide %+v (DLM NFE %d), generated %+v", batch, i, g, r.Dlmcache.NFE, gs)
					}
					steps += g.Steps
				}
				page := get(t, s, "/metrics").Body.String()
				if v := metric(t, page, "dlmcache_guided_steps_total"); int(v) != steps {
					t.Errorf("batch %d: dlmcache_guided_steps_total %g, the responses' %d", batch, v, steps)
				}
				if v := metric(t, page, "dlmcache_guided_step_tokens_count"); int(v) != steps {
					t.Errorf("batch %d: dlmcache_guided_step_tokens has %g samples, want %d", batch, v, steps)
				}
				if v := metric(t, page, "dlmcache_guide_batch_size_count"); (batch > 1) != (v > 0) {
					t.Errorf("batch %d: %g guide batches", batch, v)
				}
			}
		})
	}
}

// With the guide's block store, a served guided request gives the answer
// it gives without it, and a shared system message's full blocks come
// from the store for every request after the first that carries it:
// the response says so, and /metrics counts the hits.
func TestGuidedStore(t *testing.T) {
	dlm, guide := guidedFixtures(t)
	for _, batch := range []int{1, 4} {
		off := newGuidedServer(t, dlm, guide, "freecache@guided", false, func(c *Config) { c.MaxConcurrency = 1 })
		on := newGuidedServer(t, dlm, guide, "freecache@guided", true, func(c *Config) { c.MaxBatch, c.MaxConcurrency = batch, 0 })
		var seen [][]int32 // the guide's prefixes so far
		hits := 0
		for i, p := range guidedPrompts {
			want := decodeChat(t, post(t, off, "/v1/chat/completions", chatBody(p.system, p.user, "")))
			got := decodeChat(t, post(t, on, "/v1/chat/completions", chatBody(p.system, p.user, "")))
			if got.Choices[0].Message.Content != want.Choices[0].Message.Content {
				t.Errorf("batch %d, request %d with the guide's store: %q, without: %q", batch, i, got.Choices[0].Message.Content, want.Choices[0].Message.Content)
			}
			g, w := got.Dlmcache.Guide, want.Dlmcache.Guide
			if g == nil || w == nil || g.Committed != w.Committed || g.Steps != w.Steps {
				t.Fatalf("batch %d, request %d: guide %+v with the store, %+v without", batch, i, g, w)
			}
			full := g.PrefixTokens / 8 * 8
			if g.PrefixTokens == 0 || g.PrefixTokens >= got.Dlmcache.PrefixTokens+1 || full == 0 {
				t.Fatalf("batch %d, request %d: the guide's prefix %d tokens (the request's %d): want a full block", batch, i, g.PrefixTokens, got.Dlmcache.PrefixTokens)
			}
			// The full blocks it shares with an earlier request's prefix.
			ids, m := encodeChat(t, dlm, p.system, p.user)
			pre := ids[:min(m, len(ids)-1)]
			wantHit := 0
			for _, q := range seen {
				n := 0
				for n < min(len(q), len(pre)) && q[n] == pre[n] {
					n++
				}
				wantHit = max(wantHit, min(n, full)/8*8)
			}
			seen = append(seen, pre)
			if g.PrefixHitTokens != wantHit {
				t.Errorf("batch %d, request %d: %d of the guide's prefix tokens from the store, want %d", batch, i, g.PrefixHitTokens, wantHit)
			}
			hits += g.PrefixHitTokens
		}
		page := get(t, on, "/metrics").Body.String()
		if v := metric(t, page, "dlmcache_guide_prefix_cache_hits_tokens_total"); int(v) != hits || hits == 0 {
			t.Errorf("batch %d: dlmcache_guide_prefix_cache_hits_tokens_total %g, the responses' %d", batch, v, hits)
		}
		if v := metric(t, page, "dlmcache_guide_prefix_cache_entries"); v == 0 {
			t.Errorf("batch %d: the guide's store holds no block", batch)
		}
	}
}

// Concurrent requests with one system message, batched: each computes
// or finds the guide's prefix blocks once (single flight), and every
// answer is the one served without the store.
func TestGuidedStoreConcurrent(t *testing.T) {
	dlm, guide := guidedFixtures(t)
	off := newGuidedServer(t, dlm, guide, "none@guided", false, nil)
	on := newGuidedServer(t, dlm, guide, "none@guided", true, func(c *Config) { c.MaxBatch, c.MaxConcurrency = 4, 0 })
	got := make([]*chatResponse, len(guidedPrompts))
	var wg sync.WaitGroup
	for i, p := range guidedPrompts {
		wg.Go(func() { got[i] = chatFrom(t, i, on, chatBody(p.system, p.user, "")) })
	}
	wg.Wait()
	for i, p := range guidedPrompts {
		want := decodeChat(t, post(t, off, "/v1/chat/completions", chatBody(p.system, p.user, "")))
		if got[i] != nil && got[i].Choices[0].Message.Content != want.Choices[0].Message.Content {
			t.Errorf("request %d: %q with the store, batched; %q without", i, got[i].Choices[0].Message.Content, want.Choices[0].Message.Content)
		}
	}
}

// What New refuses: a guided method with no guide, a guide that is not
// autoregressive or has another vocabulary, a guide store with no guide.
func TestGuidedRefusals(t *testing.T) {
	dlm, guide := guidedFixtures(t)
	meth := func(name string) cache.Method {
		m, err := cache.New(name, cache.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	gid := lut.ModelID{Name: "tiny-llama", NLayers: len(guide.Blocks), Fingerprint: guide.Fingerprint}
	tab, err := cache.New("table", cache.Options{Table: &lut.Table{Format: lut.Format, Model: lut.ModelID{Name: "tiny-llada-moe", NLayers: len(dlm.Blocks), Fingerprint: dlm.Fingerprint},
		Tau: 1, Classes: []lut.Class{{Name: "all"}}, Guide: &gid,
		Bins: []lut.Bin{{Lo: 0, Hi: 1, Choices: []*lut.Choice{{Class: "all", Setting: lut.Setting{Method: "freecache", Decoder: "guided"}}}}}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Model: dlm, Method: meth("none@guided"), Gen: testGen}, "needs a guide (serve --guide MODEL)"},
		{Config{Model: dlm, Method: tab, Gen: testGen}, "the table's choices decode with the guided decoder"},
		{Config{Model: dlm, Method: meth("none@guided"), Gen: testGen, Guide: testmodel.Shared(t, "tiny-f32")}, "is not an autoregressive model"},
		{Config{Model: loadTiny(t), Method: meth("none@guided"), Gen: testGen, Guide: guide}, "must share a vocabulary"},
		{Config{Model: dlm, Method: meth("none"), Gen: testGen, GuideStore: cache.NewBlockStore(guide.Backend, 8, 1<<20, true, nil)}, "without a guide"},
	} {
		if _, err := New(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", tc.cfg.Method.Name(), err, tc.want)
		}
	}
}

// A streamed guided request (the canvas streamed too): its deltas join to
// the unstreamed answer.
func TestGuidedStream(t *testing.T) {
	dlm, guide := guidedFixtures(t)
	s := newGuidedServer(t, dlm, guide, "freecache@guided", true, nil)
	for _, p := range guidedPrompts[:3] {
		full := decodeChat(t, post(t, s, "/v1/chat/completions", chatBody(p.system, p.user, "")))
		rec := post(t, s, "/v1/chat/completions", chatBody(p.system, p.user, `"stream":true,"dlmcache_stream_canvas":true`))
		if rec.Code != 200 {
			t.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
		var text strings.Builder
		for _, e := range sseEvents(t, rec.Body.String()) {
			var c struct {
				Choices []struct {
					Delta struct{ Content string } `json:"delta"`
				} `json:"choices"`
			}
			if e != "[DONE]" && json.Unmarshal([]byte(e), &c) == nil && len(c.Choices) > 0 {
				text.WriteString(c.Choices[0].Delta.Content)
			}
		}
		if text.String() != full.Choices[0].Message.Content {
			t.Errorf("%q streamed %q, unstreamed %q", p.user, text.String(), full.Choices[0].Message.Content)
		}
	}
}
