package model

import (
	"fmt"
	"math"
	"strings"
	"testing"
)

// The fixtures testdata/tiny-dream and testdata/tiny-llada-moe were written
// by tools/golden/make_arch_golden.py from an independent PyTorch reference
// of each architecture (tools/pyllada/decoder.py), run in float64.
var archFixtures = []struct{ dir, arch string }{
	{"tiny-dream", "dream"},
	{"tiny-llada-moe", "llada-moe"},
	{"tiny-llada2", "llada2"},
	{"tiny-qwen2", "qwen2"}, // causal LMs: tools/golden/make_causal_golden.py (causal_test.go)
	{"tiny-llama", "llama"},
}

// TestArchGolden: each architecture's logits and K/V within 1e-4 of the
// reference (alone and in a batch), on every golden backend (its greedy
// generations: sample's TestArchGenerateGolden).
func TestArchGolden(t *testing.T) {
	for _, fx := range archFixtures {
		for lib, be := range goldenBackends(t) {
			t.Run(fx.dir+"/"+lib, func(t *testing.T) {
				m, _, _ := loadFixtureOn(t, fx.dir, be)
				if got := m.Config.ArchName(); got != fx.arch {
					t.Fatalf("architecture %q, want %q", got, fx.arch)
				}
				testForwardGolden(t, fx.dir, be)
			})
		}
	}
}

