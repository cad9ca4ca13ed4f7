package model

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

// Config is a LLaDA config.json, with LLaDA's own field names (not Llama's).
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
}

// CausalBlock is the attention block size: 0 for a bidirectional model
// (or a nil config), BlockSize for a block-causal one.
func (c *Config) CausalBlock() int {
	if c == nil || !c.BlockCausal {
		return 0
	}
	return c.BlockSize
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

// ParseConfig decodes and validates config.json bytes.
func ParseConfig(raw []byte) (*Config, error) {
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

// Validate reports the first field that makes the config unusable.
func (c *Config) Validate() error {
	pos := map[string]int{"d_model": c.DModel, "n_layers": c.NLayers, "n_heads": c.NHeads,
		"n_kv_heads": c.NKVHeads, "mlp_hidden_size": c.MLPHiddenSize, "vocab_size": c.VocabSize}
	for _, k := range []string{"d_model", "n_layers", "n_heads", "n_kv_heads", "mlp_hidden_size", "vocab_size"} {
		if pos[k] <= 0 {
			return fmt.Errorf("config.json: %s must be positive, got %d", k, pos[k])
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
	if c.MaskTokenID < 0 || c.MaskTokenID >= c.Embeddings() {
		return fmt.Errorf("config.json: mask_token_id %d outside the vocabulary (%d)", c.MaskTokenID, c.Embeddings())
	}
	if c.BlockCausal && c.BlockSize <= 0 {
		return fmt.Errorf("config.json: block_size must be positive when block_causal is true, got %d", c.BlockSize)
	}
	if c.BlockSize < 0 {
		return fmt.Errorf("config.json: block_size must not be negative, got %d", c.BlockSize)
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
