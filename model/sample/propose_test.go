package sample

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestProposeGreedy: at temperature 0 the one-pass argmax gives the same
// token and the same confidence bits as the general loop, on random
// logits, ties (the first wins), NaNs (never chosen), ±Inf and rows of
// −Inf alone.
func TestProposeGreedy(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	inf, nan := float32(math.Inf(1)), float32(math.NaN())
	rows := [][]float32{{1, 3, 3, 2}, {nan, 1, nan, 0.5}, {-inf, -inf, -inf}, {-inf, 2, -inf}, {nan, nan}, {0, inf, 1}, {-3}}
	for range 200 {
		l := make([]float32, 1+rng.IntN(3000))
		for i := range l {
			l[i] = float32(rng.NormFloat64() * 4)
		}
		rows = append(rows, l)
	}
	same := func(a, b float64) bool { return a == b || math.IsNaN(a) && math.IsNaN(b) }
	for _, l := range rows {
		gt, gc := propose(l, 0, nil)
		wt, wc := proposeAny(l, 0, nil)
		if gt != wt || !same(gc, wc) {
			t.Fatalf("%d logits %v…: propose (%d, %v), the general loop (%d, %v)", len(l), l[:min(4, len(l))], gt, gc, wt, wc)
		}
	}
}
