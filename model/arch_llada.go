package model

import (
	"fmt"

	"github.com/dlmcache/dlmcache/model/backend"
)

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
func (lladaArch) Build(c *Config, b backend.Backend, w *Weights) (*LLaDA, error) {
	d, kv, hid, e := c.DModel, c.KVDim(), c.MLPHiddenSize, c.Embeddings()
	m := &LLaDA{Config: c, Backend: b}
	m.Embed = w.Matrix(hfPrefix+"wte.weight", e, d)
	for i := 0; i < c.NLayers; i++ {
		p := fmt.Sprintf("%sblocks.%d.", hfPrefix, i)
		m.Blocks = append(m.Blocks, Block{
			AttnNorm: w.Matrix(p+"attn_norm.weight", 1, d),
			Q:        w.Matrix(p+"q_proj.weight", d, d),
			K:        w.Matrix(p+"k_proj.weight", kv, d),
			V:        w.Matrix(p+"v_proj.weight", kv, d),
			AttnOut:  w.Matrix(p+"attn_out.weight", d, d),
			FFNorm:   w.Matrix(p+"ff_norm.weight", 1, d),
			Gate:     w.Matrix(p+"ff_proj.weight", hid, d),
			Up:       w.Matrix(p+"up_proj.weight", hid, d),
			Down:     w.Matrix(p+"ff_out.weight", d, hid),
		})
	}
	m.Norm = w.Matrix(hfPrefix+"ln_f.weight", 1, d)
	if c.WeightTying {
		m.Head = m.Embed
	} else {
		m.Head = w.Matrix(hfPrefix+"ff_out.weight", e, d)
	}
	return m, w.Err()
}

// buildLLaDA builds a LLaDA network from weight (the GGUF reader's and
// converter's entry, which know LLaDA's names only).
func buildLLaDA(c *Config, b backend.Backend, weight func(name string, rows, cols int) (backend.Tensor, error)) (*LLaDA, error) {
	w := &Weights{b: b, get: weight}
	m, err := lladaArch{}.Build(c, b, w)
	if err != nil {
		return nil, err
	}
	return m, nil
}
