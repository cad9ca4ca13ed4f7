package sample

import (
	"context"
	"slices"
	"testing"

	"github.com/dlmcache/dlmcache/model/cpu"
	"github.com/dlmcache/dlmcache/regime"
)

// testArchBlockGenerate checks a block-causal fixture's block decodings
// (golden.json's block_generate) step by step against the reference's.
func testArchBlockGenerate(t *testing.T, fx string, be *cpu.Backend) {
	m, g, _ := loadGolden[struct {
		Block []blockGeneration `json:"block_generate"`
	}](t, fx, be)
	for _, gc := range g.Block {
		o := GenOptions{Regime: regime.Regime{GenLength: gc.GenLength}, Decoder: LowConfidence{}}
		if gc.Decoding == "threshold" {
			o.Decoder = Threshold{T: *gc.Threshold}
		} else {
			o.Steps = *gc.Steps
		}
		o = BlockDefaults(m.Config, o)
		var steps [][]int32
		o.OnStep = func(_ *Step, c []int32) { steps = append(steps, c) }
		res, err := Generate(context.Background(), m.Network, gc.PromptIDs, 0, o, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(res.Answer, gc.AnswerIDs) || len(steps) != len(gc.Trace) {
			t.Errorf("%s: answer %v in %d steps\nwant   %v in %d", gc.Name, res.Answer, len(steps), gc.AnswerIDs, len(gc.Trace))
			continue
		}
		for i, w := range gc.Trace {
			if !slices.Equal(steps[i], w.Committed) {
				t.Errorf("%s: step %d committed %v, want %v", gc.Name, i, steps[i], w.Committed)
			}
		}
	}
}
