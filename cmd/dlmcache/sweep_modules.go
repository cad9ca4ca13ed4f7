package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/dlmcache/dlmcache/internal/progress"
	"github.com/dlmcache/dlmcache/profile"
)

type sweepModulesOptions struct {
	f *factory
	sweepCommon
	Depths string
}

func (opts *sweepModulesOptions) run(ctx context.Context) error {
	if opts.Cache.Method.BiCache.Refresh < 1 {
		return fmt.Errorf("--refresh must be positive, got %d", opts.Cache.Method.BiCache.Refresh)
	}
	var ds []float64
	var err error
	if opts.Depths != "" {
		if ds, err = parseFloats(opts.Depths); err != nil {
			return fmt.Errorf("--depths %w", err)
		}
	}
	env, err := opts.load(opts.f)
	if err != nil {
		return err
	}
	defer env.Close()
	L := len(env.Model.Blocks)
	var depths []int
	for _, d := range ds {
		if d != float64(int(d)) || d < 0 || int(d) > L {
			return fmt.Errorf("--depths: %g is not a depth of this %d-layer model (0..%d)", d, L, L)
		}
		depths = append(depths, int(d))
	}
	if depths == nil {
		for d := 0; d <= L; d++ {
			depths = append(depths, d)
		}
	}
	total := len(env.samples) * (1 + len(profile.ModuleLayouts)*len(depths))
	bar := progress.New(opts.f.ErrOut, "sweep modules", "req", total, opts.Quiet)
	done := 0
	res, err := profile.ModuleSweep(ctx, env.Model.Model, env.samples, depths, opts.Cache.Method.BiCache.Refresh, env.Gen, func() { done++; bar.Set(done) })
	bar.Done()
	if err != nil {
		return err
	}
	fmt.Fprintf(opts.f.Out, "whole request: accuracy %.1f%% (%d samples; deep layers every %d steps)\n", 100*res.WholeAccuracy, res.N, res.Refresh)
	fmt.Fprintf(opts.f.Out, "%-10s %5s %9s %9s %6s\n", "layout", "depth", "accuracy", "agreement", "rows")
	for _, p := range res.Points {
		fmt.Fprintf(opts.f.Out, "%-10s %5d %8.1f%% %8.1f%% %5.1f%%\n", p.Layout, p.Depth, 100*p.Accuracy, 100*p.Agreement, 100*float64(p.RowsComputed)/float64(max(p.RowsFull, 1)))
	}
	return writeJSON(opts.f, opts.Out, "sweep-modules.json", res)
}

func (opts *sweepModulesOptions) flags(fl *pflag.FlagSet) {
	opts.addFlags(fl)
	fl.StringVar(&opts.Depths, "depths", "", "depths d: a,b,c or lo:hi:step (default: 0 to the model's layer count)")
	// The cache flags' --refresh, with another default: 1, so that only the
	// module reuse differs from the whole request.
	opts.Cache.Method.BiCache.Refresh = 1
	r := fl.Lookup("refresh")
	r.DefValue, r.Usage = "1", "deep layers' refresh period R (1: every step, so only the module reuse differs from the whole request)"
}

func newCmdSweepModules(f *factory, runF func(*sweepModulesOptions) error) *cobra.Command {
	return newCommand(&sweepModulesOptions{f: f}, runF, &cobra.Command{
		Use:   "modules",
		Short: "Accuracy vs depth of Prompt Cache's module reuse (modules computed alone at reserved positions) against the whole request",
		Long: `Sweep modules cuts each sample's system message into prompt modules (the
template's head and each paragraph), computes each module's K/V once, alone,
at its reserved position ids, and reuses them in the first d layers, the
deeper layers computed every --refresh steps. Two layouts: contiguous, and
gap (a module declared before the last paragraph but not imported, so the
ids jump). Each point's accuracy and agreement are against the same tokens
computed whole. Writes sweep-modules.json.`,
		Args: cobra.NoArgs,
	})
}
