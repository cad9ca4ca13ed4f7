package model

import (
	"fmt"
	"strings"

	"github.com/dlmcache/dlmcache/model/backend"
)

// llada2Arch is LLaDA 2.x (inclusionAI/LLaDA2.0-mini, -flash, 2.1;
// model_type "llada2_moe", LLaDA2MoeModelLM), the BailingMoeV2 layout:
// one fused q/k/v projection (attention.query_key_value, heads laid out
// [q heads, k heads, v heads]), per-head q/k RMSNorm (use_qk_norm),
// partial RoPE (partial_rotary_factor of each head), GQA, the output
// projection attention.dense; the first first_k_dense_replace layers with
// a dense MLP, the others a mixture of experts: sigmoid scores, chosen by
// score plus an expert bias among the topk_group best of n_group groups,
// the chosen scores normalised and scaled by routed_scaling_factor, plus
// num_shared_experts shared experts run on every row. Attention is
// block-causal (blocks of block_size, 32 by default: LLaDA 2's block
// length); logits are not shifted. config.json without mask_token_id gets
// 156895, the released models' <|mask|>.
type llada2Arch struct{}

func (llada2Arch) Name() string { return "llada2" }

func (llada2Arch) Claims(modelType string, archs []string) bool {
	return claims(modelType, archs, []string{"llada2_moe", "llada21_moe"}, []string{"LLaDA2MoeModelLM"})
}

// LLaDA2Mask and LLaDA2Block are the released models' mask token id and
// block length, used where config.json gives none.
const (
	LLaDA2Mask  = 156895
	LLaDA2Block = 32
)

func (llada2Arch) ParseConfig(raw []byte) (*Config, error) {
	h, c, err := decoderConfig(raw, "LLaDA 2", 10000, LLaDA2Mask)
	if err != nil {
		return nil, err
	}
	for _, f := range []numericField{
		{name: "num_experts", v: float64(h.NumExperts), open: true},
		{name: "num_experts_per_tok", v: float64(h.NumExpertsPerTok), open: true},
		{name: "moe_intermediate_size", v: float64(h.MoEIntermediate), open: true},
		{name: "num_shared_experts", v: float64(h.NumSharedExperts)},
		{name: "first_k_dense_replace", v: float64(h.FirstKDense)},
		{name: "n_group", v: float64(h.NGroup)},
		{name: "topk_group", v: float64(h.TopKGroup)},
		{name: "block_size", v: float64(h.BlockSize), hint: "0 or absent: 32"},
	} {
		if err := f.check(); err != nil {
			return nil, fmt.Errorf("config.json: %w", err)
		}
	}
	mc := &MoEConfig{Experts: h.NumExperts, TopK: h.NumExpertsPerTok, Hidden: h.MoEIntermediate,
		Sigmoid: true, RoutedScaling: 2.5, Groups: h.NGroup, TopKGroups: h.TopKGroup,
		SharedHidden: h.MoEIntermediate * h.NumSharedExperts, FirstDense: h.FirstKDense}
	if h.RoutedScaling != nil {
		mc.RoutedScaling = *h.RoutedScaling
	}
	if f := strings.ToLower(h.ScoreFunction); f != "" && f != "sigmoid" {
		return nil, fmt.Errorf("config.json: score_function %q is not supported (LLaDA 2 routes with \"sigmoid\")", h.ScoreFunction)
	}
	switch {
	case mc.TopK > mc.Experts:
		return nil, fmt.Errorf("config.json: num_experts_per_tok %d exceeds num_experts %d", mc.TopK, mc.Experts)
	case mc.Groups > 1 && (mc.Experts%mc.Groups != 0 || mc.Experts/mc.Groups < 2):
		return nil, fmt.Errorf("config.json: num_experts %d do not split into n_group %d groups of two or more", mc.Experts, mc.Groups)
	case mc.Groups > 1 && (mc.TopKGroups < 1 || mc.TopKGroups > mc.Groups || mc.TopKGroups*mc.Experts/mc.Groups < mc.TopK):
		return nil, fmt.Errorf("config.json: topk_group %d of n_group %d leaves fewer than num_experts_per_tok %d experts", mc.TopKGroups, mc.Groups, mc.TopK)
	case mc.FirstDense > c.NLayers:
		return nil, fmt.Errorf("config.json: first_k_dense_replace %d exceeds num_hidden_layers %d", mc.FirstDense, c.NLayers)
	case mc.FirstDense > 0 && c.MLPHiddenSize <= 0:
		return nil, fmt.Errorf("config.json: intermediate_size must be positive for the %d dense layers (first_k_dense_replace)", mc.FirstDense)
	}
	if c.MLPHiddenSize == 0 {
		c.MLPHiddenSize = mc.Hidden // unused: no dense layer
	}
	c.MoE = mc
	c.QKNorm = h.UseQKNorm == nil || *h.UseQKNorm // the public code's default: true
	c.QKVBias = h.UseQKVBias
	if h.UseBias == nil || *h.UseBias {
		// the public code's default is true: the output projection's bias
		c.OutBias = true
	}
	hd := c.DModel / c.NHeads
	if f := h.PartialRotary; f == nil {
		c.RotaryDim = hd / 2 // the public code's default factor: 0.5
	} else {
		c.RotaryDim = int(float64(hd) * *f)
	}
	if c.RotaryDim <= 0 || c.RotaryDim > hd || c.RotaryDim%2 != 0 {
		return nil, fmt.Errorf("config.json: partial_rotary_factor gives %d rotated dimensions of a %d-wide head; want an even number in 2..%d", c.RotaryDim, hd, hd)
	}
	if c.RotaryDim == hd {
		c.RotaryDim = 0
	}
	c.BlockCausal, c.BlockSize = true, h.BlockSize
	if c.BlockSize == 0 {
		c.BlockSize = LLaDA2Block
	}
	return c, validateDecoder(c)
}

