package load

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/dlmcache/dlmcache/model"
	"github.com/dlmcache/dlmcache/model/gguf"
)

// LLaDA in GGUF, as llama.cpp's converter (convert_hf_to_gguf.py,
// LLaDAModel) writes it: architecture "llada", llama.cpp's tensor names, and
// the query and key weights permuted for ggml's RoPE (see ggufPermute).

// ArchLLaDA is general.architecture of a LLaDA GGUF.
const ArchLLaDA = "llada"

// unsupportedArchs are llama.cpp's other diffusion architectures: their
// files are recognised, and refused with a clear error, until the model
// package runs them.
var unsupportedArchs = map[string]string{
	"dream":     "Dream (Qwen2-based, shifted logits)",
	"llada-moe": "LLaDA-MoE (mixture of experts)",
}

// Metadata keys (llama.cpp's names; {arch} is replaced by the architecture).
const (
	keyArch          = "general.architecture"
	keyName          = "general.name"
	keyType          = "general.type"
	keyFileType      = "general.file_type"
	keyQuantVersion  = "general.quantization_version"
	keyBlockCount    = "{arch}.block_count"
	keyContextLength = "{arch}.context_length"
	keyEmbedding     = "{arch}.embedding_length"
	keyFeedForward   = "{arch}.feed_forward_length"
	keyHeads         = "{arch}.attention.head_count"
	keyHeadsKV       = "{arch}.attention.head_count_kv"
	keyRopeBase      = "{arch}.rope.freq_base"
	keyRMSEps        = "{arch}.attention.layer_norm_rms_epsilon"
	keyVocabSize     = "{arch}.vocab_size"
	keyRopeDims      = "{arch}.rope.dimension_count"
	keyCausal        = "{arch}.attention.causal"
	keyRopeScaling   = "{arch}.rope.scaling.type"
	keyShiftLogits   = "diffusion.shift_logits"
	// keyCard carries dlmcache.json (generation defaults) in files that
	// dlmcache convert writes; llama.cpp ignores it.
	keyCard = "dlmcache.card"
)

func archKey(k, arch string) string { return strings.ReplaceAll(k, "{arch}", arch) }

// hfToGGUFBlock maps a LLaDA block tensor's Hugging Face name (after
// "blocks.N.") to llama.cpp's (after "blk.N."), as gguf-py's
// tensor_mapping.py does for LLaDA.
var hfToGGUFBlock = map[string]string{
	"attn_norm.weight": "attn_norm.weight",
	"q_proj.weight":    "attn_q.weight",
	"k_proj.weight":    "attn_k.weight",
	"v_proj.weight":    "attn_v.weight",
	"attn_out.weight":  "attn_output.weight",
	"ff_norm.weight":   "ffn_norm.weight",
	"ff_proj.weight":   "ffn_gate.weight",
	"up_proj.weight":   "ffn_up.weight",
	"ff_out.weight":    "ffn_down.weight",
}

var hfToGGUFTop = map[string]string{
	"wte.weight":    "token_embd.weight",
	"ln_f.weight":   "output_norm.weight",
	"ff_out.weight": "output.weight",
}

// ggufTensorName is llama.cpp's name for a LLaDA tensor's Hugging Face name.
func ggufTensorName(hf string) (string, error) {
	rest, ok := strings.CutPrefix(hf, model.LLaDAPrefix)
	if ok {
		if g, ok := hfToGGUFTop[rest]; ok {
			return g, nil
		}
		if r, ok := strings.CutPrefix(rest, "blocks."); ok {
			n, tail, _ := strings.Cut(r, ".")
			if _, err := strconv.Atoi(n); err == nil {
				if g, ok := hfToGGUFBlock[tail]; ok {
					return "blk." + n + "." + g, nil
				}
			}
		}
	}
	return "", fmt.Errorf("tensor %q has no LLaDA GGUF name", hf)
}

// hfTensorName inverts ggufTensorName.
func hfTensorName(g string) (string, error) {
	for h, gg := range hfToGGUFTop {
		if gg == g {
			return model.LLaDAPrefix + h, nil
		}
	}
	if r, ok := strings.CutPrefix(g, "blk."); ok {
		n, tail, _ := strings.Cut(r, ".")
		if _, err := strconv.Atoi(n); err == nil {
			for h, gg := range hfToGGUFBlock {
				if gg == tail {
					return model.LLaDAPrefix + "blocks." + n + "." + h, nil
				}
			}
		}
	}
	return "", fmt.Errorf("tensor %q is not a LLaDA tensor", g)
}

