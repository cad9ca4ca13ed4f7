package sample

import (
	"math"
	"testing"
)

// The certainty density: 1 where everything around is decoded, falling
// with the distance from the prompt when nothing is; the certainty-prior
// decoder prefers, at equal confidence, the slot next to decoded tokens.
func TestCertaintyPrior(t *testing.T) {
	all := CertaintyDensity([]bool{true, true, true, true}, 2)
	for i, v := range all {
		if math.Abs(v-1) > 1e-12 {
			t.Errorf("all decoded: density[%d] = %g", i, v)
		}
	}
	none := CertaintyDensity(make([]bool, 12), 2)
	for i := 1; i < len(none); i++ {
		if none[i] > none[i-1] || i <= 6 && !(none[i] < none[i-1]) || i > 6 && none[i] != 0 {
			t.Errorf("nothing decoded: density should fall to 0 at 3σ from the prompt: %v", none)
			break
		}
	}
	const mask = 9
	// prompt 2 tokens, answer of 8: slot 5 (canvas 7) sits between decoded
	// neighbours, slot 1 (canvas 3) next to masks.
	canvas := []int32{1, 1, mask, mask, mask, mask, 4, mask, 4, 4}
	c := &Candidates{Pos: []int32{3, 7}, Tok: []int32{5, 5}, Conf: []float64{0.5, 0.5}, Canvas: canvas, PromptLen: 2, Mask: mask}
	if got := (CertaintyPrior{Sigma: 2}).Choose(c, 1, nil); len(got) != 1 || got[0] != 1 {
		t.Errorf("certainty prior chose %v, want [1] (the slot among decoded tokens)", got)
	}
}
