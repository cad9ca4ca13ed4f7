package load

import (
	"fmt"
	"os"
	"strings"
	"unsafe"

	"github.com/dlmcache/dlmcache/model"
	"github.com/dlmcache/dlmcache/model/backend"
	"github.com/dlmcache/dlmcache/model/gguf"
	"github.com/dlmcache/dlmcache/model/tokenizer"
)

// IsGGUF reports whether path is a regular file that starts with GGUF's
// magic.
func IsGGUF(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return false
	}
	var b [4]byte
	if _, err := f.Read(b[:]); err != nil {
		return false
	}
	return string(b[:]) == "GGUF"
}

// LoadGGUF reads a LLaDA GGUF file (as llama.cpp's converter or dlmcache
// convert writes it) onto backend b: the config from its metadata, the
// tokenizer from tokenizer.ggml.* and tokenizer.chat_template, generation
// defaults from dlmcache.card when present (else DefaultCard).
//
// F32, F16 and BF16 tensors are handed to the backend straight from the
// memory mapping. The query and key weights' rows are stored in ggml's
// RoPE order (ggufRowOrder): a backend.RowPermuter (the CPU backend) puts
// them back in Hugging Face's order without a copy where they stay
// mapped; elsewhere the loader makes a reordered copy. Q8_0, Q4_0, Q4_1,
// Q5_0, Q5_1 and the K-quants Q3_K, Q4_K, Q5_K and Q6_K (llama-quantize's Q4_0
// keeps the output head Q6_K; its Q4_K_M and Q5_K_M files mix the last three,
// its Q3_K_S, Q3_K_M and Q3_K_L files Q3_K with them, IQ4_XS, whose
// super-blocks the K-quants' products take too, and IQ4_NL, its fallback,
// and where a row is no whole super-block of 256 fall back to Q5_0, Q5_1
// and Q8_0) stay quantized on
// a backend that keeps them (backend.QuantWeighter: the CPU backend, which
// decodes them inside its products), in the mapping; elsewhere (CUDA, and
// quantized vectors) they are dequantized to F32 at load, 4 bytes per
// weight. Other quantized types are refused by name.
func LoadGGUF(path string, b backend.Backend) (*Model, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			f.Close()
		}
	}()
	m, err := loadGGUF(f, b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	m.Dir = path
	ok = true
	return m, nil
}

func loadGGUF(f *gguf.File, b backend.Backend) (*Model, error) {
	arch, err := ggufArch(f)
	if err != nil {
		return nil, err
	}
	vocab, err := gguf.ReadVocab(f)
	if err != nil {
		return nil, err
	}
	cfg, err := ggufConfig(f, arch, vocab)
	if err != nil {
		return nil, err
	}
	card := DefaultCard
	if v, ok := f.Get(keyCard); ok {
		s, ok := v.Str()
		if !ok {
			return nil, fmt.Errorf("%s is %s, want a JSON string", keyCard, v.Type)
		}
		if card, err = parseCard([]byte(s), keyCard); err != nil {
			return nil, err
		}
	}
	m := &Model{Card: card, ggufFile: f, Fingerprint: f.Fingerprint()}
	tokJSON, cfgJSON, err := vocab.TokenizerJSON()
	if err != nil {
		return nil, err
	}
	if m.Tokenizer, err = tokenizer.Parse(tokJSON, cfgJSON, "GGUF tokenizer metadata"); err != nil {
		return nil, err
	}
	if v := m.Tokenizer.VocabSize(); v > cfg.Embeddings() {
		return nil, fmt.Errorf("the tokenizer has %d tokens but token_embd.weight has %d rows", v, cfg.Embeddings())
	}
	if n := len(f.Tensors); cfg.NLayers > n {
		return nil, fmt.Errorf("%s %d, but the file holds %d tensors (each layer has several)", strings.ReplaceAll(keyBlockCount, "{arch}", arch), cfg.NLayers, n)
	}
	used := map[string]bool{}
	release := m.release(f.Release)
	m.Network, err = model.BuildLLaDA(cfg, b, func(hf string, rows, cols int) (backend.Tensor, error) {
		name, err := ggufTensorName(hf)
		if err != nil {
			return nil, err
		}
		used[name] = true
		if qw, ok := b.(backend.QuantWeighter); ok && rows > 1 {
			if ti, ok := f.Tensor(name); ok && keptQuant(ti.Type) {
				return ggufMatrix(f, b, ti, name, rows, cols, permutedHeads(hf, cfg), func(data []byte) (backend.Tensor, error) {
					t, err := qw.WeightQuant(backend.QuantType(ti.Type), rows, cols, data)
					if err != nil {
						return nil, fmt.Errorf("tensor %s: %w", name, err)
					}
					releaseCopied(t, data, release)
					return t, nil
				})
			}
		}
		ti, ok := f.Tensor(name)
		if !ok {
			return nil, fmt.Errorf("tensor %s not found", name)
		}
		return ggufMatrix(f, b, ti, name, rows, cols, permutedHeads(hf, cfg), func(data []byte) (backend.Tensor, error) {
			dt, data, err := ggufWeight(ti, name, rows, cols, data)
			if err != nil {
				return nil, err
			}
			t, err := b.Weight(dt, rows, cols, data)
			if err != nil {
				return nil, fmt.Errorf("tensor %s: %w", name, err)
			}
			releaseCopied(t, data, release)
			return t, nil
		})
	})
	if err != nil {
		return nil, err
	}
	for _, t := range f.Tensors {
		if !used[t.Name] && t.Name != "rope_freqs.weight" {
			return nil, fmt.Errorf("the file has tensor %s, which the LLaDA metadata (block_count %d) does not account for", t.Name, cfg.NLayers)
		}
	}
	if _, ok := f.Tensor("rope_freqs.weight"); ok {
		return nil, fmt.Errorf("tensor rope_freqs.weight (scaled RoPE frequencies) is not supported")
	}
	return m, nil
}

