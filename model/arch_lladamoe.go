package model

import (
	"fmt"

	"github.com/dlmcache/dlmcache/model/backend"
)

// lladaMoEArch is LLaDA-MoE (inclusionAI/LLaDA-MoE-7B-A1B-*; model_type
// "lladamoe", LLaDAMoEModelLM): OLMoE-like, the Llama tensor layout with
// per-head RMSNorm of q and k before RoPE (qk_layernorm), and every
// layer's MLP a mixture of experts: a softmax router over num_experts,
// the num_experts_per_tok best (renormalised with norm_topk_prob), each
// a SiLU-gated MLP of width expert_intermediate_size; no shared expert.
// Bidirectional, logits not shifted. config.json without mask_token_id
// gets 156895, the released models' mask token (LLaDA 2's too).
type lladaMoEArch struct{}

func (lladaMoEArch) Name() string { return "llada-moe" }

func (lladaMoEArch) Claims(modelType string, archs []string) bool {
	return claims(modelType, archs, []string{"lladamoe", "llada_moe"}, []string{"LLaDAMoEModelLM", "LLaDAMoEModel"})
}

func (lladaMoEArch) ParseConfig(raw []byte) (*Config, error) {
	h, c, err := decoderConfig(raw, "LLaDA-MoE", 50000, LLaDA2Mask)
	if err != nil {
		return nil, err
	}
	if err := h.fullRotary("LLaDA-MoE"); err != nil {
		return nil, err
	}
	for _, f := range []numericField{
		{name: "num_experts", v: float64(h.NumExperts), open: true},
		{name: "num_experts_per_tok", v: float64(h.NumExpertsPerTok), open: true},
		{name: "expert_intermediate_size", v: float64(h.ExpertIntermediate), open: true},
	} {
		if err := f.check(); err != nil {
			return nil, fmt.Errorf("config.json: %w", err)
		}
	}
	if h.NumExpertsPerTok > h.NumExperts {
		return nil, fmt.Errorf("config.json: num_experts_per_tok %d exceeds num_experts %d", h.NumExpertsPerTok, h.NumExperts)
	}
	if h.AttentionBias {
		return nil, fmt.Errorf("config.json: attention_bias true is not supported for LLaDA-MoE")
	}
	c.QKNorm = h.QKLayerNorm
	c.MoE = &MoEConfig{Experts: h.NumExperts, TopK: h.NumExpertsPerTok, Hidden: h.ExpertIntermediate, NormTopK: h.NormTopKProb}
	if c.MLPHiddenSize == 0 {
		c.MLPHiddenSize = h.ExpertIntermediate // unused: no dense MLP
	}
	return c, validateDecoder(c)
}

func (lladaMoEArch) Build(c *Config, b backend.Backend, w *Weights) (*Network, error) {
	mc, d := c.MoE, c.DModel
	m := buildDecoder(c, b, w, func(blk *Block, p string) {
		moe := &MoE{Router: w.Matrix(p+"mlp.gate.weight", mc.Experts, d)}
		for j := 0; j < mc.Experts; j++ {
			e := fmt.Sprintf("%smlp.experts.%d.", p, j)
			moe.Experts = append(moe.Experts, Expert{
				Gate: w.Matrix(e+"gate_proj.weight", mc.Hidden, d),
				Up:   w.Matrix(e+"up_proj.weight", mc.Hidden, d),
				Down: w.Matrix(e+"down_proj.weight", d, mc.Hidden),
			})
		}
		blk.MoE = moe
	})
	return m, w.Err()
}
