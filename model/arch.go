package model

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/dlmcache/dlmcache/model/backend"
)

// Architecture is one model family's way into the network: which
// config.json files are its, how they read, and where its checkpoint's
// tensors go. Every architecture loads into the same network (Network, its
// Blocks) and runs through the same batched forward (forward.go); what
// differs between families is said by the Config fields its parser sets
// (QKVBias, QKNorm, MoE, ShiftLogits, …) and by the optional weights of a
// Block (biases, q/k norms, experts). Caching never learns which
// architecture runs: the Plan contract is the same for all.
//
// Adding one is a file arch_<name>.go with a type implementing this
// interface, a line in architectures, and a fixture (docs/architecture.md).
type Architecture interface {
	// Name is the architecture's name in messages and run records.
	Name() string
	// Claims reports whether a config.json with this model_type and
	// architectures list is this architecture's.
	Claims(modelType string, architectures []string) bool
	// ParseConfig decodes and validates config.json.
	ParseConfig(raw []byte) (*Config, error)
	// Build asks w for each of the checkpoint's tensors by its name and
	// the shape c gives it, and returns the network (or w's first error).
	Build(c *Config, b backend.Backend, w *Weights) (*Network, error)
}

// architectures is every architecture model/load knows, LLaDA first (the one a
// config.json without model_type or architectures is taken for).
var architectures = []Architecture{lladaArch{}, dreamArch{}, lladaMoEArch{}, llada2Arch{}, qwen2Arch, llamaArch}

// ArchitectureOf returns the architecture whose config.json raw is.
func ArchitectureOf(raw []byte) (Architecture, error) {
	var id struct {
		ModelType     string   `json:"model_type"`
		Architectures []string `json:"architectures"`
	}
	if err := json.Unmarshal(raw, &id); err != nil {
		return nil, fmt.Errorf("config.json is not valid JSON: %w", err)
	}
	for _, a := range architectures {
		if a.Claims(id.ModelType, id.Architectures) {
			return a, nil
		}
	}
	if id.ModelType == "" && len(id.Architectures) == 0 {
		return architectures[0], nil
	}
	var names []string
	for _, a := range architectures {
		names = append(names, a.Name())
	}
	return nil, fmt.Errorf("config.json: model_type %q (architectures %v) is not an architecture dlmcache runs (it runs %s)",
		id.ModelType, id.Architectures, strings.Join(names, ", "))
}

// ParseConfig decodes and validates config.json bytes of any architecture
// (ArchitectureOf picks the parser).
func ParseConfig(raw []byte) (*Config, error) {
	a, err := ArchitectureOf(raw)
	if err != nil {
		return nil, err
	}
	c, err := a.ParseConfig(raw)
	if c != nil {
		c.arch = a
		if a != architectures[0] {
			c.Arch = a.Name() // LLaDA's stays "" (ArchName)
		}
	}
	return c, err
}

// Build builds the network of c's architecture from weight, which returns
// the checkpoint's tensor name as a backend tensor of shape [rows, cols]
// (the loaders in model/load hand it their safetensors or GGUF reader).
// The architecture is the one ParseConfig (or SetArchitecture) recorded;
// a Config made in code, or whose Arch was changed since, is built by the
// architecture Arch names.
func Build(c *Config, b backend.Backend, weight func(name string, rows, cols int) (backend.Tensor, error)) (*Network, error) {
	a := c.arch
	if a == nil || a.Name() != c.ArchName() {
		var err error
		if a, err = architectureNamed(c.ArchName()); err != nil {
			return nil, err
		}
	}
	w := &Weights{b: b, get: weight}
	m, err := a.Build(c, b, w)
	if w.err != nil {
		return nil, w.err
	}
	return m, err
}

// SetArchitecture records in c the architecture named name (as ArchName
// names them), as ParseConfig records the one it picked, so that Build
// builds with it: for a config made from another format (a GGUF file names
// its architecture).
func (c *Config) SetArchitecture(name string) error {
	a, err := architectureNamed(name)
	if err != nil {
		return err
	}
	c.arch, c.Arch = a, ""
	if a != architectures[0] {
		c.Arch = a.Name()
	}
	return nil
}

