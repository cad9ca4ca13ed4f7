package main

import (
	"math"
	"testing"
)

// The verify gate's paired interval: no changed correctness is [0, 0]; a
// table losing 3 points on 300 requests (9 lost, none gained) has its
// 95% interval's lower end below −1 point, so it fails; one losing 1 of
// 300 and gaining 1 is centred on 0 and passes.
func TestPairedDiffGate(t *testing.T) {
	z := normalQuantile(0.975)
	same := make([]float64, 300)
	if d := pairedDiff(same, z); d != (interval{}) {
		t.Errorf("identical answers: %+v", d)
	}
	lose := make([]float64, 300)
	for i := range 9 {
		lose[i*30] = -1
	}
	d := pairedDiff(lose, z)
	if math.Abs(d.Mean+3) > 1e-9 || d.Low >= -1 || d.High <= d.Mean {
		t.Errorf("3 points lost: %+v, want mean −3 and a lower end below −1", d)
	}
	even := make([]float64, 300)
	even[10], even[200] = -1, 1
	if d := pairedDiff(even, z); d.Mean != 0 || d.Low < -1 || d.High > 1 {
		t.Errorf("one lost, one gained: %+v, want an interval inside ±1 point", d)
	}
	if d := pairedDiff(nil, z); d != (interval{}) {
		t.Errorf("no requests: %+v", d)
	}
	// The gates: 3 points lost fails both; changes that cancel, or a
	// single answer lost, on make run's 243 requests pass --gate loss but
	// not the lower-end gate, which 1,000 such requests pass; 8 answers
	// lost of 1,000 (0.8 points, within --max-loss) fail both, as worse
	// than none beyond the noise.
	at := func(n int, lost, gained int) []float64 {
		d := make([]float64, n)
		for i := range lost {
			d[i] = -1
		}
		for i := range gained {
			d[n-1-i] = 1
		}
		return d
	}
	for _, tc := range []struct {
		name            string
		n, lost, gained int
		strict, loss    bool // pass under --gate accuracy, --gate loss
	}{
		{"identical", 300, 0, 0, true, true},
		{"3 points lost", 300, 9, 0, false, false},
		{"one lost, one gained of 243", 243, 1, 1, false, true},
		{"one lost, one gained of 1,000", 1000, 1, 1, true, true},
		{"one lost of 243", 243, 1, 0, false, true},
		{"two lost of 243", 243, 2, 0, false, true},
		{"three lost of 243 (1.2 points)", 243, 3, 0, false, false},
		{"8 lost of 1,000", 1000, 8, 0, false, false},
		{"8 lost, 4 gained of 1,000", 1000, 8, 4, false, true},
		{"2 lost, 1 gained of 1,000", 1000, 2, 1, true, true},
	} {
		d := pairedDiff(at(tc.n, tc.lost, tc.gained), z)
		if why := accuracyGate(d, 1, true); (why == "") != tc.strict {
			t.Errorf("%s, --gate accuracy: %+v: verdict %q, want pass %v", tc.name, d, why, tc.strict)
		}
		if why := accuracyGate(d, 1, false); (why == "") != tc.loss {
			t.Errorf("%s, --gate loss: %+v: verdict %q, want pass %v", tc.name, d, why, tc.loss)
		}
	}
}
