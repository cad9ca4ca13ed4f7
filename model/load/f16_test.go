package load

import (
	"path/filepath"
	"testing"

	"github.com/dlmcache/dlmcache/internal/testutil"
	"github.com/dlmcache/dlmcache/model"
	"github.com/dlmcache/dlmcache/model/cpu"
	"github.com/dlmcache/dlmcache/model/gguf"
	"github.com/dlmcache/dlmcache/model/safetensors"
)

// TestF16Weights loads F16 GGUF files twice, their F16 weights kept (in the
// memory map, converted panel by panel in each product) and widened at
// load (cpu.F16Widen): the same values, so the logits agree to
// float rounding (1e-5 of the largest logit: a panel of rows is a product
// of its own, and with oneDNN the widened weights' products run on it,
// the kept ones' on OpenBLAS). The bundled model's weights all run on
// the panel kernel where the CPU has AVX2 (laid out at load, the same
// products); a random shape with a 640-wide MLP puts ffn_down on the
// converted panels. Where oneDNN has AVX512-BF16 kernels the weights
// rounded to BF16 at load (cpu.F16AsBF16, what NewFromEnv picks there)
// are held to the widened ones' logits within 1% of the largest: BF16
// keeps 7 of the halves' 10 fraction bits, and the activations are
// rounded to BF16 too (measured: 0.2–0.6%).
func TestF16Weights(t *testing.T) {
	tmp := t.TempDir()
	wide := filepath.Join(tmp, "wide")
	c := model.Config{DModel: 64, NLayers: 2, NHeads: 4, NKVHeads: 4, MLPHiddenSize: 640, VocabSize: 300, RopeTheta: 10000, RMSNormEps: 1e-5}
	if err := WriteRandom(wide, c, 5, safetensors.F32); err != nil {
		t.Fatal(err)
	}
	for _, src := range []string{bundledDir, wide} {
		p := filepath.Join(tmp, filepath.Base(src)+"-f16.gguf")
		if _, err := ToGGUF(src, p, gguf.F16); err != nil {
			t.Fatal(err)
		}
		for _, lib := range []cpu.GEMMLib{cpu.GEMMOpenBLAS, cpu.GEMMOneDNN} {
			if _, err := cpu.NewChecked(cpu.Options{Threads: 2, GEMM: lib}); err != nil {
				t.Logf("%s not tested: %v", lib, err)
				continue
			}
			t.Run(filepath.Base(src)+"/"+string(lib), func(t *testing.T) {
				load := func(o cpu.Options) *Model {
					o.Threads, o.GEMM = 2, lib
					m, err := Load(p, cpu.NewWithOptions(o))
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { m.Close() })
					return m
				}
				kept, widened := load(cpu.Options{}), load(cpu.Options{F16: cpu.F16Widen})
				if d := kept.Blocks[0].Down.(*cpu.Tensor); !d.F16() {
					t.Fatalf("kept: ffn_down is %v, want an F16 weight", d)
				}
				if d := widened.Blocks[0].Down.(*cpu.Tensor); d.F16() {
					t.Fatal("F16Widen: ffn_down is F16, want float32")
				}
				ids := testIDs(t, kept)
				lk, lw := ggufLogits(t, kept, ids), ggufLogits(t, widened, ids)
				if e := testutil.RelErr(lk, lw); e > 1e-5 {
					t.Errorf("kept vs widened F16 logits: relative error %.2g, want ≤ 1e-5", e)
				} else {
					t.Logf("kept vs widened F16 logits: relative error %.2g", e)
				}
				if _, err := cpu.NewChecked(cpu.Options{Threads: 2, GEMM: lib, F16: cpu.F16AsBF16}); err != nil {
					return
				}
				// ffn_down is rounded where it is too wide for the panel
				// kernel (the 640-wide MLP), else kept F16 and laid out.
				rounded := load(cpu.Options{F16: cpu.F16AsBF16})
				if d := rounded.Blocks[0].Down.(*cpu.Tensor); d.BF16() != (d.Cols() > 512) {
					t.Fatalf("F16AsBF16: ffn_down is %v", d)
				}
				if e := testutil.RelErr(ggufLogits(t, rounded, ids), lw); e > 1e-2 {
					t.Errorf("F16 rounded to BF16 vs widened logits: relative error %.2g, want ≤ 1e-2", e)
				} else {
					t.Logf("F16 rounded to BF16 vs widened logits: relative error %.2g", e)
				}
			})
		}
	}
}
