package engine

import (
	"fmt"
	"os"
	"strings"

	"github.com/dlmcache/dlmcache/cuda"
	"github.com/dlmcache/dlmcache/lut"
	"github.com/dlmcache/dlmcache/model"
	"github.com/dlmcache/dlmcache/model/backend"
	"github.com/dlmcache/dlmcache/model/cpu"
	"github.com/dlmcache/dlmcache/model/load"
	"github.com/dlmcache/dlmcache/model/sample"
	"github.com/dlmcache/dlmcache/models"
	"github.com/dlmcache/dlmcache/regime"
)

// Model is a loaded model and the name it was asked for by (--model as
// given).
type Model struct {
	*load.Model
	Name string
}

// ResolveModel turns --model into a directory: an existing directory, a
// bundled model (extracted on first use), or load.Resolve's search.
func ResolveModel(name string) (string, error) {
	if st, err := os.Stat(name); err == nil && st.IsDir() {
		return name, nil
	}
	if dir, ok, err := models.Dir(name); ok || err != nil {
		return dir, err
	}
	dir, err := load.Resolve(name)
	if err != nil {
		return "", fmt.Errorf("%w (bundled models: %s)", err, strings.Join(models.Names(), ", "))
	}
	return dir, nil
}

// NewBackend is the backend --device names, with threads CPU threads.
func NewBackend(device string, threads int) (backend.Backend, error) {
	switch device {
	case "cpu", "":
		b, err := cpu.NewFromEnv(threads)
		if err != nil {
			return nil, err
		}
		return b, nil
	case "cuda":
		return cuda.New()
	}
	return nil, fmt.Errorf("--device %q: want cpu or cuda", device)
}

// LoadModel loads the model --model names on device with threads.
func LoadModel(name, device string, threads int) (*Model, error) {
	dir, err := ResolveModel(name)
	if err != nil {
		return nil, err
	}
	b, err := NewBackend(device, threads)
	if err != nil {
		return nil, err
	}
	m, err := load.Load(dir, b)
	if err != nil {
		return nil, err
	}
	return &Model{Model: m, Name: name}, nil
}

// ID is the model's identity as tables and run records keep it.
func (m *Model) ID() lut.ModelID {
	return lut.ModelID{Name: m.Name, NLayers: len(m.Blocks), Fingerprint: m.Fingerprint, Arch: m.Config.ArchName()}
}

// Describe says which model loaded: its name, architecture and shape
// (experts, block-causal attention) and fingerprint.
func (m *Model) Describe() string {
	c := m.Config
	s := fmt.Sprintf("model %s: architecture %s, %d layers, width %d, %d heads (%d K/V)", m.Name, c.ArchName(), c.NLayers, c.DModel, c.NHeads, c.NKVHeads)
	if e := c.MoE; e != nil {
		s += fmt.Sprintf(", %d experts (top %d", e.Experts, e.TopK)
		if e.SharedHidden > 0 {
			s += ", a shared expert"
		}
		s += ")"
	}
	if B := c.CausalBlock(); B > 0 {
		s += fmt.Sprintf(", block-causal (blocks of %d)", B)
	}
	if c.Causal {
		s += ", autoregressive (causal attention, next-token logits)"
	}
	return s + ", fingerprint " + m.Fingerprint
}

// GenOptions fills r's zero values from the model's card: gen length,
// then steps = gen length / 2 (two tokens per step, as in the paper; for
// a block-causal model one step per slot at most, its block size as the
// block length and threshold decoding, sample.BlockDefaults). Every
// generation default is settled here.
func (m *Model) GenOptions(r regime.Regime) (sample.GenOptions, error) {
	o := sample.GenOptions{Regime: r}
	if o.GenLength == 0 {
		o.GenLength = m.Card.GenLength
	}
	if c := m.config(); c != nil && c.Causal {
		// An autoregressive model: one token per forward; the record's
		// regime says so (steps = gen length, blocks of one).
		if r.Steps != 0 || r.BlockLength != 0 {
			return o, fmt.Errorf("--steps and --block-length are a diffusion sampler's; model %s is autoregressive (one token per forward): leave them 0", m.Name)
		}
		if o.GenLength <= 0 {
			return o, fmt.Errorf("--gen-length must be positive, got %d", o.GenLength)
		}
		o.Steps, o.BlockLength = o.GenLength, 1
		return o, nil
	}
	if o.Steps == 0 {
		if o.GenLength == m.Card.GenLength && m.Card.Steps > 0 {
			o.Steps = m.Card.Steps
		} else if m.config().CausalBlock() > 0 {
			o.Steps = o.GenLength // BlockDefaults: one step per slot at most
		} else {
			o.Steps = max(1, o.GenLength/2)
		}
	}
	if o.BlockLength == 0 && o.GenLength == m.Card.GenLength {
		o.BlockLength = m.Card.BlockLength
	}
	// A block-causal model: its block size, one step per slot at most
	// and threshold decoding where nothing above chose.
	o = sample.BlockDefaults(m.config(), o)
	if o.BlockLength == 0 {
		o.BlockLength = o.GenLength
	}
	_, err := sample.ScheduleFor(m.config(), 0, o)
	return o, err
}

// config is the model's config (nil for a card without a network, as
// tests make).
func (m *Model) config() *model.Config {
	if m.Model == nil || m.Network == nil {
		return nil
	}
	return m.Config
}

// RegimeLine describes a block-causal or autoregressive model's
// generation regime ("" for a bidirectional model): what the defaults
// chose, for the log.
func (m *Model) RegimeLine(gen sample.GenOptions) string {
	if c := m.config(); c != nil && c.Causal {
		how := "greedy"
		if gen.Temperature > 0 {
			how = fmt.Sprintf("sampled at temperature %g", gen.Temperature)
		}
		return fmt.Sprintf("model %s is autoregressive: up to %d tokens, one forward each (%s), K/V of the request cached exactly",
			m.Name, gen.GenLength, how)
	}
	B := m.config().CausalBlock()
	if B == 0 {
		return ""
	}
	dec := "low-confidence schedule (a fixed count per step)"
	if t, ok := gen.Decoder.(sample.Threshold); ok {
		dec = fmt.Sprintf("threshold %g (at least gen length / steps slots a step)", t.T)
	}
	return fmt.Sprintf("model %s is block-causal (blocks of %d): gen length %d, at most %d steps a block, decoder %s",
		m.Name, B, gen.GenLength, gen.Steps*B/gen.GenLength, dec)
}

// ServedName is the model name the API reports by default: --model as
// given when it names a bundled or published model, the directory's base
// name when it is a path (a response never shows the server's paths).
func (m *Model) ServedName() string {
	if st, err := os.Stat(m.Name); err == nil && st.IsDir() {
		return m.Model.Name()
	}
	return m.Name
}
