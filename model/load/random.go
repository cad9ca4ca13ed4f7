package load

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"

	"github.com/dlmcache/dlmcache/internal/atomicfile"
	"github.com/dlmcache/dlmcache/model"
	"github.com/dlmcache/dlmcache/model/safetensors"
	"github.com/dlmcache/dlmcache/model/tokenizer"
	"github.com/dlmcache/dlmcache/regime"
)

// SpecialTokens are LLaDA's special tokens, in the order the bundled
// tokenizers give them ids.
var SpecialTokens = []string{"<|startoftext|>", "<|endoftext|>", "<|mdm_mask|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"}

// WriteRandom writes a random-weights checkpoint of shape c into dir in the
// Hugging Face layout of c's architecture (c.Arch: LLaDA's, Dream's or
// LLaDA-MoE's tensor names, and config.json in that architecture's released
// keys, so Load reads it through the architecture's own parser):
// config.json, model.safetensors (F32 or BF16), a byte-level tokenizer with
// LLaDA's special tokens (whose mask and end-of-text ids config.json
// names), and a dlmcache.json card marking the weights as random.
// Benchmarks and backend checks use it; it is never a stand-in for a
// trained model.
func WriteRandom(dir string, c model.Config, seed uint64, dtype safetensors.DType) error {
	return WriteRandomProgress(dir, c, seed, dtype, nil)
}

// randomTensor is one tensor of a random checkpoint: its name, its shape
// (rows 1: a vector) and its values' draw, scale·N(0,1) or, with one,
// 1 + 0.1·N(0,1) (norm weights).
type randomTensor struct {
	name       string
	rows, cols int
	scale      float64
	one        bool
}

// randomLayout returns the tensors of c's random checkpoint in file order
// and its config.json, in the layout of c's architecture. c's mask, EOS
// and pad ids are those config.json gives.
func randomLayout(c *model.Config, dtype safetensors.DType) ([]randomTensor, []byte, error) {
	d, kv, hid, e := c.DModel, c.KVDim(), c.MLPHiddenSize, c.Embeddings()
	in := 1 / math.Sqrt(float64(d))
	var ts []randomTensor
	add := func(name string, rows, cols int, scale float64) {
		ts = append(ts, randomTensor{name: name, rows: rows, cols: cols, scale: scale})
	}
	norm := func(name string, n int) { ts = append(ts, randomTensor{name: name, rows: 1, cols: n, one: true}) }
	switch c.ArchName() {
	case "llada":
		if c.QKVBias || c.QKNorm || c.MoE != nil {
			return nil, nil, fmt.Errorf("random checkpoint: LLaDA's layout has no q/k/v biases, q/k norms or experts")
		}
		c.ModelType, c.Architectures = "llada", []string{"LLaDAModelLM"}
		c.LayerNormType, c.ActivationType = "rms", "silu"
		const pre = "model.transformer."
		add(pre+"wte.weight", e, d, 1)
		for i := 0; i < c.NLayers; i++ {
			p := fmt.Sprintf("%sblocks.%d.", pre, i)
			norm(p+"attn_norm.weight", d)
			add(p+"q_proj.weight", d, d, in)
			add(p+"k_proj.weight", kv, d, in)
			add(p+"v_proj.weight", kv, d, in)
			add(p+"attn_out.weight", d, d, in)
			norm(p+"ff_norm.weight", d)
			add(p+"ff_proj.weight", hid, d, in)
			add(p+"up_proj.weight", hid, d, in)
			add(p+"ff_out.weight", d, hid, 1/math.Sqrt(float64(hid)))
		}
		norm(pre+"ln_f.weight", d)
		if !c.WeightTying {
			add(pre+"ff_out.weight", e, d, in)
		}
		cfg, _ := json.MarshalIndent(c, "", "  ")
		return ts, cfg, nil
	case "dream", "llada-moe":
	default:
		return nil, nil, fmt.Errorf("random checkpoint: architecture %q is not one WriteRandom writes (llada, dream, llada-moe)", c.ArchName())
	}
	dream := c.Arch == "dream"
	if dream && (!c.QKVBias || c.QKNorm || c.MoE != nil) {
		return nil, nil, fmt.Errorf("random checkpoint: Dream's layout has q/k/v biases and a dense MLP (no q/k norms, no experts)")
	}
	if !dream && (c.QKVBias || c.MoE == nil || c.MoE.SharedHidden > 0 || c.MoE.Sigmoid || c.MoE.FirstDense > 0 || c.MoE.Groups > 1) {
		return nil, nil, fmt.Errorf("random checkpoint: LLaDA-MoE's layout has softmax-routed experts in every layer, no shared expert and no q/k/v biases")
	}
	// The Llama/Qwen names model's buildDecoder reads (model/arch.go).
	hd := c.HeadDim()
	add("model.embed_tokens.weight", e, d, 1)
	for i := 0; i < c.NLayers; i++ {
		p := fmt.Sprintf("model.layers.%d.", i)
		a := p + "self_attn."
		norm(p+"input_layernorm.weight", d)
		add(a+"q_proj.weight", d, d, in)
		add(a+"k_proj.weight", kv, d, in)
		add(a+"v_proj.weight", kv, d, in)
		if dream {
			add(a+"q_proj.bias", 1, d, 0.1)
			add(a+"k_proj.bias", 1, kv, 0.1)
			add(a+"v_proj.bias", 1, kv, 0.1)
		}
		if c.QKNorm {
			norm(a+"q_norm.weight", hd)
			norm(a+"k_norm.weight", hd)
		}
		add(a+"o_proj.weight", d, d, in)
		norm(p+"post_attention_layernorm.weight", d)
		if dream {
			add(p+"mlp.gate_proj.weight", hid, d, in)
			add(p+"mlp.up_proj.weight", hid, d, in)
			add(p+"mlp.down_proj.weight", d, hid, 1/math.Sqrt(float64(hid)))
			continue
		}
		mc := c.MoE
		add(p+"mlp.gate.weight", mc.Experts, d, in)
		for j := 0; j < mc.Experts; j++ {
			x := fmt.Sprintf("%smlp.experts.%d.", p, j)
			add(x+"gate_proj.weight", mc.Hidden, d, in)
			add(x+"up_proj.weight", mc.Hidden, d, in)
			add(x+"down_proj.weight", d, mc.Hidden, 1/math.Sqrt(float64(mc.Hidden)))
		}
	}
	norm("model.norm.weight", d)
	if !c.WeightTying {
		add("lm_head.weight", e, d, in)
	}
	return ts, hfRandomConfig(c, dream, dtype), nil
}

