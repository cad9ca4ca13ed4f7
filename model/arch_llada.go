package model

import "github.com/dlmcache/dlmcache/model/backend"

// lladaArch is LLaDA (GSAI-ML/LLaDA-8B and the models this project
// trains): config.json in LLaDA's own names (config.go), tensors under
// model.transformer. (wte, blocks.N.{attn_norm, q_proj, k_proj, v_proj,
// attn_out, ff_norm, ff_proj, up_proj, ff_out}, ln_f, ff_out), no biases,
// bidirectional (block-causal with block_causal/block_size).
type lladaArch struct{}

func (lladaArch) Name() string { return "llada" }

func (lladaArch) Claims(modelType string, archs []string) bool {
	return claims(modelType, archs, []string{"llada"}, []string{"LLaDAModelLM"})
}

func (lladaArch) ParseConfig(raw []byte) (*Config, error) { return parseLLaDAConfig(raw) }

// Build asks w for each of LLaDA's tensors by its Hugging Face name and
// the [rows, cols] shape the config gives it (rows 1 for a norm weight).
func (lladaArch) Build(c *Config, b backend.Backend, w *Weights) (*Network, error) {
	d, hid := c.DModel, c.MLPHiddenSize
	l := hfLayout{embed: LLaDAPrefix + "wte.weight", layers: LLaDAPrefix + "blocks.%d.", norm: LLaDAPrefix + "ln_f.weight", head: LLaDAPrefix + "ff_out.weight"}
	m := l.build(c, b, w, func(_ int, p string) Block {
		blk := attnWeights{
			attnNorm: p + "attn_norm.weight",
			q:        p + "q_proj.weight", k: p + "k_proj.weight", v: p + "v_proj.weight", out: p + "attn_out.weight",
			ffNorm: p + "ff_norm.weight",
		}.block(c, w)
		blk.Gate = w.Matrix(p+"ff_proj.weight", hid, d)
		blk.Up = w.Matrix(p+"up_proj.weight", hid, d)
		blk.Down = w.Matrix(p+"ff_out.weight", d, hid)
		return blk
	})
	return m, w.Err()
}

// BuildLLaDA builds a LLaDA network from weight (the GGUF reader's and
// converter's entry in model/load, which know LLaDA's names only).
func BuildLLaDA(c *Config, b backend.Backend, weight func(name string, rows, cols int) (backend.Tensor, error)) (*Network, error) {
	w := &Weights{b: b, get: weight}
	m, err := lladaArch{}.Build(c, b, w)
	if err != nil {
		return nil, err
	}
	return m, nil
}

// LLaDAPrefix starts every tensor name of a Hugging Face LLaDA checkpoint.
const LLaDAPrefix = "model.transformer."