func architectureNamed(name string) (Architecture, error) {
	for _, a := range architectures {
		if a.Name() == name {
			return a, nil
		}
	}
	return nil, fmt.Errorf("no architecture %q", name)
}

// Weights hands an architecture's Build the checkpoint's tensors by name,
// keeping the first error (later calls then return nil).
type Weights struct {
	b   backend.Backend
	get func(name string, rows, cols int) (backend.Tensor, error)
	err error
}

// Matrix is the tensor name of shape [rows, cols] (a norm weight [1, d]).
func (w *Weights) Matrix(name string, rows, cols int) backend.Tensor {
	if w.err != nil {
		return nil
	}
	t, err := w.get(name, rows, cols)
	if err != nil {
		w.err = err
		return nil
	}
	return t
}

// Vector is the tensor name of n values on the host, float32 (biases, the
// per-head q/k norm weights: read by the forward's row-wise host steps).
func (w *Weights) Vector(name string, n int) []float32 {
	t := w.Matrix(name, 1, n)
	if t == nil {
		return nil
	}
	v := w.b.ToHost(t, nil)
	w.b.Free(t)
	return v
}

// Err is the first error.
func (w *Weights) Err() error { return w.err }

// ArchName is the architecture's name: Config.Arch, or "llada" where unset
// (a Config made in code).
func (c *Config) ArchName() string {
	if c == nil || c.Arch == "" {
		return "llada"
	}
	return c.Arch
}

// MoEConfig is a mixture-of-experts MLP: each row's router scores pick
// TopK of Experts expert MLPs (SiLU-gated, width Hidden), whose outputs
// are summed weighted by the scores.
type MoEConfig struct {
	Experts  int  // routed experts
	TopK     int  // experts per row
	Hidden   int  // each expert's MLP width
	NormTopK bool // softmax routing: renormalise the chosen experts' weights to sum to 1

	// Sigmoid routing (LLaDA 2.x): scores are sigmoid(logits), experts are
	// chosen by score plus the layer's expert bias (MoE.Bias), and the
	// chosen experts' scores, normalised to sum to 1 (TopK > 1), times
	// RoutedScaling, weight their outputs.
	Sigmoid       bool
	RoutedScaling float64
	// Group-limited choice: the experts form Groups equal groups, and only
	// the TopKGroups groups with the largest sums of their two best scores
	// are chosen from (Groups ≤ 1: no groups).
	Groups, TopKGroups int
	// SharedHidden is the width of a shared expert every row runs, added
	// to the routed experts' output (0: none).
	SharedHidden int
	// FirstDense is the number of leading layers with a dense MLP
	// (Config.MLPHiddenSize wide) instead of the experts.
	FirstDense int
}

// MoE is one layer's mixture of experts (MoEConfig).
type MoE struct {
	Router  backend.Tensor // [experts, d]
	Bias    []float32      // sigmoid routing's expert bias [experts]; nil: none
	Experts []Expert
	Shared  *Expert // the shared expert; nil: none
}

// Expert is one SiLU-gated MLP: down(silu(gate(x)) · up(x)).
type Expert struct {
	Gate, Up backend.Tensor // [hidden, d]
	Down     backend.Tensor // [d, hidden]
}

// claims reports whether modelType (case-insensitive) is one of types or
// architectures holds one of classes.
func claims(modelType string, architectures []string, types, classes []string) bool {
	if slices.ContainsFunc(types, func(t string) bool { return strings.EqualFold(t, modelType) }) {
		return true
	}
	for _, a := range architectures {
		if slices.Contains(classes, a) {
			return true
		}
	}
	return false
}

