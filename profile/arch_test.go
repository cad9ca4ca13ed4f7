package profile

import (
	"context"
	"math"
	"path/filepath"
	"testing"

	"github.com/dlmcache/dlmcache/internal/testmodel"
	"github.com/dlmcache/dlmcache/lut"
	"github.com/dlmcache/dlmcache/model/sample"
	"github.com/dlmcache/dlmcache/regime"
)

// The profiler on a fixture of each architecture: a few requests write a
// table of the model's layers, with layer 1's prefix K/V the same alone
// and in the request (projections of the embeddings at the same
// positions). On a block-causal model the prefixes measured at their full
// blocks (ReusablePrefix) are the same at every layer, so every filled bin
// gets the full depth, while a prefix ending inside a block drifts (its
// worst row).
func TestProfileOnEveryArchitecture(t *testing.T) {
	for _, a := range testmodel.Archs {
		t.Run(a.Name, func(t *testing.T) {
			m := testmodel.Shared(t, a.Fixture)
			L, B := len(m.Blocks), m.Config.CausalBlock()
			var reqs []Request
			for _, q := range testRequests(t, m, 8) {
				if q.PrefixLen = ReusablePrefix(m.Config, q.PrefixLen); q.PrefixLen > 0 {
					reqs = append(reqs, q)
				}
			}
			if len(reqs) < 4 {
				t.Fatalf("%d requests have a full block of %d in their prefix", len(reqs), B)
			}
			dir := t.TempDir()
			res, err := testRunner(m, dir).Run(context.Background(), reqs)
			if err != nil {
				t.Fatal(err)
			}
			for _, rec := range res.Records {
				if (rec.Layer == 1 || B > 0) && math.Abs(rec.SimKVRowMin-1) > 1e-5 {
					t.Errorf("request %s: layer %d's prefix K/V: worst row's cosine %v alone and in the request, want 1", rec.RequestID, rec.Layer, rec.SimKVRowMin)
				}
			}
			for _, f := range []string{TableFile, CrossTableFile} {
				tab, err := lut.Read(filepath.Join(dir, f))
				if err != nil {
					t.Fatal(err)
				}
				if tab.Model.NLayers != L {
					t.Errorf("%s: %d layers, the model %d", f, tab.Model.NLayers, L)
				}
				filled := 0
				for _, b := range tab.Bins {
					if b.Count == 0 {
						continue
					}
					filled++
					if d := b.Depth(lut.Mean, L); d < 1 || d > L || B > 0 && (d != L || b.Min != L) {
						t.Errorf("%s: bin [%.2f, %.2f): depth %d (min %d) of %d layers", f, b.Lo, b.Hi, d, b.Min, L)
					}
				}
				if filled == 0 {
					t.Errorf("%s: no bin filled:\n%s", f, tab)
				}
			}
			if B > 0 {
				// The same request with its prefix one token into the next
				// block: that token attends to the rest of its block.
				q := reqs[0]
				q.PrefixLen++
				sims, err := Measure(context.Background(), m.Network, q.Prompt, q.PrefixLen, sample.GenOptions{Regime: regime.Regime{GenLength: 8, Steps: 4}}, false)
				if err != nil {
					t.Fatal(err)
				}
				if d := SafeDepth(rowMinOf(sims), 0.99); d == L {
					t.Errorf("a prefix ending inside a block keeps every layer (%+v): the full-depth bins above prove nothing", sims)
				}
			}
		})
	}
}

// rowMinOf is the worst rows' K⊕V similarities of sims.
func rowMinOf(sims []Sim) []float64 {
	kv := make([]float64, len(sims))
	for i, s := range sims {
		kv[i] = s.KVRowMin
	}
	return kv
}
