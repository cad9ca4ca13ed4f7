package lut_test

import (
	"fmt"

	"github.com/dlmcache/dlmcache/lut"
)

// A table is built from profiled requests: each sample is one request's
// shared-prefix ratio and the deepest layer whose prefix K/V stayed at or
// above τ. Serving looks the depth up by the request's ratio; a ratio
// outside the profiled bins is clamped to the nearest filled one.
func Example() {
	model := lut.ModelID{Name: "llada-tiny", NLayers: 8}
	edges := []float64{0.2, 0.4, 0.6, 0.8}
	samples := []lut.Sample{
		{Ratio: 0.25, Depth: 2}, {Ratio: 0.30, Depth: 3},
		{Ratio: 0.45, Depth: 4}, {Ratio: 0.55, Depth: 5},
		{Ratio: 0.70, Depth: 7}, {Ratio: 0.75, Depth: 8},
	}
	t, err := lut.Build(model, 0.97, edges, samples)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, r := range []float64{0.3, 0.5, 0.72, 0.95} {
		mean, clamped := t.Lookup(r, lut.Mean)
		least, _ := t.Lookup(r, lut.MinStat)
		fmt.Printf("r %.2f: depth %d (mean), %d (min), clamped %t\n", r, mean, least, clamped)
	}
	// Output:
	// r 0.30: depth 2 (mean), 2 (min), clamped false
	// r 0.50: depth 4 (mean), 4 (min), clamped false
	// r 0.72: depth 7 (mean), 7 (min), clamped false
	// r 0.95: depth 7 (mean), 7 (min), clamped true
}

// Parse reads a table as profile and calibrate write it; Check refuses one
// made for another model.
func ExampleParse() {
	t, err := lut.Parse([]byte(`{
  "format": "dlmcache.lut/v2",
  "model": {"name": "llada-tiny", "n_layers": 8, "fingerprint": "9f0c41d2"},
  "tau": 0.97, "similarity": "kv-row-min", "gen_length": 128, "steps": 64, "block_length": 32,
  "bins": [{"lo": 0.05, "hi": 0.95, "mean_depth": 1, "min": 1, "count": 64}]
}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	d, _ := t.Lookup(0.6, lut.Mean)
	fmt.Println(t.SimilarityName(), "table, depth", d)
	fmt.Println(t.Check("llada-tiny", 8, "9f0c41d2") == nil)
	fmt.Println(t.Check("other", 8, "0badf00d") != nil)
	// Output:
	// kv-row-min table, depth 1
	// true
	// true
}

// L1 is the mean absolute difference of two tables' depths over the bins
// both have filled: how `sweep n` decides a profile has converged.
func ExampleL1() {
	model := lut.ModelID{Name: "m", NLayers: 8}
	edges := []float64{0, 0.5, 1}
	a, _ := lut.Build(model, 0.97, edges, []lut.Sample{{Ratio: 0.2, Depth: 3}, {Ratio: 0.7, Depth: 6}})
	b, _ := lut.Build(model, 0.97, edges, []lut.Sample{{Ratio: 0.2, Depth: 4}, {Ratio: 0.7, Depth: 6}})
	d, err := lut.L1(a, b, lut.Mean)
	fmt.Println(d, err)
	// Output:
	// 0.5 <nil>
}
