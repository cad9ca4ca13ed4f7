package sample

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/dlmcache/dlmcache/model"
	"github.com/dlmcache/dlmcache/regime"
)

// TestARCacheMatchesRecompute: autoregressive decoding with the exact
// K/V cache (one row per layer per token after the prompt) gives the
// tokens of recomputing every row each token, greedy and sampled, at the
// default position ids and at shifted ones, and computes L rows per token.
func TestARCacheMatchesRecompute(t *testing.T) {
	for _, fx := range causalFixtures {
		m, g, _ := loadFixture(t, fx)
		L := len(m.Blocks)
		for _, gc := range g.Generate {
			for _, tc := range []struct {
				name string
				o    GenOptions
			}{
				{"greedy", GenOptions{Regime: regime.Regime{GenLength: 24}}},
				{"sampled", GenOptions{Regime: regime.Regime{GenLength: 24}, Temperature: 1, Seed: 7}},
				{"positions", GenOptions{Regime: regime.Regime{GenLength: 24}, Positions: shifted(len(gc.PromptIDs), 40)}},
			} {
				name := fmt.Sprintf("%s/%s/%s", fx, gc.Name, tc.name)
				cached, err := (&sampler{Network: m.Network}).generateAR(context.Background(), gc.PromptIDs, tc.o, nil, true)
				if err != nil {
					t.Fatal(err)
				}
				full, err := (&sampler{Network: m.Network}).generateAR(context.Background(), gc.PromptIDs, tc.o, nil, false)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(cached.Answer, full.Answer) {
					t.Errorf("%s: cached answer %v\nrecomputed      %v", name, cached.Answer, full.Answer)
				}
				p, d := len(gc.PromptIDs), cached.Decoded
				if want := L * (p + d - 1); cached.RowsComputed != want {
					t.Errorf("%s: cached decoding computed %d rows, want %d (the prompt, then one row a layer per token)", name, cached.RowsComputed, want)
				}
				if cached.RowsFull != full.RowsComputed || cached.NFE != d || full.NFE != d || cached.FLOPs >= full.FLOPs {
					t.Errorf("%s: rows full %d vs recomputed %d, NFE %d/%d for %d tokens, FLOPs %g vs %g",
						name, cached.RowsFull, full.RowsComputed, cached.NFE, full.NFE, d, cached.FLOPs, full.FLOPs)
				}
				if tc.name == "greedy" && gc.GenLength <= tc.o.GenLength && !slices.Equal(cached.Answer[:gc.GenLength], gc.AnswerIDs) {
					t.Errorf("%s: answer %v, reference %v", name, cached.Answer[:gc.GenLength], gc.AnswerIDs)
				}
			}
		}
	}
}

// shifted is n ascending position ids from first.
func shifted(n, first int) []int32 {
	p := make([]int32, n)
	for i := range p {
		p[i] = int32(first + i)
	}
	return p
}

// TestAREOS: decoding stops after the EOS token, the rest of the answer
// EOS, with one step and one block per token; the batched forward (a
// server's GenOptions.Forward) gives the same answer; diffusion-only
// options are refused.
func TestAREOS(t *testing.T) {
	m, g, _ := loadFixture(t, "tiny-llama")
	gc := g.Generate[0]
	cfg := *m.Config
	cfg.EOSTokenID = int(gc.AnswerIDs[3])
	m.Config = &cfg
	var blocks []int
	var steps [][]int32
	o := GenOptions{Regime: regime.Regime{GenLength: 12},
		OnBlock: func(_, end int, _ []int32) { blocks = append(blocks, end) },
		OnStep:  func(_ *Step, c []int32) { steps = append(steps, c) },
		Forward: func(in model.Input, p model.Plan) (*model.Output, error) {
			outs, err := m.ForwardBatch([]model.Input{in, in}, []model.Plan{p, nil})
			if err != nil {
				return nil, err
			}
			return outs[0], nil
		}}
	res, err := Generate(context.Background(), m.Network, gc.PromptIDs, 0, o, nil)
	if err != nil {
		t.Fatal(err)
	}
	eos := int32(cfg.EOSTokenID)
	want := append(slices.Clone(gc.AnswerIDs[:4]), slices.Repeat([]int32{eos}, 8)...)
	if !slices.Equal(res.Answer, want) || res.Decoded != 4 || res.Steps != 4 || res.NFE != 4 {
		t.Errorf("answer %v (decoded %d, %d steps, NFE %d), want %v after 4", res.Answer, res.Decoded, res.Steps, res.NFE, want)
	}
	p := len(gc.PromptIDs)
	if !slices.Equal(blocks, []int{p + 1, p + 2, p + 3, p + 4}) || len(steps) != 4 || steps[3][0] != int32(p+3) {
		t.Errorf("blocks end at %v, steps commit %v", blocks, steps)
	}
	for _, tc := range []struct {
		o    GenOptions
		want string
	}{
		{GenOptions{Regime: regime.Regime{GenLength: 4}, Decoder: Threshold{T: 0.9}}, "threshold:0.9"},
		{GenOptions{Regime: regime.Regime{GenLength: 4}, CFGScale: 1}, "guidance"},
		{GenOptions{}, "gen length"},
	} {
		if _, err := Generate(context.Background(), m.Network, gc.PromptIDs, 0, tc.o, nil); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want one naming %q", tc.o, err, tc.want)
		}
	}
}

var causalFixtures = []string{"tiny-qwen2", "tiny-llama"}
