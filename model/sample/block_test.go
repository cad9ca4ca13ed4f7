package sample

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/dlmcache/dlmcache/model"
	"github.com/dlmcache/dlmcache/model/cpu"
	"github.com/dlmcache/dlmcache/regime"
)

// TestBlockCausalBadInput: decreasing position ids are refused on a
// block-causal model (its blocks' keys must be a prefix of the rows), and
// a config without a block size is refused naming the field.
func TestBlockCausalBadInput(t *testing.T) {
	m, g, _ := loadFixture(t, "tiny-f32")
	bc := blockCausal(m.Network, 8, false)
	if _, err := bc.Forward(model.Input{Tokens: g.InputIDs[:3], Positions: []int32{0, 2, 1}}, nil); err == nil {
		t.Error("decreasing position ids: no error")
	}
	for _, tc := range []struct{ cfg, want string }{
		{`"block_causal": true`, "block_size"},
		{`"block_causal": true, "block_size": 0`, "block_size"},
		{`"block_size": -1`, "block_size"},
	} {
		raw := `{"d_model": 8, "n_layers": 1, "n_heads": 2, "mlp_hidden_size": 8, "vocab_size": 10, ` + tc.cfg + `}`
		if _, err := model.ParseConfig([]byte(raw)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one naming %s", tc.cfg, err, tc.want)
		}
	}
	c, err := model.ParseConfig([]byte(`{"d_model": 8, "n_layers": 1, "n_heads": 2, "mlp_hidden_size": 8, "vocab_size": 10, "block_causal": true, "block_size": 4, "shift_logits": true}`))
	if err != nil || c.CausalBlock() != 4 || !c.ShiftLogits {
		t.Errorf("block-causal config: %+v, %v", c, err)
	}
}

