package load

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/dlmcache/dlmcache/internal/atomicfile"
	"github.com/dlmcache/dlmcache/model"
	"github.com/dlmcache/dlmcache/model/backend"
	"github.com/dlmcache/dlmcache/model/gguf"
	"github.com/dlmcache/dlmcache/model/safetensors"
)

// ConvertReport says what a conversion did, tensor by tensor.
type ConvertReport struct {
	Tensors []ConvertedTensor
	Bytes   int64 // tensor data written
}

// ConvertedTensor is one tensor of a conversion.
type ConvertedTensor struct {
	Name     string // the written name
	From, To string // source and written types
	Shape    []int  // the written shape (ggml order for GGUF)
	Note     string // why the type differs from the one asked for, if it does
}

// ToGGUF writes the Hugging Face LLaDA checkpoint in dir as a GGUF file at
// out with 2-D weights of type typ (F32, F16, BF16, Q8_0 or Q4_0), laid out as
// llama.cpp's convert_hf_to_gguf.py does for LLaDA: its metadata keys and
// tensor names, q and k rows permuted for ggml's RoPE, 1-D tensors and norm
// weights kept F32, and a weight whose rows are not a multiple of 32
// written F16 where Q8_0 or Q4_0 was asked (as llama.cpp falls back). In
// a Q4_0 file the output head (output.weight) is Q8_0: llama-quantize
// keeps it at 6 bits (Q6_K), which this package does not write, and the
// head's errors reach every logit. The
// tokenizer goes in as tokenizer.ggml.* (see gguf.VocabFromHF) and
// dlmcache.json, when present, as dlmcache.card. The file appears
// atomically.
func ToGGUF(dir, out string, typ gguf.GGMLType) (*ConvertReport, error) {
	switch typ {
	case gguf.F32, gguf.F16, gguf.BF16, gguf.Q8_0, gguf.Q4_0:
	default:
		return nil, fmt.Errorf("convert: output type %s is not supported (F32, F16, BF16, Q8_0, Q4_0)", typ)
	}
	cfg, rawCfg, err := model.ReadConfig(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, err
	}
	if a := cfg.ArchName(); a != "llada" {
		return nil, fmt.Errorf("%s: convert writes LLaDA checkpoints only, this is %s", dir, a)
	}
	if cfg.BlockCausal {
		return nil, fmt.Errorf("%s: block_causal attention has no key in llama.cpp's llada architecture; it cannot be written as GGUF", dir)
	}
	var hp map[string]any
	if err := json.Unmarshal(rawCfg, &hp); err != nil {
		return nil, err
	}
	set, err := safetensors.Open(dir)
	if err != nil {
		return nil, err
	}
	defer set.Close()
	tokJSON, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		return nil, err
	}
	tokCfg, err := readOptional(filepath.Join(dir, "tokenizer_config.json"))
	if err != nil {
		return nil, err
	}
	special := map[string]int{}
	for _, k := range []string{"bos", "eos", "unk", "pad", "mask"} {
		if x, ok := hp[k+"_token_id"].(float64); ok {
			special[k] = int(x)
		}
	}
	vocab, err := gguf.VocabFromHF(tokJSON, tokCfg, cfg.Embeddings(), special)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	// llama.cpp's LLaDA converter sets add_bos_token; the mask id goes with
	// the diffusion keys below.
	addBOS := true
	vocab.AddBOS = &addBOS
	vocab.Mask = -1

	kv, err := convertMetadata(dir, cfg, hp, typ, vocab)
	if err != nil {
		return nil, err
	}

	jobs, wts, rep, err := planConvert(dir, cfg, set, typ)
	if err != nil {
		return nil, err
	}
	err = gguf.Write(out, kv, wts, func(i int) ([]byte, error) {
		j := jobs[i]
		t, err := set.Tensor(j.hf)
		if err != nil {
			return nil, err
		}
		x := t.Float32(nil)
		if j.heads > 0 {
			b, err := ggufPermute(safetensors.F32ToBytes(x), j.rows, 4*j.cols, j.heads, true)
			if err != nil {
				return nil, fmt.Errorf("tensor %s: %w", j.hf, err)
			}
			safetensors.BytesToF32(b, x)
		}
		b, err := gguf.FromF32(j.typ, x)
		if err != nil {
			return nil, fmt.Errorf("tensor %s: %w", j.hf, err)
		}
		rep.Bytes += int64(len(b))
		return b, nil
	})
	if err != nil {
		return nil, err
	}
	return rep, nil
}

// convertJob is one tensor ToGGUF writes: its Hugging Face name, matrix
// shape, GGUF type and, for q/k projections, the heads llama.cpp's RoPE
// layout permutes.
type convertJob struct {
	hf    string
	rows  int
	cols  int
	typ   gguf.GGMLType
	heads int
}

