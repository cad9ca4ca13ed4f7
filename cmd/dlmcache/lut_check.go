package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/dlmcache/dlmcache/cache"
	"github.com/dlmcache/dlmcache/engine"
	"github.com/dlmcache/dlmcache/lut"
)

type lutCheckOptions struct {
	f    *factory
	File string
	modelFlags
	regimeFlags
	Method string
}

func (opts *lutCheckOptions) run(context.Context) error {
	t, err := lut.Read(opts.File)
	if err != nil {
		return err
	}
	return withEngine(modelConfig(opts.f, opts.modelFlags, opts.regimeFlags), func(eng *engine.Engine) error {
		lm, gen := eng.Model, eng.Gen
		for _, err := range []error{t.Check(lm.Name, len(lm.Blocks), lm.Fingerprint), t.CheckRegime(gen.Regime), cache.CheckTable(t, opts.Method)} {
			if err != nil {
				return &exitError{code: 2, err: fmt.Errorf("%s: incompatible: %w", opts.File, err)}
			}
		}
		fmt.Fprintf(opts.f.Out, "%s: compatible with %s (%d layers, fingerprint %s) at %s with %s\n", opts.File, lm.Name, len(lm.Blocks), lm.Fingerprint, gen.Regime.Text(), opts.Method)
		return nil
	})
}

func (opts *lutCheckOptions) setArgs(args []string) { opts.File = args[0] }

func (opts *lutCheckOptions) flags(fl *pflag.FlagSet) {
	opts.modelFlags.add(fl)
	opts.regimeFlags.add(fl)
	fl.StringVar(&opts.Method, "method", "bicache", "the method that will serve the table")
}

func newCmdLutCheck(f *factory, runF func(*lutCheckOptions) error) *cobra.Command {
	return newCommand(&lutCheckOptions{f: f}, runF, &cobra.Command{
		Use:   "check table.json [--model M]",
		Short: "Say whether a table fits a model, regime and method, and why not",
		Long: `Check refuses (exit status 2) a table profiled or calibrated on another
model, in another regime (gen length, steps, block length: the model's
defaults, or the flags) or, for a calibrated table, for another method.`,
		Args: cobra.ExactArgs(1),
	})
}
