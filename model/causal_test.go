package model

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/dlmcache/dlmcache/internal/testckpt"
	"github.com/dlmcache/dlmcache/internal/testutil"
	"github.com/dlmcache/dlmcache/model/cpu"
)

// The causal fixtures testdata/tiny-qwen2 and testdata/tiny-llama were
// written by tools/golden/make_causal_golden.py, an independent PyTorch
// reference of Hugging Face's Qwen2ForCausalLM and LlamaForCausalLM run in
// float64. TestArchGolden (archFixtures) checks their logits and K/V within
// 1e-4 on every CPU backend, alone and batched; sample's tests their
// greedy decodings token for token.

var causalFixtures = []string{"tiny-qwen2", "tiny-llama"}

// TestCausalParity logs how far the causal forward's logits are from the
// reference (relative to the largest |logit|), for both inputs, and holds
// them to 1e-4.
func TestCausalParity(t *testing.T) {
	for _, fx := range causalFixtures {
		for lib, be := range goldenBackends(t) {
			m, g, gs := loadFixtureOn(t, fx, be)
			for _, tc := range []struct {
				prefix   string
				ids, pos []int32
			}{{"", g.InputIDs, g.PositionIDs}, {"pos2.", g.Pos2.InputIDs, g.Pos2.PositionIDs}} {
				out, err := m.Forward(Input{Tokens: tc.ids, Positions: tc.pos, LogitRows: iota32(len(tc.ids))}, nil)
				if err != nil {
					t.Fatal(err)
				}
				e := testutil.RelErr(out.Logits, goldenF32(t, gs, tc.prefix+"logits"))
				t.Logf("%s/%s %slogits [%d, %d]: relative error %.3g", fx, lib, tc.prefix, len(tc.ids), m.Config.Embeddings(), e)
				if e > 1e-4 {
					t.Errorf("%s/%s %slogits: relative error %.3g > 1e-4", fx, lib, tc.prefix, e)
				}
			}
		}
	}
}

// TestCausalConfig: what the causal architectures take from config.json
// (the trained guide's keys included) and the errors that name the field.
func TestCausalConfig(t *testing.T) {
	c, _, err := ReadConfig("testdata/tiny-qwen2/config.json")
	if err != nil {
		t.Fatal(err)
	}
	if c.ArchName() != "qwen2" || !c.Causal || !c.QKVBias || c.OutBias || !c.WeightTying || c.NKVHeads != 2 ||
		c.RopeTheta != 1e6 || c.RMSNormEps != 1e-6 || c.EOSTokenID != 258 || c.CausalBlock() != 0 || c.ShiftLogits {
		t.Errorf("qwen2 config: %+v", c)
	}
	c, _, err = ReadConfig("testdata/tiny-llama/config.json")
	if err != nil {
		t.Fatal(err)
	}
	if c.ArchName() != "llama" || !c.Causal || c.QKVBias || c.OutBias || c.WeightTying || c.RopeTheta != 10000 ||
		c.RMSNormEps != 1e-5 || c.MaskTokenID != 258 || c.EOSTokenID != 257 {
		t.Errorf("llama config: %+v", c)
	}
	base := `"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
		"intermediate_size": 96, "vocab_size": 300, "eos_token_id": [5, 6]`
	c, err = ParseConfig([]byte(`{"architectures": ["Qwen2ForCausalLM"], ` + base + `}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.ArchName() != "qwen2" || c.EOSTokenID != 5 || c.MaskTokenID != 0 || c.RopeTheta != 10000 || c.RMSNormEps != 1e-6 || c.WeightTying {
		t.Errorf("qwen2 defaults: %+v", c)
	}
	c, err = ParseConfig([]byte(`{"model_type": "llama", "attention_bias": true, ` + base + `}`))
	if err != nil {
		t.Fatal(err)
	}
	if !c.QKVBias || !c.OutBias {
		t.Errorf("llama attention_bias: q/k/v bias %v, o bias %v, want both", c.QKVBias, c.OutBias)
	}
	for _, tc := range []struct{ json, want string }{
		{`{"model_type": "llama", "mlp_bias": true, ` + base + `}`, "mlp_bias"},
		{`{"model_type": "qwen2", "rope_scaling": {"type": "yarn"}, ` + base + `}`, "rope_scaling"},
		{`{"model_type": "qwen2", "use_sliding_window": true, ` + base + `}`, "use_sliding_window"},
		{`{"model_type": "llama", "head_dim": 32, ` + base + `}`, "head_dim 32"},
		{`{"model_type": "llama", "block_size": 4, ` + base + `}`, "block_size 4"},
		{`{"model_type": "llama", "partial_rotary_factor": 0.5, ` + base + `}`, "partial_rotary_factor"},
		{`{"model_type": "qwen2", ` + strings.Replace(base, `"intermediate_size": 96,`, "", 1) + `}`, "intermediate_size"},
	} {
		if _, err := ParseConfig([]byte(tc.json)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one naming %q", tc.json, err, tc.want)
		}
	}
}

// TestCausalBF16: a BF16 copy of each causal fixture keeps its weights
// BF16 and stays within BF16's rounding of the reference.
func TestCausalBF16(t *testing.T) {
	for _, fx := range causalFixtures {
		dir := testckpt.WriteBF16Copy(t, filepath.Join("testdata", fx))
		be := cpu.NewWithOptions(cpu.Options{Threads: 2, GEMM: cpu.GEMMOpenBLAS})
		m, err := loadCheckpoint(dir, be)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		if q, ok := m.Blocks[0].Q.(*cpu.Tensor); !ok || !q.BF16() {
			t.Fatalf("%s: q_proj is %v, want a BF16 weight", fx, m.Blocks[0].Q)
		}
		_, g, gs := loadFixture(t, fx)
		out, err := m.Forward(Input{Tokens: g.InputIDs, LogitRows: iota32(len(g.InputIDs))}, nil)
		if err != nil {
			t.Fatal(err)
		}
		e := testutil.RelErr(out.Logits, goldenF32(t, gs, "logits"))
		t.Logf("%s: BF16 weights vs the F32 reference: relative error %.3g", fx, e)
		if e > 0.02 {
			t.Errorf("%s: BF16 logits: relative error %.3g > 0.02", fx, e)
		}
	}
}