// keptQuant reports whether a matrix of type t goes to a
// backend.QuantWeighter as it is stored.
func keptQuant(t gguf.GGMLType) bool {
	switch t {
	case gguf.Q8_0, gguf.Q4_0, gguf.Q4_1, gguf.Q5_0, gguf.Q5_1, gguf.Q3_K, gguf.Q4_K, gguf.Q5_K, gguf.Q6_K, gguf.IQ4_XS, gguf.IQ4_NL:
		return true
	}
	return false
}

// ggufWeight returns tensor t's bytes data as a [rows, cols] matrix (rows
// 1: a vector of cols) in a dtype the backend takes.
func ggufWeight(t gguf.TensorInfo, name string, rows, cols int, data []byte) (backend.DType, []byte, error) {
	switch t.Type {
	case gguf.F32:
		return backend.F32, data, nil
	case gguf.F16:
		return backend.F16, data, nil
	case gguf.BF16:
		return backend.BF16, data, nil
	}
	if !gguf.Supported(t.Type) {
		return 0, nil, fmt.Errorf("tensor %s has type %s, which is not supported yet (supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS, IQ4_NL)", name, t.Type)
	}
	x, err := gguf.ToF32(t.Type, data, rows*cols)
	if err != nil {
		return 0, nil, fmt.Errorf("tensor %s: %w", name, err)
	}
	return backend.F32, unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(x))), 4*len(x)), nil
}

// ggufMatrix makes the backend tensor of tensor t ([rows, cols]; rows 1:
// a vector of cols) with make, from the mapping's bytes. A weight whose
// rows ggml's converter permuted (heads > 0: the query and key weights)
// is made from the mapping too and handed to the backend's RowPermuter,
// which puts its rows back in Hugging Face's order without a copy where
// the weight stays mapped; a backend without one, or one that declines,
// gets a reordered copy (ggufPermute) instead. make's errors name the
// tensor.
func ggufMatrix(f *gguf.File, b backend.Backend, t gguf.TensorInfo, name string, rows, cols, heads int, make func([]byte) (backend.Tensor, error)) (backend.Tensor, error) {
	okShape := len(t.Shape) == 2 && t.Shape[0] == cols && t.Shape[1] == rows ||
		rows == 1 && len(t.Shape) == 1 && t.Shape[0] == cols
	if !okShape {
		want := fmt.Sprint([]int{cols, rows})
		if rows == 1 {
			want = fmt.Sprint([]int{cols})
		}
		return nil, fmt.Errorf("tensor %s has shape %v (ggml order), the metadata implies %s", name, t.Shape, want)
	}
	data := f.Data(t)
	if heads > 0 {
		perm, err := ggufRowOrder(rows, heads)
		if err != nil {
			return nil, fmt.Errorf("tensor %s: %w", name, err)
		}
		if rp, ok := b.(backend.RowPermuter); ok {
			w, err := make(data)
			if err != nil {
				return nil, err
			}
			if rp.PermuteRows(w, perm) {
				return w, nil
			}
			b.Free(w)
		}
		if data, err = ggufPermute(data, rows, t.Type.RowBytes(cols), heads, false); err != nil {
			return nil, fmt.Errorf("tensor %s: %w", name, err)
		}
	}
	return make(data)
}
