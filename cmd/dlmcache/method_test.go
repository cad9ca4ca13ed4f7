package main

import (
	"strings"
	"testing"

	"github.com/dlmcache/dlmcache/lut"
)

// The bicache methods warn before reusing the store's prefix K/V across
// requests at depths from the whole-prefix cosine, and only then.
func TestCrossRequestWarning(t *testing.T) {
	kv, old, rowMin := &lut.Table{Similarity: "kv"}, &lut.Table{}, &lut.Table{Similarity: "kv-row-min"}
	calibrated := &lut.Table{Bins: []lut.Bin{{Lo: 0, Hi: 1, Count: 3, MeanDepth: 6,
		Calibrated: map[string]*lut.BinCalibration{"store": {Depth: 2}}}},
		Calibration: &lut.Calibration{Sources: []string{"store"}}}
	if w := crossRequestWarning("store", calibrated); w != "" {
		t.Errorf("a table calibrated for the store source: warning %q", w)
	}
	for _, tc := range []struct {
		source string
		table  *lut.Table
		warn   bool
	}{
		{"request", kv, false},
		{"store", kv, true},
		{"recompute", kv, true},
		{"recompute", old, true}, // written before tables named their statistic: kv
		{"store", rowMin, false},
		{"recompute", rowMin, false},
		{"store", nil, false},
	} {
		w := crossRequestWarning(tc.source, tc.table)
		if (w != "") != tc.warn || tc.warn && !strings.Contains(w, "--similarity kv-row-min") {
			t.Errorf("%s with %+v: warning %q, want one: %v", tc.source, tc.table, w, tc.warn)
		}
	}
}
