package lut

import (
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dlmcache/dlmcache/regime"
)

// Published Wilson score intervals (two-sided 95%, z = 1.96).
func TestWilsonMatchesPublishedIntervals(t *testing.T) {
	for _, tc := range []struct {
		k, n int
		z    float64
		want float64
	}{
		{50, 100, 1.96, 0.4038},
		{10, 10, 1.96, 0.7225}, // n/(n+z²)
		{0, 10, 1.96, 0},
		{250, 250, 1.2816, 250 / (250 + 1.2816*1.2816)},
	} {
		if got := Wilson(tc.k, tc.n, tc.z); math.Abs(got-tc.want) > 5e-4 {
			t.Errorf("Wilson(%d, %d, %g) = %.4f, want %.4f", tc.k, tc.n, tc.z, got, tc.want)
		}
	}
	if Wilson(0, 0, 1.96) != 0 {
		t.Error("no samples: want 0")
	}
}

func calibratedTable(t *testing.T) *Table {
	t.Helper()
	tab, err := Build(ModelID{Name: "m", NLayers: 8, Fingerprint: "abc"}, 0.97, []float64{0.5, 0.7, 0.9},
		[]Sample{{0.6, 6}, {0.8, 7}})
	if err != nil {
		t.Fatal(err)
	}
	tab.GenLength, tab.Steps, tab.BlockLength = 16, 8, 16
	tab.Bins[0].Calibrated = map[string]*BinCalibration{"store": {Depth: 0, Samples: 10}, "request": {Depth: 5, Samples: 10}}
	tab.Bins[1].Calibrated = map[string]*BinCalibration{"store": {Depth: 2, Samples: 10, Tried: []Trial{{Depth: 7}, {Depth: 2, Passed: true}}}}
	tab.Calibration = &Calibration{Method: "bicache", Refresh: 16, Sources: []string{"store", "request"}, Gate: "token", Target: 0.99, Confidence: 0.9}
	return tab
}

func TestLookupSource(t *testing.T) {
	tab := calibratedTable(t)
	for _, tc := range []struct {
		r    float64
		src  string
		want int
	}{
		{0.6, "store", 0},   // calibrated: no reuse
		{0.6, "request", 5}, // calibrated
		{0.8, "store", 2},
		{0.8, "request", 7}, // not calibrated for request: the cosine depth
		{0.6, "recompute", 6},
	} {
		if got, _ := tab.LookupSource(tc.r, Mean, tc.src); got != tc.want {
			t.Errorf("LookupSource(%g, %s) = %d, want %d", tc.r, tc.src, got, tc.want)
		}
	}
	if !tab.CalibratedFor("store") || tab.CalibratedFor("request") || tab.CalibratedFor("recompute") {
		t.Errorf("CalibratedFor: store %v request %v", tab.CalibratedFor("store"), tab.CalibratedFor("request"))
	}
	// Written and read back (v2), printed with its evidence.
	path := filepath.Join(t.TempDir(), "t.json")
	if err := tab.Write(path); err != nil {
		t.Fatal(err)
	}
	back, err := Read(path)
	if err != nil || back.Format != Format || back.BlockLength != 16 || back.Bins[1].Calibrated["store"].Tried[1].Depth != 2 {
		t.Fatalf("read back: %+v %v", back, err)
	}
	if s := back.String(); !strings.Contains(s, "calibrated (bicache, R=16)") || !strings.Contains(s, "2: 0/0 0.000✓") {
		t.Errorf("String:\n%s", s)
	}
}

// A table profiled in another regime is refused (a v1 table's unknown
// block length is not compared); which methods a calibrated table serves
// the cache registry says (cache.CheckTable).
func TestCheckRegime(t *testing.T) {
	tab := calibratedTable(t)
	if err := tab.CheckRegime(regime.Regime{GenLength: 16, Steps: 8, BlockLength: 16}); err != nil {
		t.Error(err)
	}
	if err := tab.CheckRegime(regime.Regime{GenLength: 128, Steps: 64, BlockLength: 32}); err == nil || !strings.Contains(err.Error(), "gen length 16") {
		t.Errorf("another regime: %v", err)
	}
	v1 := *tab
	v1.BlockLength = 0 // a v1 table: block length unknown, not compared
	if err := v1.CheckRegime(regime.Regime{GenLength: 16, Steps: 8, BlockLength: 4}); err != nil {
		t.Errorf("v1 table: %v", err)
	}
}