// permutedHeads reports for a Hugging Face tensor name how many heads its
// rows are permuted over in GGUF (0: not permuted): llama.cpp's converter
// reorders the rows of q_proj (n_heads) and k_proj (n_kv_heads).
func permutedHeads(hf string, c *model.Config) int {
	switch {
	case strings.HasSuffix(hf, ".q_proj.weight"):
		return c.NHeads
	case strings.HasSuffix(hf, ".k_proj.weight"):
		return c.NKVHeads
	}
	return 0
}

// ggufRowOrder is the order in which llama.cpp's converter stores the
// rows of LLaDA's q and k (rows rows of nHeads heads of head_dim rows
// each): stored row s is Hugging Face's row perm[s]. Within a head,
// Hugging Face's rotate-half order (row t·hd/2 + j holds element j of half
// t) becomes ggml's interleaved pairs (row 2j + t), so that ggml's RoPE on
// adjacent pairs computes what LLaDA's rotate-half RoPE computes.
func ggufRowOrder(rows, nHeads int) ([]int32, error) {
	if nHeads <= 0 || rows%nHeads != 0 || (rows/nHeads)%2 != 0 {
		return nil, fmt.Errorf("cannot permute %d rows over %d heads", rows, nHeads)
	}
	hd := rows / nHeads
	perm := make([]int32, rows)
	for h := 0; h < nHeads; h++ {
		for j := 0; j < hd/2; j++ {
			for t := 0; t < 2; t++ {
				perm[h*hd+2*j+t] = int32(h*hd + t*(hd/2) + j)
			}
		}
	}
	return perm, nil
}

// ggufPermute reorders the rows of a weight (rows of rowBytes bytes) as
// ggufRowOrder says: into GGUF's order when toGGUF, else back into
// Hugging Face's. Rows are moved whole, so a quantized row (Q8_0) moves
// losslessly.
func ggufPermute(data []byte, rows, rowBytes, nHeads int, toGGUF bool) ([]byte, error) {
	perm, err := ggufRowOrder(rows, nHeads)
	if err != nil {
		return nil, err
	}
	if len(data) != rows*rowBytes {
		return nil, fmt.Errorf("permute: %d bytes for %d rows of %d", len(data), rows, rowBytes)
	}
	out := make([]byte, len(data))
	for g, f := range perm {
		src, dst := g, int(f)
		if toGGUF {
			src, dst = dst, src
		}
		copy(out[dst*rowBytes:(dst+1)*rowBytes], data[src*rowBytes:(src+1)*rowBytes])
	}
	return out, nil
}

// ggufArch checks general.architecture.
func ggufArch(f *gguf.File) (string, error) {
	v, ok := f.Get(keyArch)
	if !ok {
		return "", fmt.Errorf("no %s", keyArch)
	}
	arch, ok := v.Str()
	if !ok {
		return "", fmt.Errorf("%s is %s, want a string", keyArch, v.Type)
	}
	if arch == ArchLLaDA {
		return arch, nil
	}
	if what, ok := unsupportedArchs[arch]; ok {
		return "", fmt.Errorf("architecture %q — %s — is one of llama.cpp's diffusion models, but dlmcache's model package does not run it yet (supported: %s)", arch, what, ArchLLaDA)
	}
	return "", fmt.Errorf("architecture %q is not a diffusion language model dlmcache runs (supported: %s)", arch, ArchLLaDA)
}

// ggufConfig builds a LLaDA Config from a GGUF's metadata and tensors.
// ggufKeys reads a GGUF file's metadata keys of architecture arch.
type ggufKeys struct {
	f    *gguf.File
	arch string
}

// int is key k (arch-qualified) as a non-negative int: def when absent,
// unless required.
func (g ggufKeys) int(k string, required bool, def int) (int, error) {
	k = archKey(k, g.arch)
	v, ok := g.f.Get(k)
	if !ok {
		if required {
			return 0, fmt.Errorf("no %s", k)
		}
		return def, nil
	}
	i, ok := v.Int()
	if !ok || i < 0 || i > 1<<31 {
		return 0, fmt.Errorf("%s is %s %v, want a non-negative integer", k, v.Type, v)
	}
	return int(i), nil
}

// float is key k (arch-qualified) as a float, def when absent.
func (g ggufKeys) float(k string, def float64) (float64, error) {
	k = archKey(k, g.arch)
	v, ok := g.f.Get(k)
	if !ok {
		return def, nil
	}
	x, ok := v.Float()
	if !ok {
		return 0, fmt.Errorf("%s is %s %v, want a float", k, v.Type, v)
	}
	if v.Type == gguf.TypeFloat32 {
		// The shortest decimal that rounds to the float32, as
		// config.json would have written it (1e-05, not 9.99…e-06).
		x, _ = strconv.ParseFloat(strconv.FormatFloat(x, 'g', -1, 32), 64)
	}
	return x, nil
}

