package load

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unsafe"

	"github.com/dlmcache/dlmcache/model"
	"github.com/dlmcache/dlmcache/model/backend"
	"github.com/dlmcache/dlmcache/model/gguf"
	"github.com/dlmcache/dlmcache/model/safetensors"
	"github.com/dlmcache/dlmcache/model/tokenizer"
)

// Model is a loaded checkpoint: the network, its tokenizer and identity.
type Model struct {
	*model.Network
	Dir         string // the model directory, or the GGUF file
	Tokenizer   *tokenizer.Tokenizer
	Fingerprint string // cheap identity of config + weights (see safetensors.Fingerprint)
	Card        Card   // generation defaults (dlmcache.json)

	files    *safetensors.Set
	ggufFile *gguf.File
	// released holds the checkpoint bytes given back at load
	// (releaseCopied): PageIn leaves them out.
	released []span
}

// span is the address range [lo, hi) of a run of bytes.
type span struct{ lo, hi uintptr }

func spanOf(b []byte) span {
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return span{lo, lo + uintptr(len(b))}
}

// Load reads a Hugging Face checkpoint directory (config.json of any
// architecture model.ArchitectureOf knows, model.safetensors or shards,
// tokenizer.json) onto backend b, or a GGUF file (LoadGGUF).
func Load(dir string, b backend.Backend) (*Model, error) {
	if IsGGUF(dir) {
		return LoadGGUF(dir, b)
	}
	cfg, rawCfg, err := model.ReadConfig(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, err
	}
	card, err := readCard(dir)
	if err != nil {
		return nil, err
	}
	if card, err = card.forBlocks(cfg.CausalBlock()); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, CardFile), err)
	}
	if cfg.Causal {
		card = card.forCausal()
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
	m.Network, err = newNetwork(dir, cfg, set, b, m.release(set.Release))
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
	var err error
	if m.files != nil {
		err = m.files.Close()
		m.files = nil
	}
	if m.ggufFile != nil {
		if e := m.ggufFile.Close(); err == nil {
			err = e
		}
		m.ggufFile = nil
	}
	return err
}

// PageIn reads one byte of every 4 KiB page of the checkpoint's tensors
// (safetensors or GGUF), so that their mapping is resident: a server's
// state after its first request, before a timing. Pages given back at
// load, of weights the backend holds in a layout of its own, stay out:
// the products never read them.
func (m *Model) PageIn() error {
	var sum byte
	touch := func(data []byte) {
		if m.isReleased(spanOf(data)) {
			return
		}
		for i := 0; i < len(data); i += 4096 {
			sum += data[i]
		}
	}
	if f := m.ggufFile; f != nil {
		for _, t := range f.Tensors {
			touch(f.Data(t))
		}
	}
	if set := m.files; set != nil {
		for _, name := range set.Names() {
			t, err := set.Tensor(name)
			if err != nil {
				return err
			}
			touch(t.Data)
		}
	}
	pageSink = sum
	return nil
}

// pageSink keeps PageIn's reads.
var pageSink byte

// Name is the directory's base name, or the GGUF file's without ".gguf".
func (m *Model) Name() string {
	return strings.TrimSuffix(filepath.Base(filepath.Clean(m.Dir)), ".gguf")
}

// releaseCopied releases raw, the checkpoint bytes weight t was made from,
// through release (the file's Release) where the backend says t no longer
// reads them (backend.RawAliaser): a weight converted at load (an F16 one
// rounded to BF16, a widened one) then holds only its copy in memory, not
// the file's pages too.
func releaseCopied(t backend.Tensor, raw []byte, release func([]byte)) {
	if a, ok := t.(backend.RawAliaser); ok && !a.AliasesRaw() && len(raw) > 0 {
		release(raw)
	}
}

// release returns the file's release function that also notes the bytes
// as given back, for PageIn.
func (m *Model) release(file func([]byte)) func([]byte) {
	return func(b []byte) {
		file(b)
		m.released = append(m.released, spanOf(b))
	}
}

// isReleased reports whether the bytes of span t lie within bytes given
// back at load.
func (m *Model) isReleased(t span) bool {
	for _, s := range m.released {
		if t.lo >= s.lo && t.hi <= s.hi {
			return true
		}
	}
	return false
}

// newNetwork maps the checkpoint's tensors onto backend tensors by the
// names of the config's architecture (model/arch.go), checking every shape
// against the config and that every tensor is used.
func newNetwork(dir string, c *model.Config, set *safetensors.Set, b backend.Backend, release func([]byte)) (*model.Network, error) {
	if n := len(set.Names()); c.NLayers > n {
		return nil, fmt.Errorf("%s: config.json: n_layers %d, but the checkpoint holds %d tensors (each layer has several)", dir, c.NLayers, n)
	}
	used := map[string]bool{}
	m, err := model.Build(c, b, func(name string, rows, cols int) (backend.Tensor, error) {
		used[name] = true
		t, err := set.Matrix(name, rows, cols)
		if err != nil {
			return nil, err
		}
		bt, err := b.Weight(t.DType, rows, cols, t.Data)
		if err != nil {
			return nil, fmt.Errorf("%s: tensor %s: %w", t.File, name, err)
		}
		releaseCopied(bt, t.Data, release)
		return bt, nil
	})
	if err != nil {
		return nil, err
	}
	for _, name := range set.Names() {
		if !used[name] {
			return nil, fmt.Errorf("%s: the checkpoint has tensor %s, which config.json (n_layers %d, weight_tying %v) does not account for",
				dir, name, c.NLayers, c.WeightTying)
		}
	}
	return m, nil
}
