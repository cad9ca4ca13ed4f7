package sample

import (
	"context"
	"path/filepath"
	"slices"
	"testing"

	"github.com/dlmcache/dlmcache/model"
	"github.com/dlmcache/dlmcache/model/load"
	"github.com/dlmcache/dlmcache/regime"

	"github.com/dlmcache/dlmcache/internal/testckpt"
	"github.com/dlmcache/dlmcache/internal/testutil"
	"github.com/dlmcache/dlmcache/model/cpu"
)

// TestBF16Weights loads a BF16 copy of the bundled model twice, with its
// BF16 weights kept (converted panel by panel in each product) and
// converted at load: the two hold the same values, so their logits agree to
// float rounding and their greedy answers to the demo requests are the
// same. Against the original F32 model the logits differ by what rounding
// the weights to BF16 makes of them.
//
// On oneDNN with AVX512-BF16 the kept weights go through its BF16 matmul,
// which rounds the activations to BF16 as well: kept and converted then
// differ by that rounding (0.11–0.13% of the largest logit when this was
// written), and the answers must still be the same.
func TestBF16Weights(t *testing.T) {
	src := filepath.Join("..", "..", "models", "llada-tiny")
	bf := testckpt.WriteBF16Copy(t, src)
	for _, lib := range []cpu.GEMMLib{cpu.GEMMOpenBLAS, cpu.GEMMOneDNN} {
		if _, err := cpu.NewChecked(cpu.Options{Threads: 2, GEMM: lib}); err != nil {
			t.Logf("%s not tested: %v", lib, err)
			continue
		}
		t.Run(string(lib), func(t *testing.T) { testBF16Weights(t, src, bf, lib) })
	}
}

func testBF16Weights(t *testing.T, src, bf string, lib cpu.GEMMLib) {
	open := func(dir string, o cpu.Options) *load.Model {
		o.GEMM = lib
		m, err := load.Load(dir, cpu.NewWithOptions(o))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		return m
	}
	f32 := open(src, cpu.Options{Threads: 2})
	kept := open(bf, cpu.Options{Threads: 2})
	conv := open(bf, cpu.Options{Threads: 2, DecodeBF16: true})
	if q, ok := kept.Blocks[0].Q.(*cpu.Tensor); !ok || !q.BF16() {
		t.Fatalf("kept: q_proj is %v, want a BF16 weight", kept.Blocks[0].Q)
	}
	if q := conv.Blocks[0].Q.(*cpu.Tensor); q.BF16() {
		t.Fatal("DecodeBF16: q_proj is BF16, want float32")
	}
	same := 1e-5 // kept vs converted
	if kept.Backend.(*cpu.Backend).BF16Activations() {
		same = 0.01
	}

	card := kept.Card
	var last model.Input
	var lastLogits []float32
	questions := []string{card.DemoPrompt, "What is the code for deli?", "What is the code for archiv?"}
	for _, q := range questions {
		ids, prefix, err := kept.Tokenizer.EncodeChat(card.DemoSystem, q)
		if err != nil {
			t.Fatal(err)
		}
		// One full forward of the prompt and 32 masked slots, logits of
		// the last 32 rows.
		toks := append(slices.Clone(ids), slices.Repeat([]int32{int32(kept.Config.MaskTokenID)}, 32)...)
		lr := make([]int32, 32)
		for i := range lr {
			lr[i] = int32(len(toks) - 32 + i)
		}
		in := model.Input{Tokens: toks, LogitRows: lr}
		logits := func(m *load.Model) []float32 {
			out, err := m.Forward(in, nil)
			if err != nil {
				t.Fatal(err)
			}
			return out.Logits
		}
		lk, lc, lf := logits(kept), logits(conv), logits(f32)
		last, lastLogits = in, lk
		if e := testutil.RelErr(lk, lc); e > same {
			t.Errorf("%q: kept vs converted BF16 logits: relative error %.2g, want ≤ %g", q, e, same)
		} else {
			t.Logf("%q: kept vs converted BF16 logits: relative error %.2g", q, e)
		}
		// BF16 keeps 8 bits of mantissa: each weight moves by up to 2⁻⁹
		// (0.2%) of itself; through the 8 layers the logits moved by
		// 0.13–0.18% of the largest one when this test was written.
		if e := testutil.RelErr(lk, lf); e > 0.01 {
			t.Errorf("%q: BF16 vs F32 logits: relative error %.3g, want ≤ 0.01", q, e)
		} else {
			t.Logf("%q: BF16 vs F32 logits: relative error %.3g (max |Δ| ÷ max |logit|)", q, e)
		}

		// The answers are a few tokens: 32 slots in 16 steps hold them.
		o := GenOptions{Regime: regime.Regime{GenLength: 32, Steps: 16, BlockLength: card.BlockLength}}
		gen := func(m *load.Model) []int32 {
			g, err := Generate(context.Background(), m.Network, ids, prefix, o, nil)
			if err != nil {
				t.Fatal(err)
			}
			return g.Canvas
		}
		a, b := gen(kept), gen(conv)
		if !slices.Equal(a, b) {
			t.Errorf("%q: kept and converted BF16 answers differ:\n%q\n%q", q, kept.Tokenizer.DecodeSkipSpecial(a[len(ids):]), conv.Tokenizer.DecodeSkipSpecial(b[len(ids):]))
		}
		t.Logf("%q: BF16 answer %q, F32 answer %q", q, kept.Tokenizer.DecodeSkipSpecial(a[len(ids):]), f32.Tokenizer.DecodeSkipSpecial(gen(f32)[len(ids):]))
	}

	// Fuse concatenates BF16 weights into float32 ones: the same values.
	if !kept.Fuse() {
		t.Fatal("Fuse: false on the CPU backend")
	}
	out, err := kept.Forward(last, nil)
	if err != nil {
		t.Fatal(err)
	}
	if e := testutil.RelErr(out.Logits, lastLogits); e > same {
		t.Errorf("fused BF16 logits: relative error %.2g, want ≤ %g", e, same)
	}
}