func (llada2Arch) Build(c *Config, b backend.Backend, w *Weights) (*Network, error) {
	vw, ok := b.(backend.Viewer)
	if !ok {
		return nil, fmt.Errorf("LLaDA 2's fused q/k/v weight needs a backend with views; %s has none", b.Name())
	}
	mc, d, kv, hd := c.MoE, c.DModel, c.KVDim(), c.HeadDim()
	mlp := func(p string, hid int) Expert {
		return Expert{Gate: w.Matrix(p+"gate_proj.weight", hid, d), Up: w.Matrix(p+"up_proj.weight", hid, d),
			Down: w.Matrix(p+"down_proj.weight", d, hid)}
	}
	l := hfLayout{embed: "model.word_embeddings.weight", layers: qwenLayout.layers, norm: qwenLayout.norm, head: qwenLayout.head}
	m := l.build(c, b, w, func(i int, p string) Block {
		a := p + "attention."
		blk := Block{
			AttnNorm: w.Matrix(p+"input_layernorm.weight", 1, d),
			QKV:      w.Matrix(a+"query_key_value.weight", d+2*kv, d),
			AttnOut:  w.Matrix(a+"dense.weight", d, d),
			FFNorm:   w.Matrix(p+"post_attention_layernorm.weight", 1, d),
		}
		if blk.QKV != nil {
			blk.Q, blk.K, blk.V = vw.ViewRows(blk.QKV, 0, d), vw.ViewRows(blk.QKV, d, d+kv), vw.ViewRows(blk.QKV, d+kv, d+2*kv)
		}
		if c.QKVBias {
			if bias := w.Vector(a+"query_key_value.bias", d+2*kv); bias != nil {
				blk.QBias, blk.KBias, blk.VBias = bias[:d], bias[d:d+kv], bias[d+kv:]
			}
		}
		if c.OutBias {
			blk.OBias = w.Vector(a+"dense.bias", d)
		}
		if c.QKNorm {
			blk.QNorm = w.Vector(a+"query_layernorm.weight", hd)
			blk.KNorm = w.Vector(a+"key_layernorm.weight", hd)
		}
		if i < mc.FirstDense {
			dense := mlp(p+"mlp.", c.MLPHiddenSize)
			blk.Gate, blk.Up, blk.Down = dense.Gate, dense.Up, dense.Down
		} else {
			moe := &MoE{Router: w.Matrix(p+"mlp.gate.weight", mc.Experts, d), Bias: w.Vector(p+"mlp.gate.expert_bias", mc.Experts)}
			for j := 0; j < mc.Experts; j++ {
				moe.Experts = append(moe.Experts, mlp(fmt.Sprintf("%smlp.experts.%d.", p, j), mc.Hidden))
			}
			if mc.SharedHidden > 0 {
				sh := mlp(p+"mlp.shared_experts.", mc.SharedHidden)
				moe.Shared = &sh
			}
			blk.MoE = moe
		}
		return blk
	})
	return m, w.Err()
}
