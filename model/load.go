package model

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/dlmcache/dlmcache/model/backend"
	"github.com/dlmcache/dlmcache/model/safetensors"
	"github.com/dlmcache/dlmcache/model/tokenizer"
)

// Model is a loaded checkpoint: the network, its tokenizer and identity.
type Model struct {
	*LLaDA
	Dir         string
	Tokenizer   *tokenizer.Tokenizer
	Fingerprint string // cheap identity of config + weights (see safetensors.Fingerprint)
	Card        Card   // generation defaults (dlmcache.json)

	files *safetensors.Set
}

// Load reads a Hugging Face LLaDA directory (config.json, model.safetensors
// or shards, tokenizer.json) onto backend b.
func Load(dir string, b backend.Backend) (*Model, error) {
	cfg, rawCfg, err := ReadConfig(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, err
	}
	card, err := readCard(dir)
	if err != nil {
		return nil, err
	}
	set, err := safetensors.Open(dir)
	if err != nil {
		return nil, err
	}
	m := &Model{Dir: dir, Card: card, files: set}
	ok := false
	defer func() {
		if !ok {
			set.Close()
		}
	}()
	m.LLaDA, err = newLLaDA(dir, cfg, set, b)
	if err != nil {
		return nil, err
	}
	m.Fingerprint = safetensors.Fingerprint(rawCfg, set)
	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err == nil {
		m.Tokenizer, err = tokenizer.Load(dir)
		if err != nil {
			return nil, err
		}
		if v := m.Tokenizer.VocabSize(); v > cfg.Embeddings() {
			return nil, fmt.Errorf("%s: tokenizer has %d tokens but config.json's embedding size is %d", dir, v, cfg.Embeddings())
		}
	} else {
		return nil, fmt.Errorf("%s: no tokenizer.json", dir)
	}
	ok = true
	return m, nil
}

// Close releases the memory-mapped weights. The model must not be used after.
func (m *Model) Close() error {
	if m.files == nil {
		return nil
	}
	err := m.files.Close()
	m.files = nil
	return err
}

// Name is the directory's base name.
func (m *Model) Name() string { return filepath.Base(filepath.Clean(m.Dir)) }

// newLLaDA maps LLaDA's tensor names onto backend tensors, checking every
// shape against the config.
func newLLaDA(dir string, c *Config, set *safetensors.Set, b backend.Backend) (*LLaDA, error) {
	d, kv, hid, e := c.DModel, c.KVDim(), c.MLPHiddenSize, c.Embeddings()
	var firstErr error
	used := map[string]bool{}
	w := func(name string, rows, cols int) backend.Tensor {
		used[name] = true
		if firstErr != nil {
			return nil
		}
		t, err := set.Matrix(name, rows, cols)
		if err != nil {
			firstErr = err
			return nil
		}
		bt, err := b.Weight(t.DType, rows, cols, t.Data)
		if err != nil {
			firstErr = fmt.Errorf("%s: tensor %s: %w", t.File, name, err)
			return nil
		}
		return bt
	}
	const pre = "model.transformer."
	m := &LLaDA{Config: c, Backend: b}
	m.Embed = w(pre+"wte.weight", e, d)
	for i := 0; i < c.NLayers; i++ {
		p := fmt.Sprintf("%sblocks.%d.", pre, i)
		m.Blocks = append(m.Blocks, Block{
			AttnNorm: w(p+"attn_norm.weight", 1, d),
			Q:        w(p+"q_proj.weight", d, d),
			K:        w(p+"k_proj.weight", kv, d),
			V:        w(p+"v_proj.weight", kv, d),
			AttnOut:  w(p+"attn_out.weight", d, d),
			FFNorm:   w(p+"ff_norm.weight", 1, d),
			Gate:     w(p+"ff_proj.weight", hid, d),
			Up:       w(p+"up_proj.weight", hid, d),
			Down:     w(p+"ff_out.weight", d, hid),
		})
	}
	m.Norm = w(pre+"ln_f.weight", 1, d)
	if c.WeightTying {
		m.Head = m.Embed
	} else {
		m.Head = w(pre+"ff_out.weight", e, d)
	}
	if firstErr != nil {
		return nil, firstErr
	}
	for _, name := range set.Names() {
		if !used[name] {
			return nil, fmt.Errorf("%s: the checkpoint has tensor %s, which config.json (n_layers %d, weight_tying %v) does not account for",
				dir, name, c.NLayers, c.WeightTying)
		}
	}
	return m, nil
}
