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
}
