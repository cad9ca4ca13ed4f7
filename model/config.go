package model

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

// Config is a model's configuration: a LLaDA config.json, with LLaDA's own
// field names (not Llama's), or another architecture's config.json read
// into the same fields by its parser (arch.go).
type Config struct {
	ModelType     string   `json:"model_type,omitempty"`
	Architectures []string `json:"architectures,omitempty"`

	DModel        int     `json:"d_model"`
	NLayers       int     `json:"n_layers"`
	NHeads        int     `json:"n_heads"`
	NKVHeads      int     `json:"n_kv_heads"`
	MLPHiddenSize int     `json:"mlp_hidden_size"`
	VocabSize     int     `json:"vocab_size"`
	EmbeddingSize int     `json:"embedding_size"`
	RopeTheta     float64 `json:"rope_theta"`
	RMSNormEps    float64 `json:"rms_norm_eps"`

	MaskTokenID int `json:"mask_token_id"`
	EOSTokenID  int `json:"eos_token_id"`
	PadTokenID  int `json:"pad_token_id"`

	MaxSequenceLength int    `json:"max_sequence_length"`
	WeightTying       bool   `json:"weight_tying"`
	IncludeBias       bool   `json:"include_bias"`
	IncludeQKVBias    bool   `json:"include_qkv_bias"`
	LayerNormType     string `json:"layer_norm_type"`
	ActivationType    string `json:"activation_type"`

	// Block diffusion (LLaDA 2.x, SDAR, Fast-dLLM v2): with BlockCausal,
	// attention is bidirectional inside a block of BlockSize positions and
	// causal between blocks. Blocks are absolute, aligned at position id 0:
	// the query at position id p attends the key at position id p' iff
	// floor(p'/BlockSize) <= floor(p/BlockSize) (position ids, not indices
	// into the tokens, so prompt modules placed at their reserved ranges
	// keep their blocks; with the default ids 0..n-1 the two agree).
	BlockCausal bool `json:"block_causal,omitempty"`
	BlockSize   int  `json:"block_size,omitempty"`
	// ShiftLogits is Fast-dLLM v2's (and Dream's) token shift: the logits
	// of position i are read from row i-1 (position 0 from its own row).
	ShiftLogits bool `json:"shift_logits,omitempty"`

	// Set by an architecture's config parser (arch_*.go), never read from
	// a LLaDA config.json:
	Arch string `json:"-"` // the architecture's name; "" for LLaDA (ArchName)
	// arch is the architecture ParseConfig picked for Arch (nil for
	// LLaDA's, and in a Config made in code: Build looks Arch up then).
	arch    Architecture
	QKVBias bool       `json:"-"` // the q, k and v projections have biases
	QKNorm  bool       `json:"-"` // per-head RMSNorm of q and k before RoPE
	MoE     *MoEConfig `json:"-"` // the MLP is a mixture of experts
	// RotaryDim is how many leading dimensions of each head RoPE rotates
	// (partial RoPE: rotate-half over them, frequencies from RotaryDim);
	// 0: the whole head.
	RotaryDim int `json:"-"`
	// OutBias: the attention output projection has a bias.
	OutBias bool `json:"-"`
	// Causal marks an autoregressive language model (Qwen2ForCausalLM,
	// LlamaForCausalLM: arch_causal.go) rather than a diffusion one:
	// attention is causal by position id (the query at id p reads the
	// keys at ids <= p: block-causal with blocks of one), the logits of
	// row i predict token i+1, and sample.Generate decodes it token by
	// token with an exact K/V cache (autoregressive.go). CausalBlock,
	// the block-diffusion samplers' and caches' notion, is 0 for it.
	Causal bool `json:"-"`
}

// CausalBlock is the attention block size: 0 for a bidirectional model
// (or a nil config), BlockSize for a block-causal one.
func (c *Config) CausalBlock() int {
	if c == nil || !c.BlockCausal {
		return 0
	}
	return c.BlockSize
}

// attnBlock is the forward's attention block: 1 for a causal LM (each
// position its own block: causal attention), CausalBlock otherwise.
func (c *Config) attnBlock() int {
	if c != nil && c.Causal {
		return 1
	}
	return c.CausalBlock()
}

// HeadDim is d_model / n_heads.
func (c *Config) HeadDim() int { return c.DModel / c.NHeads }

// KVDim is the width of one position's keys (or values): n_kv_heads·head_dim.
func (c *Config) KVDim() int { return c.NKVHeads * c.HeadDim() }

// Embeddings is the number of rows of the embedding table and the LM head
// (LLaDA pads embedding_size above vocab_size).
func (c *Config) Embeddings() int {
	if c.EmbeddingSize > 0 {
		return c.EmbeddingSize
	}
	return c.VocabSize
}

// ReadConfig reads and validates a config.json.
func ReadConfig(path string) (*Config, []byte, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	c, err := ParseConfig(raw)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, raw, nil
}