// hfDecoderConfig is the config.json of a Hugging Face decoder in the
// Llama/Qwen naming (Dream, LLaDA-MoE): the fields the architectures here
// read.
type hfDecoderConfig struct {
	ModelType          string   `json:"model_type"`
	Architectures      []string `json:"architectures"`
	HiddenSize         int      `json:"hidden_size"`
	NumHiddenLayers    int      `json:"num_hidden_layers"`
	NumAttentionHeads  int      `json:"num_attention_heads"`
	NumKeyValueHeads   int      `json:"num_key_value_heads"`
	HeadDim            int      `json:"head_dim"`
	IntermediateSize   int      `json:"intermediate_size"`
	VocabSize          int      `json:"vocab_size"`
	RopeTheta          float64  `json:"rope_theta"`
	RMSNormEps         float64  `json:"rms_norm_eps"`
	TieWordEmbeddings  bool     `json:"tie_word_embeddings"`
	MaxPositions       int      `json:"max_position_embeddings"`
	MaskTokenID        *int     `json:"mask_token_id"`
	EOSTokenID         any      `json:"eos_token_id"` // an id or a list of ids (the first is used)
	PadTokenID         *int     `json:"pad_token_id"`
	HiddenAct          string   `json:"hidden_act"`
	RopeScaling        any      `json:"rope_scaling"`
	AttentionBias      bool     `json:"attention_bias"`
	MLPBias            bool     `json:"mlp_bias"`
	PartialRotary      *float64 `json:"partial_rotary_factor"`
	BlockSize          int      `json:"block_size"`
	NumSharedExperts   int      `json:"num_shared_experts"`
	MoEIntermediate    int      `json:"moe_intermediate_size"`
	FirstKDense        int      `json:"first_k_dense_replace"`
	NGroup             int      `json:"n_group"`
	TopKGroup          int      `json:"topk_group"`
	RoutedScaling      *float64 `json:"routed_scaling_factor"`
	ScoreFunction      string   `json:"score_function"`
	UseQKNorm          *bool    `json:"use_qk_norm"`
	UseQKVBias         bool     `json:"use_qkv_bias"`
	UseBias            *bool    `json:"use_bias"`
	NormHead           bool     `json:"norm_head"`
	SlidingWindow      bool     `json:"use_sliding_window"`
	NumExperts         int      `json:"num_experts"`
	NumExpertsPerTok   int      `json:"num_experts_per_tok"`
	ExpertIntermediate int      `json:"expert_intermediate_size"`
	NormTopKProb       bool     `json:"norm_topk_prob"`
	QKLayerNorm        bool     `json:"qk_layernorm"`
}