// hfRandomConfig is the config.json of a random Dream (dream) or
// LLaDA-MoE checkpoint of c, in the keys the published models' files use.
func hfRandomConfig(c *model.Config, dream bool, dtype safetensors.DType) []byte {
	torchDType := map[safetensors.DType]string{safetensors.BF16: "bfloat16", safetensors.F32: "float32"}[dtype]
	shape := hfShape{c.NLayers, c.NHeads, c.NKVHeads, c.VocabSize, "silu", c.MaxSequenceLength, c.RMSNormEps, c.RopeTheta, nil}
	var cfg any
	if dream {
		// Dream-v0-Instruct-7B's config.json keys.
		cfg = struct {
			Architectures    []string `json:"architectures"`
			ModelType        string   `json:"model_type"`
			HiddenSize       int      `json:"hidden_size"`
			IntermediateSize int      `json:"intermediate_size"`
			hfShape
			TieWordEmbeddings bool    `json:"tie_word_embeddings"`
			UseSlidingWindow  bool    `json:"use_sliding_window"`
			SlidingWindow     any     `json:"sliding_window"`
			MaxWindowLayers   int     `json:"max_window_layers"`
			AttentionDropout  float64 `json:"attention_dropout"`
			InitializerRange  float64 `json:"initializer_range"`
			MaskTokenID       int     `json:"mask_token_id"`
			EOSTokenID        int     `json:"eos_token_id"`
			PadTokenID        int     `json:"pad_token_id"`
			BOSTokenID        int     `json:"bos_token_id"`
			TorchDType        string  `json:"torch_dtype"`
			UseCache          bool    `json:"use_cache"`
		}{[]string{"DreamModel"}, "Dream", c.DModel, c.MLPHiddenSize, shape, c.WeightTying, false, nil, c.NLayers, 0, 0.02,
			c.MaskTokenID, c.EOSTokenID, c.PadTokenID, c.EOSTokenID, torchDType, false}
	} else {
		// LLaDA-MoE-7B-A1B's config.json keys (no intermediate_size: the
		// MLPs are the experts; dense_intermediate_size is unused).
		mc := c.MoE
		cfg = struct {
			Architectures []string `json:"architectures"`
			ModelType     string   `json:"model_type"`
			HiddenSize    int      `json:"hidden_size"`
			hfShape
			PartialRotaryFactor float64 `json:"partial_rotary_factor"`
			TieWordEmbeddings   bool    `json:"tie_word_embeddings"`
			AttentionBias       bool    `json:"attention_bias"`
			AttentionDropout    float64 `json:"attention_dropout"`
			ClipQKV             any     `json:"clip_qkv"`
			DenseIntermediate   int     `json:"dense_intermediate_size"`
			ExpertIntermediate  int     `json:"expert_intermediate_size"`
			NumExperts          int     `json:"num_experts"`
			NumExpertsPerTok    int     `json:"num_experts_per_tok"`
			NormTopKProb        bool    `json:"norm_topk_prob"`
			QKLayerNorm         bool    `json:"qk_layernorm"`
			RouterAuxLossCoef   float64 `json:"router_aux_loss_coef"`
			InitializerRange    float64 `json:"initializer_range"`
			MaskTokenID         int     `json:"mask_token_id"`
			EOSTokenID          int     `json:"eos_token_id"`
			PadTokenID          int     `json:"pad_token_id"`
			TorchDType          string  `json:"torch_dtype"`
			UseCache            bool    `json:"use_cache"`
		}{[]string{"LLaDAMoEModelLM"}, "lladamoe", c.DModel, shape, 1, c.WeightTying, false, 0, nil, c.MLPHiddenSize, mc.Hidden, mc.Experts, mc.TopK,
			mc.NormTopK, c.QKNorm, 0.01, 0.02, c.MaskTokenID, c.EOSTokenID, c.PadTokenID, torchDType, false}
	}
	raw, _ := json.MarshalIndent(cfg, "", "  ")
	return raw
}