// planConvert is the tensors of set written as typ (each checked against
// the loader's mapping of cfg: none missing, none foreign), their GGUF
// descriptions and the report's rows.
func planConvert(dir string, cfg *model.Config, set *safetensors.Set, typ gguf.GGMLType) ([]convertJob, []gguf.WriteTensor, *ConvertReport, error) {
	// Check every tensor's shape through the loader's own mapping first.
	want := map[string][2]int{}
	if _, err := model.BuildLLaDA(cfg, nil, func(name string, rows, cols int) (backend.Tensor, error) {
		want[name] = [2]int{rows, cols}
		return nil, nil
	}); err != nil {
		return nil, nil, nil, err
	}
	var jobs []convertJob
	var wts []gguf.WriteTensor
	rep := &ConvertReport{}
	for _, hf := range set.Names() {
		rc, ok := want[hf]
		if !ok {
			return nil, nil, nil, fmt.Errorf("%s: tensor %s is not part of a LLaDA checkpoint with this config.json", dir, hf)
		}
		t, err := set.Matrix(hf, rc[0], rc[1])
		if err != nil {
			return nil, nil, nil, err
		}
		name, err := ggufTensorName(hf)
		if err != nil {
			return nil, nil, nil, err
		}
		j := convertJob{hf: hf, rows: rc[0], cols: rc[1], typ: typ, heads: permutedHeads(hf, cfg)}
		ct := ConvertedTensor{Name: name, From: t.DType.String()}
		shape := []int{rc[1], rc[0]}
		if len(t.Shape) == 1 {
			shape = []int{rc[1]}
		}
		if len(shape) == 1 || strings.HasSuffix(name, "_norm.weight") {
			j.typ = gguf.F32
		} else if typ.BlockSize() > 1 && rc[1]%typ.BlockSize() != 0 {
			j.typ = gguf.F16
			ct.Note = fmt.Sprintf("rows of %d are not a multiple of %d: F16, as llama.cpp falls back", rc[1], typ.BlockSize())
		} else if typ == gguf.Q4_0 && name == "output.weight" {
			j.typ = gguf.Q8_0
			ct.Note = "the output head: Q8_0 (llama-quantize keeps it at 6 bits, Q6_K)"
		}
		ct.To, ct.Shape = j.typ.String(), shape
		rep.Tensors = append(rep.Tensors, ct)
		jobs = append(jobs, j)
		wts = append(wts, gguf.WriteTensor{Name: name, Shape: shape, Type: j.typ})
		delete(want, hf)
	}
	for hf := range want {
		return nil, nil, nil, fmt.Errorf("%s: tensor %s is missing", dir, hf)
	}
	return jobs, wts, rep, nil
}

// convertMetadata is the GGUF metadata of the LLaDA checkpoint in dir
// (cfg, its config.json's keys hp) written as typ with vocab: llama.cpp's
// llada keys, the diffusion keys, the vocabulary and the model card.
func convertMetadata(dir string, cfg *model.Config, hp map[string]any, typ gguf.GGMLType, vocab *gguf.Vocab) ([]gguf.KV, error) {
	fileType := map[gguf.GGMLType]uint32{gguf.F32: gguf.FileTypeF32, gguf.F16: gguf.FileTypeF16,
		gguf.BF16: gguf.FileTypeBF16, gguf.Q8_0: gguf.FileTypeQ8_0, gguf.Q4_0: gguf.FileTypeQ4_0}[typ]
	a := func(k string) string { return archKey(k, ArchLLaDA) }
	u32 := func(x int) gguf.Value { return gguf.Uint32(uint32(x)) }
	kv := []gguf.KV{
		{Key: keyArch, Value: gguf.String(ArchLLaDA)},
		{Key: keyType, Value: gguf.String("model")},
		{Key: keyName, Value: gguf.String(filepath.Base(filepath.Clean(dir)))},
		{Key: a(keyBlockCount), Value: u32(cfg.NLayers)},
	}
	for _, k := range []string{"max_position_embeddings", "n_ctx", "n_positions", "max_length", "max_sequence_length", "model_max_length"} {
		if x, ok := hp[k].(float64); ok {
			kv = append(kv, gguf.KV{Key: a(keyContextLength), Value: u32(int(x))})
			break
		}
	}
	kv = append(kv,
		gguf.KV{Key: a(keyEmbedding), Value: u32(cfg.DModel)},
		gguf.KV{Key: a(keyFeedForward), Value: u32(cfg.MLPHiddenSize)},
		gguf.KV{Key: a(keyHeads), Value: u32(cfg.NHeads)},
		gguf.KV{Key: a(keyHeadsKV), Value: u32(cfg.NKVHeads)},
		gguf.KV{Key: a(keyRopeBase), Value: gguf.Float32(float32(cfg.RopeTheta))},
		gguf.KV{Key: a(keyRMSEps), Value: gguf.Float32(float32(cfg.RMSNormEps))},
		gguf.KV{Key: keyFileType, Value: gguf.Uint32(fileType)},
		gguf.KV{Key: a(keyVocabSize), Value: u32(cfg.VocabSize)},
		gguf.KV{Key: a(keyRopeDims), Value: u32(cfg.HeadDim())},
		gguf.KV{Key: a(keyCausal), Value: gguf.Bool(false)},
		gguf.KV{Key: keyShiftLogits, Value: gguf.Bool(cfg.ShiftLogits)},
		gguf.KV{Key: gguf.KeyTokMask, Value: u32(cfg.MaskTokenID)},
		gguf.KV{Key: keyQuantVersion, Value: gguf.Uint32(gguf.QuantizationVersion)},
	)
	kv = append(kv, vocab.KV()...)
	if card, err := readOptional(filepath.Join(dir, CardFile)); err != nil {
		return nil, err
	} else if card != nil {
		if _, err := parseCard(card, filepath.Join(dir, CardFile)); err != nil {
			return nil, err
		}
		kv = append(kv, gguf.KV{Key: keyCard, Value: gguf.String(strings.TrimSpace(string(card)))})
	}
	return kv, nil
}