// decoderConfig decodes raw as an hfDecoderConfig and fills the Config
// fields every such architecture shares, checking the fields it does not
// support. defaultTheta is the RoPE base where the config gives none,
// defaultMask the mask token's id (-1: config.json must give it).
func decoderConfig(raw []byte, arch string, defaultTheta float64, defaultMask int) (*hfDecoderConfig, *Config, error) {
	var h hfDecoderConfig
	if err := json.Unmarshal(raw, &h); err != nil {
		return nil, nil, fmt.Errorf("config.json is not valid JSON: %w", err)
	}
	for _, f := range []numericField{
		{name: "hidden_size", v: float64(h.HiddenSize), open: true},
		{name: "num_hidden_layers", v: float64(h.NumHiddenLayers), open: true},
		{name: "num_attention_heads", v: float64(h.NumAttentionHeads), open: true},
		{name: "num_key_value_heads", v: float64(h.NumKeyValueHeads), hint: "0 or absent: num_attention_heads"},
		{name: "vocab_size", v: float64(h.VocabSize), open: true},
		{name: "rope_theta", v: h.RopeTheta, hint: "0 or absent: the architecture's default"},
		{name: "rms_norm_eps", v: h.RMSNormEps, hint: "0 or absent: 1e-6"},
	} {
		if err := f.check(); err != nil {
			return nil, nil, fmt.Errorf("config.json: %w", err)
		}
	}
	if h.MaskTokenID == nil && defaultMask >= 0 {
		h.MaskTokenID = &defaultMask
	}
	if h.MaskTokenID == nil {
		return nil, nil, fmt.Errorf("config.json: %s needs mask_token_id (the id of the mask token the model was trained with)", arch)
	}
	if h.HeadDim != 0 && h.NumAttentionHeads > 0 && h.HeadDim*h.NumAttentionHeads != h.HiddenSize {
		return nil, nil, fmt.Errorf("config.json: head_dim %d × num_attention_heads %d ≠ hidden_size %d is not supported", h.HeadDim, h.NumAttentionHeads, h.HiddenSize)
	}
	if h.NormHead {
		return nil, nil, fmt.Errorf("config.json: norm_head true is not supported")
	}
	if a := strings.ToLower(h.HiddenAct); a != "" && a != "silu" {
		return nil, nil, fmt.Errorf("config.json: hidden_act %q is not supported (want \"silu\")", h.HiddenAct)
	}
	if h.RopeScaling != nil {
		return nil, nil, fmt.Errorf("config.json: rope_scaling %v is not supported (plain RoPE only)", h.RopeScaling)
	}
	if h.SlidingWindow {
		return nil, nil, fmt.Errorf("config.json: use_sliding_window true is not supported")
	}
	eos, err := firstID(h.EOSTokenID)
	if err != nil {
		return nil, nil, err
	}
	c := &Config{
		ModelType: h.ModelType, Architectures: h.Architectures,
		DModel: h.HiddenSize, NLayers: h.NumHiddenLayers, NHeads: h.NumAttentionHeads, NKVHeads: h.NumKeyValueHeads,
		MLPHiddenSize: h.IntermediateSize, VocabSize: h.VocabSize, RopeTheta: h.RopeTheta, RMSNormEps: h.RMSNormEps,
		MaskTokenID: *h.MaskTokenID, EOSTokenID: eos, PadTokenID: eos,
		MaxSequenceLength: h.MaxPositions, WeightTying: h.TieWordEmbeddings,
	}
	if h.PadTokenID != nil {
		c.PadTokenID = *h.PadTokenID
	}
	if c.NKVHeads == 0 {
		c.NKVHeads = c.NHeads
	}
	if c.RMSNormEps == 0 {
		c.RMSNormEps = 1e-6
	}
	if c.RopeTheta == 0 {
		c.RopeTheta = defaultTheta
	}
	return &h, c, nil
}

// firstID reads eos_token_id: a number, or a list whose first number is used.
func firstID(v any) (int, error) {
	switch x := v.(type) {
	case nil:
		return 0, fmt.Errorf("config.json: eos_token_id is missing")
	case float64:
		return int(x), nil
	case []any:
		if len(x) > 0 {
			if f, ok := x[0].(float64); ok {
				return int(f), nil
			}
		}
	}
	return 0, fmt.Errorf("config.json: eos_token_id %v is neither an id nor a list of ids", v)
}

// fullRotary refuses a partial_rotary_factor other than 1 (an
// architecture whose public code rotates every dimension of a head).
func (h *hfDecoderConfig) fullRotary(arch string) error {
	if h.PartialRotary != nil && *h.PartialRotary != 1 {
		return fmt.Errorf("config.json: partial_rotary_factor %g is not supported for %s", *h.PartialRotary, arch)
	}
	return nil
}

// validateDecoder checks c (the shared range checks, in Config's terms) and
// names config.json's fields where it can.
func validateDecoder(c *Config) error {
	if c.NHeads%c.NKVHeads != 0 {
		return fmt.Errorf("config.json: num_attention_heads %d is not a multiple of num_key_value_heads %d", c.NHeads, c.NKVHeads)
	}
	if c.DModel%c.NHeads != 0 {
		return fmt.Errorf("config.json: hidden_size %d is not a multiple of num_attention_heads %d", c.DModel, c.NHeads)
	}
	return c.Validate()
}

// hfLayout names a checkpoint's tensors outside its layers: the
// embedding, the final norm and the LM head, and the layers' prefix (a
// format of the layer's index).
type hfLayout struct {
	embed, layers, norm, head string
}

