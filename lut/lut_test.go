package lut

import (
	"path/filepath"
	"strings"
	"testing"
)

var id = ModelID{Name: "m", NLayers: 8, Fingerprint: "abc"}

func TestBuildAndLookup(t *testing.T) {
	edges := []float64{0.5, 0.6, 0.7, 0.8}
	tab, err := Build(id, 0.97, edges, []Sample{
		{0.55, 1}, {0.52, 2}, // bin 0: mean 1.5
		{0.75, 5}, {0.79, 7}, {0.70, 6}, // bin 2: mean 6, 0.70 belongs to bin 2
		{0.95, 8}, // outside: dropped
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := []int{tab.Bins[0].Count, tab.Bins[1].Count, tab.Bins[2].Count}; got[0] != 2 || got[1] != 0 || got[2] != 3 {
		t.Fatalf("counts %v", got)
	}
	for _, tc := range []struct {
		r       float64
		stat    Statistic
		depth   int
		clamped bool
	}{
		{0.55, Mean, 1, false},
		{0.75, Mean, 6, false},
		{0.75, MinStat, 5, false},
		{0.75, MeanStd, 5, false}, // 6 − 0.816
		{0.62, Mean, 1, true},     // empty bin: nearest filled is bin 0
		{0.68, Mean, 6, true},     // … or bin 2
		{0.99, Mean, 6, true},
		{0.10, Mean, 1, true},
		{0.80, Mean, 6, false}, // the top edge belongs to the last bin
	} {
		d, c := tab.Lookup(tc.r, tc.stat)
		if d != tc.depth || c != tc.clamped {
			t.Errorf("Lookup(%v, %s) = %d, %v; want %d, %v", tc.r, tc.stat, d, c, tc.depth, tc.clamped)
		}
	}
}

func TestBuildErrors(t *testing.T) {
	for _, tc := range []struct {
		tau   float64
		edges []float64
	}{
		{0, []float64{0, 1}}, {1.01, []float64{0, 1}}, {0.9, []float64{0.5}}, {0.9, []float64{0.5, 0.5}},
	} {
		if _, err := Build(id, tc.tau, tc.edges, nil); err == nil {
			t.Errorf("Build(τ=%v, %v): no error", tc.tau, tc.edges)
		}
	}
}

func TestL1IsMeanDepthDifferenceOverSameBins(t *testing.T) {
	edges := []float64{0, 0.5, 1}
	a, _ := Build(id, 0.9, edges, []Sample{{0.2, 2}, {0.7, 6}})
	b, _ := Build(id, 0.9, edges, []Sample{{0.2, 3}, {0.7, 6}})
	if d, err := L1(a, b, Mean); err != nil || d != 0.5 {
		t.Errorf("L1 = %v, %v; want 0.5", d, err)
	}
	c, _ := Build(id, 0.9, []float64{0, 0.4, 1}, nil)
	if _, err := L1(a, c, Mean); err == nil {
		t.Error("L1 of tables with different bins: no error")
	}
}

func TestReadWriteCheck(t *testing.T) {
	tab, _ := Build(id, 0.97, []float64{0.5, 0.75, 1}, []Sample{{0.6, 3}})
	p := filepath.Join(t.TempDir(), "table.json")
	if err := tab.Write(p); err != nil {
		t.Fatal(err)
	}
	got, err := Read(p)
	if err != nil {
		t.Fatal(err)
	}
	if got.Bins[0].MeanDepth != 3 || got.Model != id {
		t.Errorf("round trip: %+v", got)
	}
	if err := got.Check("m", 8, "abc"); err != nil {
		t.Error(err)
	}
	err = got.Check("other", 32, "def")
	if err == nil || !strings.Contains(err.Error(), "abc") || !strings.Contains(err.Error(), "def") {
		t.Errorf("Check against another model: %v (want both fingerprints named)", err)
	}
	for _, bad := range []string{
		`{}`, `{"format":"dlmcache.lut/v4","tau":0.9,"model":{"n_layers":8},"bins":[{"lo":0,"hi":1}]}`,
		`{"format":"dlmcache.lut/v2","tau":0.9,"model":{"n_layers":8},"bins":[{"lo":0,"hi":1,"calibrated":{"store":{"depth":9}}}]}`,
		`{"format":"dlmcache.lut/v1","tau":1.5,"model":{"n_layers":8},"bins":[{"lo":0,"hi":1}]}`,
		`{"format":"dlmcache.lut/v1","tau":0.9,"model":{"n_layers":8},"bins":[]}`,
		`{"format":"dlmcache.lut/v1","tau":0.9,"model":{"n_layers":8},"bins":[{"lo":0,"hi":1,"mean_depth":9}]}`,
		`not json`,
		`{"format":"dlmcache.lut/v3","tau":1,"model":{"n_layers":8},"bins":[{"lo":0,"hi":1,"choices":[{"class":"long","setting":{"method":"none"}}]}]}`,                          // no such class
		`{"format":"dlmcache.lut/v3","tau":1,"model":{"n_layers":8},"classes":[{"name":"long","max_gen":0}],"bins":[{"lo":0,"hi":1,"choices":[{"class":"long","setting":{}}]}]}`, // no method
		`{"format":"dlmcache.lut/v3","tau":1,"model":{"n_layers":8},"classes":[{"name":"a","max_gen":0},{"name":"b","max_gen":32}],"bins":[{"lo":0,"hi":1}]}`,                    // any-length class not last
		`{"format":"dlmcache.lut/v1","tau":0.9,"model":{"n_layers":8},"bins":[{"lo":0,"hi":1}]} {"more":1}`,                                                                      // data after the table
		`{"format":"dlmcache.lut/v1","tau":0.9,"model":{"n_layers":8},"bins":[{"lo":0,"hi":1}]}]`,                                                                                // a stray bracket after it
		`{"format":"dlmcache.lut/v3","tau":0.9,"model":{"n_layers":8},"gen_length":-5,"steps":0,"block_length":7,"bins":[{"lo":0,"hi":1}]}`,                                      // negative regime
	} {
		if _, err := Parse([]byte(bad)); err == nil {
			t.Errorf("Parse(%s): no error", bad)
		}
	}
}
