package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/pflag"

	"github.com/dlmcache/dlmcache/cuda"
	"github.com/dlmcache/dlmcache/lut"
	"github.com/dlmcache/dlmcache/model"
	"github.com/dlmcache/dlmcache/model/backend"
	"github.com/dlmcache/dlmcache/model/cpu"
	"github.com/dlmcache/dlmcache/model/load"
	"github.com/dlmcache/dlmcache/model/sample"
	"github.com/dlmcache/dlmcache/models"
)

// modelFlags are the flags every model-running command shares: which
// model, on which backend, with how many threads.
type modelFlags struct {
	Model   string
	Device  string
	Threads int
}

func (m *modelFlags) add(fl *pflag.FlagSet) {
	fl.StringVar(&m.Model, "model", models.Default, "model directory or GGUF file, or a name looked up in the bundled models, $DLMCACHE_MODELS and the Hugging Face cache")
	fl.StringVar(&m.Device, "device", "cpu", "backend: cpu or cuda (cuda needs a build with -tags cuda)")
	fl.IntVar(&m.Threads, "threads", 0, "CPU threads (0: all cores)")
}

// regimeFlags are the generation regime's flags; zero values take the
// model's defaults (loadedModel.genOptions).
type regimeFlags struct {
	GenLength   int
	Steps       int
	BlockLength int
}

func (r *regimeFlags) add(fl *pflag.FlagSet) {
	fl.IntVar(&r.GenLength, "gen-length", 0, "answer slots; 0: the model's default")
	fl.IntVar(&r.Steps, "steps", 0, "denoising steps; 0: the model's default (gen length / 2 for another gen length)")
	fl.IntVar(&r.BlockLength, "block-length", 0, "semi-autoregressive block length; 0: the model's default (one block for another gen length)")
}

// loadedModel is a model plus what the command line needs around it.
type loadedModel struct {
	*load.Model
	Name string
}

// resolveModel turns --model into a directory: an existing directory, a
// bundled model (extracted on first use), or load.Resolve's search.
func resolveModel(name string) (string, error) {
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

func newBackend(device string, threads int) (backend.Backend, error) {
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

// gemmOf describes the library behind b's matrix products where the
// backend says (the CPU backend: OpenBLAS, or oneDNN and what it runs).
func gemmOf(b backend.Backend) string {
	if g, ok := b.(interface{ GEMM() string }); ok {
		return g.GEMM()
	}
	return ""
}

func loadModel(f *factory, name, device string, threads int) (*loadedModel, error) {
	dir, err := resolveModel(name)
	if err != nil {
		return nil, err
	}
	b, err := newBackend(device, threads)
	if err != nil {
		return nil, err
	}
	m, err := load.Load(dir, b)
	if err != nil {
		return nil, err
	}
	return &loadedModel{Model: m, Name: name}, nil
}

// modelID is the model's identity as tables and run records keep it.
func (m *loadedModel) modelID() lut.ModelID {
	return lut.ModelID{Name: m.Name, NLayers: len(m.Blocks), Fingerprint: m.Fingerprint, Arch: m.Config.ArchName()}
}

// describe says which model loaded: its name, architecture and shape
// (experts, block-causal attention) and fingerprint.
func (m *loadedModel) describe() string {
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

// genOptions fills zero values from the model's card: gen length, then
// steps = gen length / 2 (two tokens per step, as in the paper; for a
// block-causal model one step per slot at most, its block size as the
// block length and threshold decoding, model.Config.BlockDefaults).
func (m *loadedModel) genOptions(genLength, steps, blockLength int) (sample.GenOptions, error) {
	o := sample.GenOptions{GenLength: genLength, Steps: steps, BlockLength: blockLength}
	if o.GenLength == 0 {
		o.GenLength = m.Card.GenLength
	}
	if c := m.config(); c != nil && c.Causal {
		// An autoregressive model: one token per forward; the record's
		// regime says so (steps = gen length, blocks of one).
		if steps != 0 || blockLength != 0 {
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
func (m *loadedModel) config() *model.Config {
	if m.Model == nil || m.Network == nil {
		return nil
	}
	return m.Config
}

// regimeLine describes a block-causal or autoregressive model's
// generation regime ("" for a bidirectional model): what the defaults
// chose, for the log.
func (m *loadedModel) regimeLine(gen sample.GenOptions) string {
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

// decodeAnswer turns the answer slots into text, stopping at the first
// end-of-text or end-of-turn token.
func (m *loadedModel) decodeAnswer(ids []int32) string {
	return m.Model.AnswerText(ids)
}

// loadRegime loads the model of mf and fills rf's zero values from its
// defaults; on error nothing stays open.
func loadRegime(f *factory, mf modelFlags, rf regimeFlags) (*loadedModel, sample.GenOptions, error) {
	lm, err := loadModel(f, mf.Model, mf.Device, mf.Threads)
	if err != nil {
		return nil, sample.GenOptions{}, err
	}
	fmt.Fprintln(f.ErrOut, "dlmcache:", lm.describe())
	gen, err := lm.genOptions(rf.GenLength, rf.Steps, rf.BlockLength)
	if err != nil {
		lm.Close()
		return nil, sample.GenOptions{}, err
	}
	if line := lm.regimeLine(gen); line != "" {
		fmt.Fprintln(f.ErrOut, "dlmcache:", line)
	}
	return lm, gen, nil
}

// regimeOf is the regime a table records for generation options.
func regimeOf(gen sample.GenOptions) lut.Regime {
	return lut.Regime{GenLength: gen.GenLength, Steps: gen.Steps, BlockLength: gen.BlockLength}
}