// build builds a network on this layout: the embedding [Embeddings, d],
// c.NLayers blocks made by layer from the layer's index and tensor prefix,
// the final norm and the head (the embedding itself with c.WeightTying).
func (l hfLayout) build(c *Config, b backend.Backend, w *Weights, layer func(i int, prefix string) Block) *Network {
	d, e := c.DModel, c.Embeddings()
	m := &Network{Config: c, Backend: b}
	m.Embed = w.Matrix(l.embed, e, d)
	if tm, ok := b.(backend.TableMarker); ok && m.Embed != nil && !c.WeightTying {
		tm.MarkTable(m.Embed)
	}
	// The head before the layers: a backend that lays a weight out at load
	// holds its file pages and its layout at once while it does, so the
	// process's peak is every layout made so far plus the weight in hand.
	// Last, the head (the largest matrix: LLaDA-8B's 1 GB in BF16) would
	// put that peak a head above what the model holds; first, the peak is
	// the last layer's matrix above it.
	if c.WeightTying {
		m.Head = m.Embed
	} else {
		m.Head = w.Matrix(l.head, e, d)
	}
	// Stop at the first missing or misshapen tensor: a layer count no
	// checkpoint holds must not allocate its blocks.
	for i := 0; i < c.NLayers && w.err == nil; i++ {
		m.Blocks = append(m.Blocks, layer(i, fmt.Sprintf(l.layers, i)))
	}
	m.Norm = w.Matrix(l.norm, 1, d)
	return m
}

// attnWeights names a block's norms and its separate attention products.
type attnWeights struct {
	attnNorm, q, k, v, out, ffNorm string
}

// block reads them into a Block: the norms [1, d], q and the output
// [d, d], k and v [kv_dim, d].
func (n attnWeights) block(c *Config, w *Weights) Block {
	d, kv := c.DModel, c.KVDim()
	return Block{
		AttnNorm: w.Matrix(n.attnNorm, 1, d),
		Q:        w.Matrix(n.q, d, d),
		K:        w.Matrix(n.k, kv, d),
		V:        w.Matrix(n.v, kv, d),
		AttnOut:  w.Matrix(n.out, d, d),
		FFNorm:   w.Matrix(n.ffNorm, 1, d),
	}
}

// qwenLayout is the Llama/Qwen tensor layout of Dream and LLaDA-MoE.
var qwenLayout = hfLayout{embed: "model.embed_tokens.weight", layers: "model.layers.%d.", norm: "model.norm.weight", head: "lm_head.weight"}

// buildDecoder builds a network in the Llama/Qwen tensor layout (Dream,
// LLaDA-MoE): model.embed_tokens, model.layers.N.{input_layernorm,
// self_attn.{q,k,v,o}_proj (q/k/v biases with c.QKVBias; self_attn.q_norm,
// k_norm [head_dim] with c.QKNorm), post_attention_layernorm}, model.norm
// and lm_head (the embedding with c.WeightTying). mlp fills each layer's
// MLP from its prefix "model.layers.N.".
func buildDecoder(c *Config, b backend.Backend, w *Weights, mlp func(blk *Block, prefix string)) *Network {
	d, kv, hd := c.DModel, c.KVDim(), c.HeadDim()
	return qwenLayout.build(c, b, w, func(_ int, p string) Block {
		a := p + "self_attn."
		blk := attnWeights{
			attnNorm: p + "input_layernorm.weight",
			q:        a + "q_proj.weight", k: a + "k_proj.weight", v: a + "v_proj.weight", out: a + "o_proj.weight",
			ffNorm: p + "post_attention_layernorm.weight",
		}.block(c, w)
		if c.QKVBias {
			blk.QBias = w.Vector(a+"q_proj.bias", d)
			blk.KBias = w.Vector(a+"k_proj.bias", kv)
			blk.VBias = w.Vector(a+"v_proj.bias", kv)
		}
		if c.QKNorm {
			blk.QNorm = w.Vector(a+"q_norm.weight", hd)
			blk.KNorm = w.Vector(a+"k_norm.weight", hd)
		}
		mlp(&blk, p)
		return blk
	})
}