// FromGGUF writes a LLaDA GGUF file as a Hugging Face model directory in
// outDir (created; it must not hold a config.json yet): config.json,
// model.safetensors with Hugging Face's tensor names and q/k row order,
// tokenizer.json and tokenizer_config.json rebuilt from the tokenizer
// metadata, and dlmcache.json when the file carries dlmcache.card. Only
// F32, F16 and BF16 tensors convert, since only those are lossless in
// safetensors; a quantized tensor is refused by name.
func FromGGUF(path, outDir string) (*ConvertReport, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	arch, err := ggufArch(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	vocab, err := gguf.ReadVocab(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	cfg, err := ggufConfig(f, arch, vocab)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var card []byte
	if v, ok := f.Get(keyCard); ok {
		s, _ := v.Str()
		if _, err := parseCard([]byte(s), keyCard); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		card = []byte(s + "\n")
	}
	tokJSON, tokCfg, err := vocab.TokenizerJSON()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if _, err := os.Stat(filepath.Join(outDir, "config.json")); err == nil {
		return nil, fmt.Errorf("%s already holds a model (config.json); not overwriting it", outDir)
	}
	rep := &ConvertReport{}
	var wts []safetensors.WriteTensor
	var datas [][]byte
	for _, t := range f.Tensors {
		hf, err := hfTensorName(t.Name)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		var dt safetensors.DType
		switch t.Type {
		case gguf.F32:
			dt = safetensors.F32
		case gguf.F16:
			dt = safetensors.F16
		case gguf.BF16:
			dt = safetensors.BF16
		default:
			return nil, fmt.Errorf("%s: tensor %s is %s, which safetensors cannot hold losslessly; only F32, F16 and BF16 GGUFs convert back", path, t.Name, t.Type)
		}
		shape := make([]int, len(t.Shape))
		for i, d := range t.Shape {
			shape[len(shape)-1-i] = d
		}
		data := f.Data(t)
		if h := permutedHeads(hf, cfg); h > 0 {
			if data, err = ggufPermute(data, t.Rows(), t.Type.RowBytes(t.Cols()), h, false); err != nil {
				return nil, fmt.Errorf("%s: tensor %s: %w", path, t.Name, err)
			}
		}
		wts = append(wts, safetensors.WriteTensor{Name: hf, DType: dt, Shape: shape})
		datas = append(datas, data)
		rep.Tensors = append(rep.Tensors, ConvertedTensor{Name: hf, From: t.Type.String(), To: string(dt), Shape: shape})
		rep.Bytes += int64(len(data))
	}
	rawCfg, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return nil, err
	}
	err = safetensors.WriteFunc(filepath.Join(outDir, safetensors.SingleFile), wts,
		map[string]string{"format": "pt"}, func(i int) ([]byte, error) { return datas[i], nil })
	if err != nil {
		return nil, err
	}
	files := []struct {
		name string
		data []byte
	}{{"tokenizer.json", tokJSON}, {"tokenizer_config.json", tokCfg}, {CardFile, card}, {"config.json", append(rawCfg, '\n')}}
	for _, fl := range files {
		if fl.data == nil {
			continue
		}
		if err := atomicfile.WriteFile(filepath.Join(outDir, fl.name), fl.data, 0o644); err != nil {
			return nil, err
		}
	}
	return rep, nil
}
