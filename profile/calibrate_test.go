package profile

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/dlmcache/dlmcache/lut"
	"github.com/dlmcache/dlmcache/model/load"
	"github.com/dlmcache/dlmcache/model/sample"
	"github.com/dlmcache/dlmcache/regime"
)

func testCalibrator(m *load.Model, dir string) *Calibrator {
	eos := int32(m.Config.EOSTokenID)
	return &Calibrator{
		Model: m.Network, Gen: sample.GenOptions{Regime: regime.Regime{GenLength: 8, Steps: 4}},
		Run: CalibrationRun{Model: lut.ModelID{Name: "tiny", NLayers: len(m.Blocks), Fingerprint: m.Fingerprint},
			Regime: regime.Regime{GenLength: 8, Steps: 4, BlockLength: 8}, Refresh: 2, Sources: []string{"store", "request"},
			Edges: []float64{0.2, 0.5, 0.8, 1}},
		Stat: lut.Mean, Gate: GateToken, Target: 0.6, Z: 1.2816,
		Stop: func(a []int32) int {
			for i, t := range a {
				if t == eos {
					return i
				}
			}
			return len(a)
		},
		OutDir: dir,
	}
}

// The search on made-up outcomes: depths pass up to a threshold.
func TestCalibrationSearchFindsDeepestPassingDepth(t *testing.T) {
	bin := []Request{{ID: "a"}, {ID: "b"}, {ID: "c"}, {ID: "d"}}
	passUpTo := func(limit int) func(Request, string, int) (outcome, error) {
		return func(q Request, _ string, d int) (outcome, error) {
			if d <= limit {
				return outcome{tokens: 100, agree: 100, equal: true}, nil
			}
			return outcome{tokens: 100, agree: 50}, nil
		}
	}
	for _, tc := range []struct {
		d0, limit, want int
		tried           []int
	}{
		{3, 5, 5, []int{3, 6, 5}}, // up from the start by bisection
		{3, 8, 8, []int{3, 6, 8}},
		{6, 2, 2, []int{6, 3, 2}}, // down
		{2, 0, 0, []int{2, 1}},    // none passes: no reuse
	} {
		bc, err := search(bin, []int{100, 100, 100, 100}, "store", tc.d0, 8, GateToken, 0.95, 1.2816, passUpTo(tc.limit))
		if err != nil {
			t.Fatal(err)
		}
		var tried []int
		for _, tr := range bc.Tried {
			tried = append(tried, tr.Depth)
		}
		if bc.Depth != tc.want || !reflect.DeepEqual(tried, tc.tried) {
			t.Errorf("start %d, passing up to %d: depth %d tried %v, want %d tried %v", tc.d0, tc.limit, bc.Depth, tried, tc.want, tc.tried)
		}
		for _, tr := range bc.Tried {
			if !tr.Passed && tr.Requests != 1 {
				t.Errorf("a failing trial ran %d requests: it can stop after the first", tr.Requests)
			}
		}
	}
}

// Killing a calibration and resuming it gives the identical table; shards
// merged give the table of one run.
func TestCalibrateResumeAndShards(t *testing.T) {
	m, reqs := tinyRequests(t, 9)
	whole, err := testCalibrator(m, t.TempDir()).Calibrate(context.Background(), reqs)
	if err != nil {
		t.Fatal(err)
	}
	filled := 0
	for _, b := range whole.Bins {
		c := b.Calibrated["store"]
		switch {
		case c == nil:
			t.Errorf("bin [%g,%g): no calibration", b.Lo, b.Hi)
		case c.Samples > 0:
			filled++
			if len(c.Tried) == 0 {
				t.Errorf("bin [%g,%g): %+v", b.Lo, b.Hi, c)
			}
		case c.Depth != 0 || len(c.Tried) > 0: // no requests there: no reuse
			t.Errorf("bin [%g,%g) without requests: %+v", b.Lo, b.Hi, c)
		}
	}
	if filled == 0 || !whole.CalibratedFor("store") || !whole.CalibratedFor("request") {
		t.Fatalf("no calibrated bins: %s", whole)
	}

	// Interrupted after its first bin and source, then resumed.
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	c := testCalibrator(m, dir)
	c.Progress = func(done, _ int) {
		if done == 1 {
			cancel()
		}
	}
	if _, err := c.Calibrate(ctx, reqs); !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted run: %v", err)
	}
	if _, err := testCalibrator(m, dir).Calibrate(context.Background(), reqs); err == nil {
		t.Error("a second run into the same directory without --resume: no error")
	}
	r := testCalibrator(m, dir)
	r.Resume = true
	resumed, err := r.Calibrate(context.Background(), reqs)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(resumed.Bins, whole.Bins) {
		t.Errorf("resumed bins %+v\nuninterrupted %+v", resumed.Bins, whole.Bins)
	}

	// Three shards, each exhaustive, merged.
	var dirs []string
	for k := 0; k < 3; k++ {
		var part []Request // every third request, as datasets.ShardRequests deals them
		for i := k; i < len(reqs); i += 3 {
			part = append(part, reqs[i])
		}
		d := t.TempDir()
		s := testCalibrator(m, d)
		s.Exhaustive = true
		if _, err := s.Calibrate(context.Background(), part); err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, d)
	}
	merged, err := testCalibrator(m, t.TempDir()).Merge(dirs, reqs)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(merged.Bins, whole.Bins) {
		t.Errorf("merged bins %+v\none run %+v", merged.Bins, whole.Bins)
	}
	if _, err := testCalibrator(m, t.TempDir()).Merge(dirs[:2], reqs); err == nil {
		t.Error("merging without a shard: no error")
	}
}

// TestCalibrationRunSame: a calibration resumed or merged with settings
// that change its outcomes is refused with the setting named.
func TestCalibrationRunSame(t *testing.T) {
	base := CalibrationRun{Regime: regime.Regime{GenLength: 16, Steps: 8, BlockLength: 8}, Refresh: 4, Sources: []string{"request"},
		Edges: []float64{0, 0.5, 1}, Seed: 1, Data: []string{"a.jsonl"}}
	for _, tc := range []struct {
		change func(*CalibrationRun)
		want   string
	}{
		{func(r *CalibrationRun) { r.Steps = 16 }, "regime"},
		{func(r *CalibrationRun) { r.Sources = []string{"request", "store"} }, "sources"},
		{func(r *CalibrationRun) { r.Edges = []float64{0, 1} }, "ratio bins"},
		{func(r *CalibrationRun) { r.Seed = 2 }, "seed 1 vs 2"},
		{func(r *CalibrationRun) { r.Data = []string{"b.jsonl"} }, "data"},
	} {
		b := base
		b.Sources, b.Edges, b.Data = slices.Clone(base.Sources), slices.Clone(base.Edges), slices.Clone(base.Data)
		tc.change(&b)
		if err := base.same(b); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error naming %q", b, err, tc.want)
		}
	}
	if err := base.same(base); err != nil {
		t.Errorf("same settings: %v", err)
	}
}
