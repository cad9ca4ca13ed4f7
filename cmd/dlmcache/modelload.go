package main

import (
	"github.com/spf13/pflag"

	"github.com/dlmcache/dlmcache/engine"
	"github.com/dlmcache/dlmcache/model/backend"
	"github.com/dlmcache/dlmcache/models"
	"github.com/dlmcache/dlmcache/regime"
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
// model's defaults (engine.Model.GenOptions).
type regimeFlags struct {
	regime.Regime
}

func (r *regimeFlags) add(fl *pflag.FlagSet) {
	fl.IntVar(&r.GenLength, "gen-length", 0, "answer slots; 0: the model's default")
	fl.IntVar(&r.Steps, "steps", 0, "denoising steps; 0: the model's default (gen length / 2 for another gen length)")
	fl.IntVar(&r.BlockLength, "block-length", 0, "semi-autoregressive block length; 0: the model's default (one block for another gen length)")
}

// modelConfig is the engine's config of the model and regime flags, its
// start-up lines to f's stderr.
func modelConfig(f *factory, mf modelFlags, rf regimeFlags) engine.Config {
	return engine.Config{Model: mf.Model, Device: mf.Device, Threads: mf.Threads,
		Regime: rf.Regime, Log: f.ErrOut}
}

// gemmOf describes the library behind b's matrix products where the
// backend says (the CPU backend: OpenBLAS, or oneDNN and what it runs).
func gemmOf(b backend.Backend) string {
	if g, ok := b.(interface{ GEMM() string }); ok {
		return g.GEMM()
	}
	return ""
}

// withEngine builds the engine cfg describes, runs fn with it and closes it.
func withEngine(cfg engine.Config, fn func(eng *engine.Engine) error) error {
	eng, err := engine.Build(cfg)
	if err != nil {
		return err
	}
	defer eng.Close()
	return fn(eng)
}
