package model

import (
	"fmt"

	"github.com/dlmcache/dlmcache/model/backend"
)

// The autoregressive (causal) language models: Hugging Face's
// Qwen2ForCausalLM (Qwen2, Qwen2.5: the guides that share Dream's
// vocabulary) and LlamaForCausalLM (Llama, and the guide this project
// trains: tools/pyllada/hf_llama.py). Both are the Llama/Qwen layer —
// pre-norm RMSNorm, rotate-half RoPE over the whole head, GQA, a
// SiLU-gated MLP — with causal attention (the query at position id p
// reads the keys at ids ≤ p) and next-token logits (row i's logits
// predict token i+1). Their Config has Causal set: sample.Generate decodes
// them token by token with an exact K/V cache (autoregressive.go).
//
// An AR model has no mask token; config.json's mask_token_id, where it
// gives one (the DLM's mask of a guide trained beside it), is kept, else
// MaskTokenID is 0 (unused).

// causalArch is a causal LM in the Llama/Qwen layout (causalConfig,
// buildCausal): one value per family, which differ in the names
// config.json gives them and in how the attention's biases are said.
type causalArch struct {
	// name is Name; config.json's model_type ("qwen2").
	name string
	// class is config.json's architectures entry ("Qwen2ForCausalLM").
	class string
	// family names the family in causalConfig's messages ("Qwen2").
	family string
	// biases sets c's attention biases from config.json's h, or refuses h.
	biases func(h *hfDecoderConfig, c *Config) error
}

// qwen2Arch is Qwen2ForCausalLM (model_type "qwen2"): q/k/v projections
// with biases, o without; the head tied to the embedding with
// tie_word_embeddings (Qwen2.5-0.5B and -1.5B); RoPE θ from rope_theta
// (Qwen2's default 10000 where absent), rms_norm_eps (1e-6 where absent).
var qwen2Arch = causalArch{name: "qwen2", class: "Qwen2ForCausalLM", family: "Qwen2",
	biases: func(h *hfDecoderConfig, c *Config) error {
		if h.AttentionBias {
			return fmt.Errorf("config.json: attention_bias is not a Qwen2 field (its q/k/v always have biases, o none); remove it")
		}
		c.QKVBias = true
		return nil
	}}

// llamaArch is LlamaForCausalLM (model_type "llama"): no biases unless
// attention_bias (then q, k, v and o have them); an untied head unless
// tie_word_embeddings; RoPE θ from rope_theta (10000 where absent).
// mlp_bias is refused.
var llamaArch = causalArch{name: "llama", class: "LlamaForCausalLM", family: "Llama",
	biases: func(h *hfDecoderConfig, c *Config) error {
		c.QKVBias, c.OutBias = h.AttentionBias, h.AttentionBias
		return nil
	}}

func (a causalArch) Name() string { return a.name }

func (a causalArch) Claims(modelType string, archs []string) bool {
	return claims(modelType, archs, []string{a.name}, []string{a.class})
}

func (a causalArch) ParseConfig(raw []byte) (*Config, error) {
	h, c, err := causalConfig(raw, a.family)
	if err != nil {
		return nil, err
	}
	if err := a.biases(h, c); err != nil {
		return nil, err
	}
	return c, validateDecoder(c)
}

func (causalArch) Build(c *Config, b backend.Backend, w *Weights) (*Network, error) {
	return buildCausal(c, b, w)
}

// causalConfig reads the config.json of a causal LM in the Llama/Qwen
// naming: decoderConfig's shared fields (RoPE θ 10000 where absent), a
// dense MLP, full rotary, no MLP bias; Causal set.
func causalConfig(raw []byte, arch string) (*hfDecoderConfig, *Config, error) {
	h, c, err := decoderConfig(raw, arch, 10000, 0)
	if err != nil {
		return nil, nil, err
	}
	if err := h.fullRotary(arch); err != nil {
		return nil, nil, err
	}
	if err := (numericField{name: "intermediate_size", v: float64(c.MLPHiddenSize), open: true}).check(); err != nil {
		return nil, nil, fmt.Errorf("config.json: %w", err)
	}
	if h.MLPBias {
		return nil, nil, fmt.Errorf("config.json: mlp_bias true is not supported")
	}
	if h.BlockSize != 0 {
		return nil, nil, fmt.Errorf("config.json: block_size %d: a %s causal LM has causal attention (no blocks)", h.BlockSize, arch)
	}
	c.Causal = true
	return h, c, nil
}

// buildCausal builds a causal LM in the Llama/Qwen tensor layout
// (buildDecoder; o_proj's bias with Config.OutBias) with the dense
// SiLU-gated MLP mlp.{gate,up,down}_proj.
func buildCausal(c *Config, b backend.Backend, w *Weights) (*Network, error) {
	hid, d := c.MLPHiddenSize, c.DModel
	m := buildDecoder(c, b, w, func(blk *Block, p string) {
		if c.OutBias {
			blk.OBias = w.Vector(p+"self_attn.o_proj.bias", d)
		}
		blk.Gate = w.Matrix(p+"mlp.gate_proj.weight", hid, d)
		blk.Up = w.Matrix(p+"mlp.up_proj.weight", hid, d)
		blk.Down = w.Matrix(p+"mlp.down_proj.weight", d, hid)
	})
	return m, w.Err()
}
