package profile

import (
	"context"
	"math"
	"testing"

	"github.com/dlmcache/dlmcache/internal/testmodel"
	"github.com/dlmcache/dlmcache/model/load"
	"github.com/dlmcache/dlmcache/model/sample"
	"github.com/dlmcache/dlmcache/regime"
)

// measureRequest loads tiny-f32 and encodes the request the measure tests
// run: a system prompt and a question, and the system prompt's length.
func measureRequest(t *testing.T) (*load.Model, []int32, int) {
	t.Helper()
	m := testmodel.Load(t, "tiny-f32")
	ids, prefix, err := m.Tokenizer.EncodeChat("You are a careful assistant. Keep answers short.", "What is two plus two?")
	if err != nil {
		t.Fatal(err)
	}
	return m, ids, prefix
}

func TestMeasureLayerOneIsExactAndDeeperLayersDrift(t *testing.T) {
	m, ids, prefix := measureRequest(t)
	o := sample.GenOptions{Regime: regime.Regime{GenLength: 8, Steps: 4}}
	sims, err := Measure(context.Background(), m.Network, ids, prefix, o, false)
	if err != nil {
		t.Fatal(err)
	}
	L := len(m.Blocks)
	if len(sims) != L {
		t.Fatalf("%d similarities, want %d (one per layer at step 1)", len(sims), L)
	}
	// Layer 1's K/V are projections of the embeddings at the same positions.
	if s := sims[0]; math.Abs(s.KV-1) > 1e-6 || math.Abs(s.K-1) > 1e-6 || math.Abs(s.V-1) > 1e-6 {
		t.Errorf("layer 1: %+v, want 1", s)
	}
	if s := sims[0]; math.Abs(s.KVRowMin-1) > 1e-6 {
		t.Errorf("layer 1: worst row %v, want 1", s.KVRowMin)
	}
	for _, s := range sims[1:] {
		if !(s.KV < 1-1e-6) || s.KV < -1 {
			t.Errorf("layer %d: S = %v, want < 1 (the suffix changes deeper K/V)", s.Layer, s.KV)
		}
		if !(s.KVRowMin < 1-1e-6) || s.KVRowMin < -1 {
			t.Errorf("layer %d: worst row %v, want in [-1, 1)", s.Layer, s.KVRowMin)
		}
	}
	all, err := Measure(context.Background(), m.Network, ids, prefix, o, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != L*o.Steps {
		t.Fatalf("all steps: %d similarities, want %d", len(all), L*o.Steps)
	}
	for i := 0; i < L; i++ { // step 1 of the generation is the single-forward measurement
		if all[i].Step != 1 || math.Abs(all[i].KV-sims[i].KV) > 1e-9 {
			t.Errorf("all-steps step 1 layer %d: %+v, single forward %+v", i+1, all[i], sims[i])
		}
	}
	if _, err := Measure(context.Background(), m.Network, ids, 0, o, false); err == nil {
		t.Error("prefix length 0: no error")
	}
}

// TestSimilarityRowMin: one row of 100 turned around barely moves the
// whole-prefix cosine and is exactly what the worst-row cosine reports.
func TestSimilarityRowMin(t *testing.T) {
	const m, w = 100, 4
	kc, vc := make([]float32, m*w), make([]float32, m*w)
	for i := range kc {
		kc[i], vc[i] = float32(1+i%3), float32(2-i%2)
	}
	for _, tc := range []struct {
		name    string
		row     int
		scale   float32 // the row's K and V in the reference: cached × scale
		kv, min float64
	}{
		{"identical", -1, 1, 1, 1},
		{"one row scaled", 7, 3, 0.98, 1},     // a row's cosine ignores its length; the whole prefix's does not
		{"one row reversed", 7, -1, 0.98, -1}, // ≈ (99 − 1)/100 with rows of similar norms
	} {
		k, v := append([]float32(nil), kc...), append([]float32(nil), vc...)
		if tc.row >= 0 {
			for j := tc.row * w; j < (tc.row+1)*w; j++ {
				k[j] *= tc.scale
				v[j] *= tc.scale
			}
		}
		s := similarity(2, 1, m, kc, vc, k, v)
		if math.Abs(s.KVRowMin-tc.min) > 1e-9 {
			t.Errorf("%s: worst row %v, want %v", tc.name, s.KVRowMin, tc.min)
		}
		if math.Abs(s.KV-tc.kv) > 0.01 {
			t.Errorf("%s: whole prefix %v, want ≈ %v", tc.name, s.KV, tc.kv)
		}
	}
}

func TestSafeDepth(t *testing.T) {
	for _, tc := range []struct {
		s    []float64
		tau  float64
		want int
	}{
		{[]float64{1, 0.99, 0.98, 0.95, 0.99}, 0.97, 3},
		{[]float64{1, 0.9, 0.99}, 0.97, 1},
		{[]float64{1, 1, 1}, 0.97, 3},
		{[]float64{0.5}, 0.97, 1}, // never below 1
	} {
		if got := SafeDepth(tc.s, tc.tau); got != tc.want {
			t.Errorf("SafeDepth(%v, %v) = %d, want %d", tc.s, tc.tau, got, tc.want)
		}
	}
}

func TestMeasureRefresh(t *testing.T) {
	m, ids, prefix := measureRequest(t)
	o := sample.GenOptions{Regime: regime.Regime{GenLength: 8, Steps: 8}}
	pic, err := MeasureRefresh(context.Background(), m.Network, ids, prefix, o, 1)
	if err != nil {
		t.Fatal(err)
	}
	for l := range pic.Layers {
		// R = 1 refreshes every step: identical to the reference.
		if math.Abs(pic.Refreshed[l]-1) > 1e-9 || math.Abs(pic.RefreshedRowMin[l]-1) > 1e-9 {
			t.Errorf("layer %d refreshed every step: %v, worst row %v, want 1", l+1, pic.Refreshed[l], pic.RefreshedRowMin[l])
		}
		if pic.Stale[l] > 1+1e-9 || pic.Cross[l] > 1+1e-9 {
			t.Errorf("layer %d: similarity above 1: %+v", l+1, pic)
		}
		if pic.CrossRowMin[l] > 1+1e-9 || pic.StaleRowMin[l] > 1+1e-9 {
			t.Errorf("layer %d: worst-row similarity above 1: %+v", l+1, pic)
		}
	}
	if math.Abs(pic.Cross[0]-1) > 1e-6 {
		t.Errorf("layer 1 cross-request: %v, want 1", pic.Cross[0])
	}
	p4, err := MeasureRefresh(context.Background(), m.Network, ids, prefix, o, 4)
	if err != nil {
		t.Fatal(err)
	}
	L := len(pic.Layers)
	if !(p4.Refreshed[L-1] >= p4.Stale[L-1]-1e-12) {
		t.Errorf("last layer: refreshed %v below stale %v", p4.Refreshed[L-1], p4.Stale[L-1])
	}
}

// TestRefreshPictureAverage: Add and Scale average every series, the
// worst-row ones included.
func TestRefreshPictureAverage(t *testing.T) {
	mk := func(v float64) *RefreshPicture {
		p := &RefreshPicture{Layers: []int{1, 2}, R: 4}
		for _, s := range p.series() {
			*s = []float64{v, 2 * v}
		}
		return p
	}
	var avg RefreshPicture
	avg.Add(mk(1))
	avg.Add(mk(3))
	avg.Scale(2)
	for i, s := range avg.series() {
		if (*s)[0] != 2 || (*s)[1] != 4 {
			t.Errorf("series %d: %v, want [2 4]", i, *s)
		}
	}
	if avg.R != 4 || len(avg.Layers) != 2 {
		t.Errorf("R %d, layers %v", avg.R, avg.Layers)
	}
}