// hfShape is the part of a Llama/Qwen-named config.json that randomLayout
// writes alike for Dream and LLaDA-MoE (embedded, its keys stand where it
// does).
type hfShape struct {
	NumHiddenLayers   int     `json:"num_hidden_layers"`
	NumAttentionHeads int     `json:"num_attention_heads"`
	NumKeyValueHeads  int     `json:"num_key_value_heads"`
	VocabSize         int     `json:"vocab_size"`
	HiddenAct         string  `json:"hidden_act"`
	MaxPositions      int     `json:"max_position_embeddings"`
	RMSNormEps        float64 `json:"rms_norm_eps"`
	RopeTheta         float64 `json:"rope_theta"`
	RopeScaling       any     `json:"rope_scaling"`
}

// RandomWeightBytes is the size of the weights WriteRandom writes for c in
// dtype (the tensors' data, without the file's header).
func RandomWeightBytes(c model.Config, dtype safetensors.DType) (int64, error) {
	ts, _, err := randomLayout(&c, dtype)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, t := range ts {
		n += int64(t.rows) * int64(t.cols) * int64(dtype.Size())
	}
	return n, nil
}

// WriteRandomProgress is WriteRandom, calling progress (when not nil) as
// each tensor is made, with the bytes of weights made so far and in all. The
// weights are made and written one tensor at a time (the largest is the
// embedding, vocabulary × d), never the whole checkpoint in memory, and
// model.safetensors appears, atomically, only once complete.
func WriteRandomProgress(dir string, c model.Config, seed uint64, dtype safetensors.DType, progress func(written, total int64)) error {
	if err := c.Validate(); err != nil {
		return err
	}
	tok, err := tokenizer.Train(nil, 256+len(SpecialTokens), SpecialTokens)
	if err != nil {
		return err
	}
	if c.Embeddings() < tok.VocabSize() {
		return fmt.Errorf("random checkpoint: embedding size %d < byte tokenizer's %d tokens", c.Embeddings(), tok.VocabSize())
	}
	if id, ok := tok.TokenID("<|mdm_mask|>"); ok {
		c.MaskTokenID = int(id)
	}
	if id, ok := tok.TokenID("<|endoftext|>"); ok {
		c.EOSTokenID, c.PadTokenID = int(id), int(id)
	}
	specs, cfg, err := randomLayout(&c, dtype)
	if err != nil {
		return err
	}
	// config.json must read back, through its architecture's parser, as
	// the shape whose tensors are written.
	back, err := model.ParseConfig(cfg)
	if err != nil {
		return fmt.Errorf("random checkpoint: its config.json does not parse: %w", err)
	}
	if err := sameShape(back, &c); err != nil {
		return fmt.Errorf("random checkpoint: its config.json reads back as another shape: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := tok.Save(dir); err != nil {
		return err
	}
	if err := atomicfile.WriteFile(filepath.Join(dir, "config.json"), append(cfg, '\n'), 0o644); err != nil {
		return err
	}
	card, _ := json.MarshalIndent(Card{Regime: regime.Regime{GenLength: 32, Steps: 16}, RandomWeights: true}, "", "  ")
	if err := atomicfile.WriteFile(filepath.Join(dir, CardFile), append(card, '\n'), 0o644); err != nil {
		return err
	}

	rng := rand.New(rand.NewPCG(seed, seed+1))
	// The tensors in file order; gen makes tensor i's values when it is
	// written, drawing from rng in that order.
	ts := make([]safetensors.WriteTensor, len(specs))
	var total int64
	for i, sp := range specs {
		shape := []int{sp.rows, sp.cols}
		if sp.rows == 1 {
			shape = []int{sp.cols}
		}
		ts[i] = safetensors.WriteTensor{Name: sp.name, DType: dtype, Shape: shape}
		total += int64(sp.rows * sp.cols * dtype.Size())
	}
	var written int64
	gen := func(i int) ([]byte, error) {
		sp := specs[i]
		v := make([]float32, sp.rows*sp.cols)
		for j := range v {
			if sp.one {
				v[j] = float32(1 + 0.1*rng.NormFloat64())
			} else {
				v[j] = float32(sp.scale * rng.NormFloat64())
			}
		}
		var raw []byte
		if dtype == safetensors.BF16 {
			raw = safetensors.F32ToBF16(v)
		} else {
			raw = safetensors.F32ToBytes(v)
		}
		written += int64(len(raw))
		if progress != nil {
			progress(written, total)
		}
		return raw, nil
	}
	return safetensors.WriteFunc(filepath.Join(dir, "model.safetensors"), ts, map[string]string{"format": "pt", "generator": "dlmcache model.WriteRandom"}, gen)
}

// sameShape reports the first shape field in which got differs from want.
func sameShape(got, want *model.Config) error {
	type field struct {
		name      string
		got, want any
	}
	var moeGot, moeWant model.MoEConfig
	if got.MoE != nil {
		moeGot = *got.MoE
	}
	if want.MoE != nil {
		moeWant = *want.MoE
	}
	for _, f := range []field{
		{"architecture", got.ArchName(), want.ArchName()},
		{"d_model", got.DModel, want.DModel}, {"layers", got.NLayers, want.NLayers},
		{"heads", got.NHeads, want.NHeads}, {"kv heads", got.NKVHeads, want.NKVHeads},
		{"embeddings", got.Embeddings(), want.Embeddings()}, {"vocabulary", got.VocabSize, want.VocabSize},
		{"RoPE theta", got.RopeTheta, want.RopeTheta}, {"RMSNorm eps", got.RMSNormEps, want.RMSNormEps},
		{"q/k/v biases", got.QKVBias, want.QKVBias}, {"q/k norms", got.QKNorm, want.QKNorm},
		{"weight tying", got.WeightTying, want.WeightTying}, {"mask id", got.MaskTokenID, want.MaskTokenID},
		{"experts", moeGot, moeWant},
	} {
		if f.got != f.want {
			return fmt.Errorf("%s %v, want %v", f.name, f.got, f.want)
		}
	}
	if want.MoE == nil && got.MLPHiddenSize != want.MLPHiddenSize {
		return fmt.Errorf("MLP width %d, want %d", got.MLPHiddenSize, want.MLPHiddenSize)
	}
	return nil
}
