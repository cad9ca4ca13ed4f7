package model

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"

	"github.com/dlmcache/dlmcache/internal/atomicfile"
	"github.com/dlmcache/dlmcache/model/safetensors"
	"github.com/dlmcache/dlmcache/model/tokenizer"
)

// SpecialTokens are LLaDA's special tokens, in the order the bundled
// tokenizers give them ids.
var SpecialTokens = []string{"<|startoftext|>", "<|endoftext|>", "<|mdm_mask|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"}

// WriteRandom writes a random-weights checkpoint of shape c in LLaDA's
// Hugging Face layout into dir: config.json, model.safetensors (F32 or
// BF16), a byte-level tokenizer with LLaDA's special tokens, and a
// dlmcache.json card marking the weights as random. Benchmarks and backend
// checks use it; it is never a stand-in for a trained model.
func WriteRandom(dir string, c Config, seed uint64, dtype safetensors.DType) error {
	return WriteRandomProgress(dir, c, seed, dtype, nil)
}

// WriteRandomProgress is WriteRandom, calling progress (when not nil) as
// each tensor is made, with the bytes of weights made so far and in all. The
// weights are made and written one tensor at a time (the largest is the
// embedding, vocabulary × d), never the whole checkpoint in memory, and
// model.safetensors appears, atomically, only once complete.
func WriteRandomProgress(dir string, c Config, seed uint64, dtype safetensors.DType, progress func(written, total int64)) error {
	if err := c.Validate(); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
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
	c.ModelType, c.Architectures = "llada", []string{"LLaDAModelLM"}
	c.LayerNormType, c.ActivationType = "rms", "silu"
	if err := tok.Save(dir); err != nil {
		return err
	}
	cfg, _ := json.MarshalIndent(c, "", "  ")
	if err := atomicfile.WriteFile(filepath.Join(dir, "config.json"), append(cfg, '\n'), 0o644); err != nil {
		return err
	}
	card, _ := json.MarshalIndent(Card{GenLength: 32, Steps: 16, RandomWeights: true}, "", "  ")
	if err := atomicfile.WriteFile(filepath.Join(dir, CardFile), append(card, '\n'), 0o644); err != nil {
		return err
	}

	rng := rand.New(rand.NewPCG(seed, seed+1))
	d, kv, hid, e := c.DModel, c.KVDim(), c.MLPHiddenSize, c.Embeddings()
	// The tensors in file order; gen makes tensor i's values when it is
	// written, drawing from rng in that order.
	var ts []safetensors.WriteTensor
	type spec struct {
		n     int
		scale float64
		one   bool
	}
	var specs []spec
	var total int64
	add := func(name string, rows, cols int, scale float64, one bool) {
		shape := []int{rows, cols}
		if rows == 1 {
			shape = []int{cols}
		}
		ts = append(ts, safetensors.WriteTensor{Name: name, DType: dtype, Shape: shape})
		specs = append(specs, spec{rows * cols, scale, one})
		total += int64(rows * cols * dtype.Size())
	}
	in := 1 / math.Sqrt(float64(d))
	const pre = "model.transformer."
	add(pre+"wte.weight", e, d, 1, false)
	for i := 0; i < c.NLayers; i++ {
		p := fmt.Sprintf("%sblocks.%d.", pre, i)
		add(p+"attn_norm.weight", 1, d, 0, true)
		add(p+"q_proj.weight", d, d, in, false)
		add(p+"k_proj.weight", kv, d, in, false)
		add(p+"v_proj.weight", kv, d, in, false)
		add(p+"attn_out.weight", d, d, in, false)
		add(p+"ff_norm.weight", 1, d, 0, true)
		add(p+"ff_proj.weight", hid, d, in, false)
		add(p+"up_proj.weight", hid, d, in, false)
		add(p+"ff_out.weight", d, hid, 1/math.Sqrt(float64(hid)), false)
	}
	add(pre+"ln_f.weight", 1, d, 0, true)
	if !c.WeightTying {
		add(pre+"ff_out.weight", e, d, in, false)
	}
	var written int64
	gen := func(i int) ([]byte, error) {
		sp := specs[i]
		v := make([]float32, sp.n)
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
