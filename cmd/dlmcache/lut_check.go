package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/dlmcache/dlmcache/lut"
)

type lutCheckOptions struct {
	f           *factory
	File        string
	Model       string
	Device      string
	Threads     int
	GenLength   int
	Steps       int
	BlockLength int
	Method      string
}

func newCmdLutCheck(f *factory, runF func(*lutCheckOptions) error) *cobra.Command {
	opts := &lutCheckOptions{f: f}
	cmd := &cobra.Command{
		Use:   "check table.json [--model M]",
		Short: "Say whether a table fits a model, regime and method, and why not",
		Long: `Check refuses (exit status 2) a table profiled or calibrated on another
model, in another regime (gen length, steps, block length: the model's
defaults, or the flags) or, for a calibrated table, for another method.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.File = args[0]
			if runF != nil {
				return runF(opts)
			}
			return lutCheckRun(opts)
		},
	}
	fl := cmd.Flags()
	addModelFlags(fl, &opts.Model, &opts.Device, &opts.Threads)
	fl.IntVar(&opts.GenLength, "gen-length", 0, "the regime served: answer slots; 0: the model's default")
	fl.IntVar(&opts.Steps, "steps", 0, "denoising steps; 0: the model's default")
	fl.IntVar(&opts.BlockLength, "block-length", 0, "block length; 0: the model's default")
	fl.StringVar(&opts.Method, "method", "bicache", "the method that will serve the table")
	return cmd
}

func lutCheckRun(opts *lutCheckOptions) error {
	t, err := lut.Read(opts.File)
	if err != nil {
		return err
	}
	lm, err := loadModel(opts.f, opts.Model, opts.Device, opts.Threads)
	if err != nil {
		return err
	}
	defer lm.Close()
	gen, err := lm.genOptions(opts.GenLength, opts.Steps, opts.BlockLength)
	if err != nil {
		return err
	}
	regime := lut.Regime{GenLength: gen.GenLength, Steps: gen.Steps, BlockLength: gen.BlockLength}
	for _, err := range []error{t.Check(lm.Name, len(lm.Blocks), lm.Fingerprint), t.CheckRegime(regime), t.CheckMethod(opts.Method)} {
		if err != nil {
			return &exitError{code: 2, err: fmt.Errorf("%s: incompatible: %w", opts.File, err)}
		}
	}
	fmt.Fprintf(opts.f.Out, "%s: compatible with %s (%d layers, fingerprint %s) at %s with %s\n", opts.File, lm.Name, len(lm.Blocks), lm.Fingerprint, regime, opts.Method)
	return nil
}
