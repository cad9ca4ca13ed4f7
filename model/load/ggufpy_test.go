package load

import (
	"math"
	"path/filepath"
	"slices"
	"testing"

	"github.com/dlmcache/dlmcache/internal/testutil"
	"github.com/dlmcache/dlmcache/model/cpu"
	"github.com/dlmcache/dlmcache/model/safetensors"
	"github.com/dlmcache/dlmcache/model/tokenizer"
)

// TestGGUFPyFixtureLogits loads the GGUF that llama.cpp's gguf-py wrote
// (model/testdata/ggufpy, tools/ggufpy/make_fixture.py: mixed Q8_0, F16,
// BF16 and F32 tensors, GQA, q/k permuted as llama.cpp's converter does)
// and compares its logits with a float64 PyTorch forward over the same
// dequantized weights. It also checks the tokenizer built from the file's
// metadata against the bundled model's tokenizer.json, which the fixture's
// vocabulary was made from.
func TestGGUFPyFixtureLogits(t *testing.T) {
	dir := filepath.Join(testdata, "ggufpy")
	var g struct {
		File string  `json:"file"`
		IDs  []int32 `json:"ids"`
	}
	testutil.ReadJSON(t, filepath.Join(dir, "golden.json"), &g)
	// Float32 activations (cpu.QuantF32, and the BF16 tensors as float32
	// panels on OpenBLAS): the products are exact in the dequantized
	// weights, so the reference holds to float32 rounding.
	m, err := Load(filepath.Join(dir, g.File), cpu.NewWithOptions(cpu.Options{Threads: 1, QuantProducts: cpu.QuantF32, GEMM: cpu.GEMMOpenBLAS}))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if c := m.Config; c.NHeads != 4 || c.NKVHeads != 2 || c.NLayers != 2 || c.WeightTying {
		t.Fatalf("config %+v", *c)
	}
	gs, err := safetensors.OpenFile(filepath.Join(dir, "golden.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer gs.Close()
	lt, err := gs.Tensor("logits")
	if err != nil {
		t.Fatal(err)
	}
	want := lt.Float32(nil)
	got := ggufLogits(t, m, g.IDs)
	if len(got) != len(want) {
		t.Fatalf("%d logits, want %d", len(got), len(want))
	}
	var scale float64
	for _, v := range want {
		scale = max(scale, math.Abs(float64(v)))
	}
	if d := maxAbsDiff(got, want) / scale; d > 1e-4 {
		t.Errorf("logits differ from the PyTorch reference by %.3g (relative to max |logit|)", d)
	} else {
		t.Logf("max |Δlogit| / max |logit| = %.3g", d)
	}
	// With activations quantized per row (cpu.QuantInt8, the default) the
	// Q8_0 products round x per block of 32: on these random weights the
	// logits move by 5.6e-2 of the largest (4.4e-3 on the trained bundled
	// model, TestGGUFQuantKeptQuantized); held under twice that.
	mi, err := Load(filepath.Join(dir, g.File), cpu.NewWithOptions(cpu.Options{Threads: 1, QuantProducts: cpu.QuantInt8, GEMM: cpu.GEMMOpenBLAS}))
	if err != nil {
		t.Fatal(err)
	}
	defer mi.Close()
	if d := maxAbsDiff(ggufLogits(t, mi, g.IDs), want) / scale; d > 0.11 {
		t.Errorf("int8 products: logits differ from the PyTorch reference by %.3g (relative to max |logit|)", d)
	} else {
		t.Logf("int8 products: max |Δlogit| / max |logit| = %.3g", d)
	}
	// BF16 tensors on oneDNN's BF16 matmul (where the CPU has AVX512-BF16:
	// the default there), activations rounded to BF16 (2⁻⁹ relative per
	// element): on these random weights the logits move by 7.5e-3 of the
	// largest (0.1% on the trained bundled model, TestBF16Weights); held
	// under 2e-2, about 2.5 times that.
	bb, err := cpu.NewChecked(cpu.Options{Threads: 1, QuantProducts: cpu.QuantF32})
	if err != nil {
		t.Fatal(err)
	}
	if !bb.BF16Activations() {
		t.Logf("SKIPPED: BF16 products with BF16-rounded activations: %s", bb.GEMM())
	} else {
		mb, err := Load(filepath.Join(dir, g.File), bb)
		if err != nil {
			t.Fatal(err)
		}
		defer mb.Close()
		if d := maxAbsDiff(ggufLogits(t, mb, g.IDs), want) / scale; d > 2e-2 {
			t.Errorf("BF16 products, BF16 activations: logits differ from the PyTorch reference by %.3g (relative to max |logit|)", d)
		} else {
			t.Logf("BF16 products, BF16 activations: max |Δlogit| / max |logit| = %.3g", d)
		}
	}

	ref, err := tokenizer.Load(bundledDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"What is two plus three?", "  Héllo,\tworld!\n\n12345 <|eot_id|>x", "naïve café — ünïcödé 🙂"} {
		if a, b := m.Tokenizer.Encode(s), ref.Encode(s); !slices.Equal(a, b) {
			t.Errorf("Encode(%q): GGUF %v, tokenizer.json %v", s, a, b)
		}
	}
	if m.Tokenizer.ChatTemplate() != ref.ChatTemplate() {
		t.Error("chat template differs from tokenizer_config.json's")
	}
	msgs := []tokenizer.Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "Hi"}}
	a, err1 := m.Tokenizer.ApplyChat(msgs, true)
	b, err2 := ref.ApplyChat(msgs, true)
	if err1 != nil || err2 != nil || a != b {
		t.Errorf("chat: %q (%v), want %q (%v)", a, err1, b, err2)
	}
}
