package model

import "github.com/dlmcache/dlmcache/model/backend"

// dreamArch is Dream (Dream-org/Dream-v0-*-7B, DiffuCoder; model_type
// "Dream", DreamModel): the Qwen2.5 layout (q/k/v projections with biases,
// o without; GQA; head dim hidden_size/num_attention_heads; RoPE θ from
// rope_theta; RMSNorm; SiLU-gated MLP), bidirectional attention, and
// shifted logits: position i's prediction is read from row i−1 (position
// 0's from its own). The mask token is config.json's mask_token_id.
type dreamArch struct{}

func (dreamArch) Name() string { return "dream" }

func (dreamArch) Claims(modelType string, archs []string) bool {
	return claims(modelType, archs, []string{"dream"}, []string{"DreamModel"})
}

func (dreamArch) ParseConfig(raw []byte) (*Config, error) {
	h, c, err := decoderConfig(raw, "Dream", 1e6, -1)
	if err != nil {
		return nil, err
	}
	if err := h.fullRotary("Dream"); err != nil {
		return nil, err
	}
	if err := (numericField{name: "intermediate_size", v: float64(c.MLPHiddenSize), open: true}).check(); err != nil {
		return nil, err
	}
	c.QKVBias, c.ShiftLogits = true, true
	return c, validateDecoder(c)
}

func (dreamArch) Build(c *Config, b backend.Backend, w *Weights) (*Network, error) {
	hid, d := c.MLPHiddenSize, c.DModel
	m := buildDecoder(c, b, w, func(blk *Block, p string) {
		blk.Gate = w.Matrix(p+"mlp.gate_proj.weight", hid, d)
		blk.Up = w.Matrix(p+"mlp.up_proj.weight", hid, d)
		blk.Down = w.Matrix(p+"mlp.down_proj.weight", d, hid)
	})
	return m, w.Err()
}