// bool is key k (as given: not arch-qualified) as a bool, false when
// absent.
func (g ggufKeys) bool(k string) (bool, error) {
	v, ok := g.f.Get(k)
	if !ok {
		return false, nil
	}
	b, ok := v.Bool()
	if !ok {
		return false, fmt.Errorf("%s is %s, want a bool", k, v.Type)
	}
	return b, nil
}

func ggufConfig(f *gguf.File, arch string, vocab *gguf.Vocab) (*model.Config, error) {
	keys := ggufKeys{f, arch}
	intKey, floatKey, boolKey := keys.int, keys.float, keys.bool
	c := &model.Config{ModelType: "llada", Architectures: []string{"LLaDAModelLM"}, LayerNormType: "rms", ActivationType: "silu"}
	if err := c.SetArchitecture("llada"); err != nil {
		return nil, err
	}
	var err error
	ints := []struct {
		key      string
		required bool
		def      int
		dst      *int
	}{
		{keyBlockCount, true, 0, &c.NLayers},
		{keyEmbedding, true, 0, &c.DModel},
		{keyFeedForward, true, 0, &c.MLPHiddenSize},
		{keyHeads, true, 0, &c.NHeads},
		{keyHeadsKV, false, 0, &c.NKVHeads},
		{keyContextLength, false, 4096, &c.MaxSequenceLength},
		{keyVocabSize, false, len(vocab.Tokens), &c.VocabSize},
	}
	for _, k := range ints {
		if *k.dst, err = intKey(k.key, k.required, k.def); err != nil {
			return nil, err
		}
	}
	if c.NKVHeads == 0 {
		c.NKVHeads = c.NHeads
	}
	if c.RopeTheta, err = floatKey(keyRopeBase, 10000); err != nil {
		return nil, err
	}
	if c.RMSNormEps, err = floatKey(keyRMSEps, 0); err != nil {
		return nil, err
	}
	if c.RMSNormEps == 0 {
		return nil, fmt.Errorf("no %s", archKey(keyRMSEps, arch))
	}
	if causal, err := boolKey(archKey(keyCausal, arch)); err != nil {
		return nil, err
	} else if causal {
		return nil, fmt.Errorf("%s is true: causal attention is not supported (a diffusion model attends bidirectionally)", archKey(keyCausal, arch))
	}
	// diffusion.shift_logits: position i's logits come from row i-1
	// (Dream's convention), which the forward does as Config.ShiftLogits.
	if c.ShiftLogits, err = boolKey(keyShiftLogits); err != nil {
		return nil, err
	}
	if v, ok := f.Get(archKey(keyRopeScaling, arch)); ok {
		if s, _ := v.Str(); s != "none" && s != "" {
			return nil, fmt.Errorf("%s %v: RoPE scaling is not supported", archKey(keyRopeScaling, arch), v)
		}
	}
	if c.NHeads > 0 && c.DModel%c.NHeads == 0 {
		if rd, err := intKey(keyRopeDims, false, c.HeadDim()); err != nil {
			return nil, err
		} else if rd != c.HeadDim() {
			return nil, fmt.Errorf("%s %d: partial RoPE is not supported (head dim %d)", archKey(keyRopeDims, arch), rd, c.HeadDim())
		}
	}
	emb, ok := f.Tensor("token_embd.weight")
	if !ok {
		return nil, fmt.Errorf("no tensor token_embd.weight")
	}
	if len(emb.Shape) != 2 {
		return nil, fmt.Errorf("token_embd.weight has shape %v, want 2 dimensions", emb.Shape)
	}
	c.EmbeddingSize = emb.Shape[1]
	if c.VocabSize > c.EmbeddingSize {
		c.VocabSize = c.EmbeddingSize
	}
	_, hasOutput := f.Tensor("output.weight")
	c.WeightTying = !hasOutput
	if vocab.Mask < 0 {
		return nil, fmt.Errorf("no %s: a diffusion model needs its mask token", gguf.KeyTokMask)
	}
	c.MaskTokenID = vocab.Mask
	c.EOSTokenID = max(vocab.EOS, 0)
	c.PadTokenID = c.EOSTokenID
	if vocab.Pad >= 0 {
		c.PadTokenID = vocab.Pad
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}