// parseLLaDAConfig decodes and validates a LLaDA config.json.
func parseLLaDAConfig(raw []byte) (*Config, error) {
	var c Config
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("config.json is not valid JSON: %w", err)
	}
	if c.NKVHeads == 0 {
		c.NKVHeads = c.NHeads
	}
	if c.RMSNormEps == 0 {
		c.RMSNormEps = 1e-5
	}
	if c.RopeTheta == 0 {
		c.RopeTheta = 10000
	}
	return &c, c.Validate()
}

// Validate reports the first field that makes the config unusable. Every
// numeric field is checked against its range (numericFields); the error
// names the field (ReadConfig adds the file).
func (c *Config) Validate() error {
	for _, f := range c.numericFields() {
		if err := f.check(); err != nil {
			return fmt.Errorf("config.json: %w", err)
		}
	}
	if c.DModel%c.NHeads != 0 {
		return fmt.Errorf("config.json: d_model %d is not a multiple of n_heads %d", c.DModel, c.NHeads)
	}
	if c.HeadDim()%2 != 0 {
		return fmt.Errorf("config.json: head dim %d must be even for RoPE", c.HeadDim())
	}
	if c.NHeads%c.NKVHeads != 0 {
		return fmt.Errorf("config.json: n_heads %d is not a multiple of n_kv_heads %d", c.NHeads, c.NKVHeads)
	}
	if c.EmbeddingSize != 0 && c.EmbeddingSize < c.VocabSize {
		return fmt.Errorf("config.json: embedding_size %d < vocab_size %d", c.EmbeddingSize, c.VocabSize)
	}
	for _, t := range []struct {
		name string
		id   int
	}{{"mask_token_id", c.MaskTokenID}, {"eos_token_id", c.EOSTokenID}, {"pad_token_id", c.PadTokenID}} {
		if t.id >= c.Embeddings() {
			return fmt.Errorf("config.json: %s %d outside the vocabulary (%d)", t.name, t.id, c.Embeddings())
		}
	}
	if c.BlockCausal && c.BlockSize <= 0 {
		return fmt.Errorf("config.json: block_size must be positive when block_causal is true, got %d", c.BlockSize)
	}
	if c.IncludeBias || c.IncludeQKVBias {
		return fmt.Errorf("config.json: biases (include_bias/include_qkv_bias) are not supported for LLaDA yet")
	}
	if t := strings.ToLower(c.LayerNormType); t != "" && t != "rms" {
		return fmt.Errorf("config.json: layer_norm_type %q is not supported (want \"rms\")", c.LayerNormType)
	}
	if a := strings.ToLower(c.ActivationType); a != "" && a != "silu" && a != "swiglu" {
		return fmt.Errorf("config.json: activation_type %q is not supported (want \"silu\")", c.ActivationType)
	}
	return nil
}

// numericField is one numeric config.json field and its allowed range.
type numericField struct {
	name string
	v    float64
	min  float64 // the least value allowed
	open bool    // min itself is refused (v must exceed it)
	hint string  // what the field's zero or absence means, if anything
}

func (f numericField) check() error {
	if f.v > f.min || (!f.open && f.v == f.min) {
		return nil
	}
	want := fmt.Sprintf("must be at least %g", f.min)
	switch {
	case f.open && f.min == 0:
		want = "must be positive"
	case f.min == 0:
		want = "must not be negative"
	}
	if f.hint != "" {
		want += " (" + f.hint + ")"
	}
	return fmt.Errorf("%s %s, got %g", f.name, want, f.v)
}

// numericFields lists every numeric field with its range; a field added to
// Config gets a line here.
func (c *Config) numericFields() []numericField {
	return []numericField{
		{name: "d_model", v: float64(c.DModel), open: true},
		{name: "n_layers", v: float64(c.NLayers), open: true},
		{name: "n_heads", v: float64(c.NHeads), open: true},
		{name: "n_kv_heads", v: float64(c.NKVHeads), open: true},
		{name: "mlp_hidden_size", v: float64(c.MLPHiddenSize), open: true},
		{name: "vocab_size", v: float64(c.VocabSize), open: true},
		{name: "embedding_size", v: float64(c.EmbeddingSize), hint: "0 or absent: vocab_size"},
		{name: "rope_theta", v: c.RopeTheta, open: true},
		{name: "rms_norm_eps", v: c.RMSNormEps, open: true},
		{name: "mask_token_id", v: float64(c.MaskTokenID)},
		{name: "eos_token_id", v: float64(c.EOSTokenID)},
		{name: "pad_token_id", v: float64(c.PadTokenID)},
		{name: "max_sequence_length", v: float64(c.MaxSequenceLength), hint: "the model's context in tokens; 0 or absent: none given"},
		{name: "block_size", v: float64(c.BlockSize)},
	}
}