// TestArchConfig: what each architecture's config parser takes from
// config.json, and the errors that name the field to fix.
func TestArchConfig(t *testing.T) {
	c, _, err := ReadConfig("testdata/tiny-dream/config.json")
	if err != nil {
		t.Fatal(err)
	}
	if !c.QKVBias || !c.ShiftLogits || c.QKNorm || c.MoE != nil || c.RopeTheta != 1e6 || c.NKVHeads != 2 || c.MaskTokenID != 259 {
		t.Errorf("dream config: %+v", c)
	}
	c, _, err = ReadConfig("testdata/tiny-llada-moe/config.json")
	if err != nil {
		t.Fatal(err)
	}
	if c.QKVBias || c.ShiftLogits || !c.QKNorm || c.MoE == nil || *c.MoE != (MoEConfig{Experts: 8, TopK: 2, Hidden: 16}) {
		t.Errorf("llada-moe config: %+v (moe %+v)", c, c.MoE)
	}
	base := `"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
		"intermediate_size": 96, "vocab_size": 300, "eos_token_id": [1, 2], "mask_token_id": 3`
	for _, tc := range []struct{ json, want string }{
		{`{"model_type": "sdar", "architectures": ["SDARForCausalLM"]}`, `model_type "sdar"`},
		{`{"model_type": "Dream", ` + strings.Replace(base, `, "mask_token_id": 3`, "", 1) + `}`, "mask_token_id"},
		{`{"model_type": "Dream", "head_dim": 32, ` + base + `}`, "head_dim 32"},
		{`{"model_type": "Dream", "rope_scaling": {"type": "yarn"}, ` + base + `}`, "rope_scaling"},
		{`{"model_type": "Dream", "num_key_value_heads": 3, ` + strings.Replace(base, `"num_key_value_heads": 2,`, "", 1) + `}`, "num_key_value_heads 3"},
		{`{"model_type": "lladamoe", ` + base + `}`, "num_experts"},
		{`{"model_type": "lladamoe", "num_experts": 2, "num_experts_per_tok": 3, "expert_intermediate_size": 8, ` + base + `}`, "num_experts_per_tok 3"},
		{`{"model_type": "Dream", "hidden_act": "gelu", ` + base + `}`, "hidden_act"},
	} {
		_, err := ParseConfig([]byte(tc.json))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one naming %q", tc.json, err, tc.want)
		}
	}
	c, err = ParseConfig([]byte(`{"model_type": "Dream", ` + base + `}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.EOSTokenID != 1 || c.RMSNormEps != 1e-6 || c.RopeTheta != 1e6 {
		t.Errorf("defaults: eos %d eps %g theta %g", c.EOSTokenID, c.RMSNormEps, c.RopeTheta)
	}
	// LLaDA 2 without the keys its public code defaults: mask id 156895,
	// blocks of 32, half the head rotated, q/k norms and an output bias.
	l2 := `{"model_type": "llada2_moe", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
		"num_key_value_heads": 2, "intermediate_size": 96, "vocab_size": 157184, "eos_token_id": 156892,
		"num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 16, "n_group": 4, "topk_group": 2}`
	c, err = ParseConfig([]byte(l2))
	if err != nil {
		t.Fatal(err)
	}
	want := MoEConfig{Experts: 8, TopK: 2, Hidden: 16, Sigmoid: true, RoutedScaling: 2.5, Groups: 4, TopKGroups: 2}
	if c.MaskTokenID != 156895 || c.CausalBlock() != 32 || c.RotaryDim != 8 || !c.QKNorm || !c.OutBias || *c.MoE != want {
		t.Errorf("llada2 defaults: %+v (moe %+v)", c, c.MoE)
	}
	for _, tc := range []struct{ edit, want string }{
		{`"n_group": 3`, "n_group 3"},
		{`"topk_group": 0`, "topk_group 0"},
		{`"score_function": "softmax"`, "score_function"},
		{`"partial_rotary_factor": 0.1`, "partial_rotary_factor"},
		{`"first_k_dense_replace": 3`, "first_k_dense_replace 3"},
	} {
		key := tc.edit[:strings.Index(tc.edit, ":")]
		raw := l2
		if i := strings.Index(raw, key); i >= 0 {
			j := i + strings.IndexAny(raw[i:], ",}")
			raw = raw[:i] + tc.edit + raw[j:]
		} else {
			raw = strings.Replace(raw, "{", "{"+tc.edit+", ", 1)
		}
		if _, err := ParseConfig([]byte(raw)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one naming %q", tc.edit, err, tc.want)
		}
	}
}

// TestRoute: softmax routing picks the top k (ties to the lower index),
// weights them by their probabilities, renormalised with NormTopK.
func TestRoute(t *testing.T) {
	lg := []float32{0, 1, 2, 2 /* row 1 */, 3, 0, 0, 0}
	for _, norm := range []bool{false, true} {
		rows, wts := route(lg, 2, 4, &MoEConfig{Experts: 4, TopK: 2, NormTopK: norm}, nil)
		want := [][]int32{{1}, {1}, {0}, {0}}
		for e := range want {
			if len(rows[e]) != len(want[e]) {
				t.Fatalf("norm %v: expert %d rows %v, want %v", norm, e, rows[e], want[e])
			}
			for i := range want[e] {
				if rows[e][i] != want[e][i] {
					t.Fatalf("norm %v: expert %d rows %v, want %v", norm, e, rows[e], want[e])
				}
			}
		}
		// row 0: p ∝ (1, e, e², e²); experts 2 and 3 tie: both taken.
		z := 1 + math.E + 2*math.E*math.E
		w := math.E * math.E / z
		if norm {
			w = 0.5
		}
		if math.Abs(float64(wts[2][0])-w) > 1e-6 || math.Abs(float64(wts[3][0])-w) > 1e-6 {
			t.Errorf("norm %v: row 0 weights %g, %g, want %g", norm, wts[2][0], wts[3][0], w)
		}
		// row 1: p ∝ (e³, 1, 1, 1); the tie among 1..3 goes to expert 1.
		z = math.Exp(3) + 3
		w0, w1 := math.Exp(3)/z, 1/z
		if norm {
			w0, w1 = w0/(w0+w1), w1/(w0+w1)
		}
		if math.Abs(float64(wts[0][0])-w0) > 1e-6 || math.Abs(float64(wts[1][0])-w1) > 1e-6 {
			t.Errorf("norm %v: row 1 weights %g, %g, want %g, %g", norm, wts[0][0], wts[1][0], w0, w1)
		}
	}
}

// TestDreamChat: the Dream fixture's ChatML template encodes a request as
// the reference does, and its shared prefix is the system turn.
func TestDreamChat(t *testing.T) {
	m, g, _ := loadGolden[struct {
		Chat []struct {
			System, User string
			IDs          []int32
		}
	}](t, "tiny-dream", fixtureBackend())
	for _, c := range g.Chat {
		ids, pl, err := m.Tokenizer.EncodeChat(c.System, c.User)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(ids) != fmt.Sprint(c.IDs) {
			t.Errorf("EncodeChat(%q, %q):\n got %v\nwant %v", c.System, c.User, ids, c.IDs)
		}
		if want := len(m.Tokenizer.Encode("<|im_start|>system\n" + c.System + "<|im_end|>\n")); pl != want {
			t.Errorf("prefix length %d, want %d (the system turn)", pl, want)
		}
	}
	// Without a system message the template adds Qwen's default one; the
	// tokenizer has no BOS token, so nothing is shared.
	ids, pl, err := m.Tokenizer.EncodeChat("", "Hi")
	if err != nil {
		t.Fatal(err)
	}
	if want := m.Tokenizer.Encode("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"); fmt.Sprint(ids) != fmt.Sprint(want) || pl != 0 {
		t.Errorf("no system message: %v (prefix %d), want %v (prefix 0)", ids, pl, want)
	}
}
