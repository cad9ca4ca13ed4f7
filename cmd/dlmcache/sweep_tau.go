package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/dlmcache/dlmcache/cache"
	"github.com/dlmcache/dlmcache/lut"
	"github.com/dlmcache/dlmcache/profile"
)

type sweepTauOptions struct {
	f *factory
	sweepCommon
	similarityFiles
	Taus string
}

func (opts *sweepTauOptions) run(ctx context.Context) error {
	taus, err := parseFloats(opts.Taus)
	if err != nil {
		return fmt.Errorf("--taus %w", err)
	}
	for _, t := range taus {
		if err := lut.CheckTau(t); err != nil {
			return err
		}
	}
	recs, info, sim, err := opts.read()
	if err != nil {
		return err
	}
	if err := sim.Available(recs); err != nil {
		return err // before any model run: a file without the statistic
	}
	env, err := opts.load(opts.f)
	if err != nil {
		return err
	}
	defer env.Close()
	res := &sweepResult{Param: "tau"}
	var meths []cache.Method
	for _, tau := range taus {
		t, err := profile.BuildTable(recs, info, tau, sim)
		if err != nil {
			return err
		}
		if err := t.Check(env.Model.Name, len(env.Model.Blocks), env.Model.Fingerprint); err != nil {
			return fmt.Errorf("--from: %w", err)
		}
		meth, err := env.NewMethod("bicache", t, nil)
		if err != nil {
			return err
		}
		meths = append(meths, meth)
	}
	if err := env.points(ctx, fmt.Sprintf("sweep none + %d τ", len(taus)), taus, meths, res); err != nil {
		return err
	}
	printSweep(opts.f, "τ", res)
	return writeJSON(opts.f, opts.Out, "sweep-tau.json", res)
}

func (opts *sweepTauOptions) flags(fl *pflag.FlagSet) {
	opts.addFlags(fl)
	opts.similarityFiles.add(fl, "similarity.parquet files of one profile run")
	fl.StringVar(&opts.Taus, "taus", "0.91:0.99:0.02", "τ values: lo:hi:step or a,b,c")
}

func newCmdSweepTau(f *factory, runF func(*sweepTauOptions) error) *cobra.Command {
	return newCommand(&sweepTauOptions{f: f}, runF, &cobra.Command{
		Use:   "tau --from similarity.parquet",
		Short: "Accuracy and throughput of BiCache vs the threshold τ (tables rebuilt without rerunning the profile)",
		Args:  cobra.NoArgs,
	})
}
