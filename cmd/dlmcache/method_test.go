package main

import (
	"strings"
	"testing"

	"github.com/dlmcache/dlmcache/lut"
)

func TestDeepSource(t *testing.T) {
	cosine := &lut.Table{Bins: []lut.Bin{{Lo: 0, Hi: 1, Count: 3, MeanDepth: 6}}}
	calibrated := &lut.Table{Bins: []lut.Bin{{Lo: 0, Hi: 1, Count: 3, MeanDepth: 6,
		Calibrated: map[string]*lut.BinCalibration{"store": {Depth: 2}}}},
		Calibration: &lut.Calibration{Sources: []string{"store"}}}
	for _, tc := range []struct {
		flag  string
		table *lut.Table
		want  string
	}{
		{"auto", nil, "request"},
		{"auto", cosine, "request"},
		{"auto", calibrated, "store"}, // a table calibrated for the store shares K/V across requests
		{"store", cosine, "store"},
		{"recompute", nil, "recompute"},
		{"request", calibrated, "request"},
	} {
		if got, why := deepSource(tc.flag, tc.table); got != tc.want || why == "" {
			t.Errorf("deepSource(%s, %v) = %s (%q), want %s", tc.flag, tc.table != nil, got, why, tc.want)
		}
	}
	if w := crossRequestWarning("store", calibrated); w != "" {
		t.Errorf("a table calibrated for the store source: warning %q", w)
	}
}

func TestCrossRequestWarning(t *testing.T) {
	kv, old, rowMin := &lut.Table{Similarity: "kv"}, &lut.Table{}, &lut.Table{Similarity: "kv-row-min"}
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