// TestBlockGenerateGolden: block decoding of the tiny-block checkpoint
// (LLaDA 2.x threshold decoding; the fixed low-confidence schedule, SDAR's
// static remasking) commits what the PyTorch reference commits, step by
// step: each step feeds the canvas up to its block's end, blocks are
// absolute (the first answer block holds the prompt's tail), and the
// answers, NFE and traces agree.
func TestBlockGenerateGolden(t *testing.T) {
	be := cpu.NewWithOptions(cpu.Options{Threads: 2, GEMM: cpu.GEMMOpenBLAS})
	m, g, _ := loadBlockGolden(t, be)
	B := m.Config.CausalBlock()
	for _, gc := range g.Generate {
		t.Run(gc.Name, func(t *testing.T) {
			o := GenOptions{Regime: regime.Regime{GenLength: gc.GenLength, BlockLength: gc.BlockLength}}
			switch gc.Decoding {
			case "threshold":
				o.Decoder = Threshold{T: *gc.Threshold}
			case "schedule":
				o.Steps = *gc.Steps
				o.Decoder = LowConfidence{}
			default:
				t.Fatalf("decoding %q", gc.Decoding)
			}
			type rec struct {
				block, n  int
				committed []int32
			}
			var trace []rec
			o.OnStep = func(s *Step, c []int32) {
				trace = append(trace, rec{s.BlockStart / B, s.Len, c})
			}
			res, err := Generate(context.Background(), m.Network, gc.PromptIDs, 0, o, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(res.Answer, gc.AnswerIDs) {
				t.Errorf("answer %v\nwant   %v", res.Answer, gc.AnswerIDs)
			}
			if res.NFE != gc.NFE || len(trace) != len(gc.Trace) {
				t.Fatalf("NFE %d, %d steps; want %d, %d", res.NFE, len(trace), gc.NFE, len(gc.Trace))
			}
			for i, w := range gc.Trace {
				got := trace[i]
				if got.block != w.Block || got.n != w.N || !slices.Equal(got.committed, w.Committed) {
					t.Errorf("step %d: block %d fed %d committed %v; want block %d fed %d committed %v",
						i, got.block, got.n, got.committed, w.Block, w.N, w.Committed)
				}
			}
		})
	}
}

// TestBlockSchedule: a block-causal model's blocks are absolute in
// position ids: the first answer block ends at the prompt's block
// boundary, the last is cut by the canvas end, and a prompt whose
// position ids jump moves the boundaries with them.
func TestBlockSchedule(t *testing.T) {
	for _, tc := range []struct {
		name             string
		prompt, first, G int
		want             [][2]int
	}{
		{"prompt ends mid-block", 21, 21, 24, [][2]int{{21, 24}, {24, 32}, {32, 40}, {40, 45}}},
		{"prompt ends at a boundary", 16, 16, 16, [][2]int{{16, 24}, {24, 32}}},
		{"positions jump to 100", 21, 100, 8, [][2]int{{21, 25}, {25, 29}}},
	} {
		s, err := causalSchedule(tc.prompt, tc.first, 8, GenOptions{Regime: regime.Regime{GenLength: tc.G}})
		if err != nil {
			t.Fatal(err)
		}
		var got [][2]int
		for b := range s.Blocks() {
			lo, hi := s.Block(b)
			got = append(got, [2]int{lo, hi})
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: blocks %v, want %v", tc.name, got, tc.want)
		}
		if s.StepsPerBlock() != 8 {
			t.Errorf("%s: %d steps per block by default, want the block size", tc.name, s.StepsPerBlock())
		}
	}
	for _, o := range []GenOptions{
		{Regime: regime.Regime{GenLength: 16, BlockLength: 4}},
		{Regime: regime.Regime{GenLength: 16, Steps: 3}},
		{Regime: regime.Regime{GenLength: 16, Steps: 64}},
		{Regime: regime.Regime{GenLength: 0}},
	} {
		if _, err := causalSchedule(5, 5, 8, o); err == nil {
			t.Errorf("%+v: no error", o)
		}
	}
}

// TestBlockGenerateStepsAndEOS: on a block-causal model every forward is
// fed the canvas up to its block's end (Step.Len), threshold decoding
// takes at most the steps per block (Steps as a cap: at least the
// schedule's count), and generation stops after the block that completes
// an EOS run to the canvas end, the rest EOS, NFE and Decoded counting
// only what ran; OnBlock reports each block's end.
func TestBlockGenerateStepsAndEOS(t *testing.T) {
	be := cpu.NewWithOptions(cpu.Options{Threads: 2, GEMM: cpu.GEMMOpenBLAS})
	m, g, _ := loadBlockGolden(t, be)
	gc := g.Generate[1]
	P, B := len(gc.PromptIDs), m.Config.CausalBlock()
	eos := int32(m.Config.EOSTokenID)
	e := m.Config.Embeddings()
	// From eosFrom on, the model is made to propose EOS everywhere.
	eosFrom := (P/B + 2) * B
	var fed []int
	o := BlockDefaults(m.Config, GenOptions{Regime: regime.Regime{GenLength: 6 * B, Steps: 12}})
	if o.BlockLength != B || o.Decoder != (Threshold{T: DefaultBlockThreshold}) {
		t.Fatalf("defaults: block length %d, decoder %v", o.BlockLength, o.Decoder)
	}
	o.Decoder = Threshold{T: 2} // nothing is that sure: the schedule's count
	o.Forward = func(in model.Input, plan model.Plan) (*model.Output, error) {
		fed = append(fed, len(in.Tokens))
		out, err := m.Forward(in, plan)
		if err != nil {
			return nil, err
		}
		for i, p := range in.LogitRows {
			if int(p) >= eosFrom {
				out.Logits[i*e+int(eos)] = 1e4
			}
		}
		return out, nil
	}
	var blocks [][2]int
	var lens []int
	o.OnStep = func(s *Step, _ []int32) { lens = append(lens, s.Len) }
	o.OnBlock = func(b, end int, canvas []int32) { blocks = append(blocks, [2]int{b, end}) }
	res, err := Generate(context.Background(), m.Network, gc.PromptIDs, 0, o, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(fed, lens) {
		t.Errorf("forwards fed %v tokens, steps say %v", fed, lens)
	}
	spb := 12 * B / (6 * B)
	// Blocks: the prompt's tail block, the next, then the first EOS block
	// ends the generation.
	wantBlocks := [][2]int{{0, (P/B + 1) * B}, {1, (P/B + 2) * B}, {2, (P/B + 3) * B}}
	if !slices.Equal(blocks, wantBlocks) {
		t.Errorf("blocks %v, want %v", blocks, wantBlocks)
	}
	if res.NFE != len(blocks)*spb || res.Steps != res.NFE {
		t.Errorf("NFE %d, steps %d; want %d (%d steps a block)", res.NFE, res.Steps, len(blocks)*spb, spb)
	}
	for i, n := range fed {
		if want := wantBlocks[i/spb][1]; n != want {
			t.Errorf("forward %d fed %d tokens, want %d", i, n, want)
		}
	}
	if res.Decoded != eosFrom+B-P {
		t.Errorf("decoded %d slots, want %d", res.Decoded, eosFrom+B-P)
	}
	for i, tok := range res.Canvas[eosFrom:] {
		if tok != eos {
			t.Fatalf("slot %d after the EOS block is %d, not EOS", eosFrom+i, tok)
		}
	}
	for i, tok := range res.Canvas[P:eosFrom] {
		if tok == eos || tok == int32(m.Config.MaskTokenID) {
			t.Fatalf("slot %d before the EOS block is %d", P+i, tok)
		}
	}
}
