package main

import (
	"context"
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/dlmcache/dlmcache/profile"
)

type sweepNOptions struct {
	f *factory
	similarityFiles
	Tau  float64
	Step int
	Eps  float64
	Stat string
	Out  string
}

func (opts *sweepNOptions) run(context.Context) error {
	stat, err := parseStat(opts.Stat)
	if err != nil {
		return err
	}
	recs, info, sim, err := opts.read()
	if err != nil {
		return err
	}
	pts, stable, err := profile.Convergence(recs, info, opts.Tau, sim, stat, opts.Step, opts.Eps)
	if err != nil {
		return err
	}
	for _, p := range pts {
		fmt.Fprintf(opts.f.Out, "N=%-4d L1=%.4f\n", p.N, p.L1)
	}
	if stable > 0 {
		fmt.Fprintf(opts.f.Out, "converged: L1 ≤ %g from N=%d requests per bin on\n", opts.Eps, stable)
	} else {
		fmt.Fprintf(opts.f.Out, "not converged: L1 still above %g at N=%d; profile with a larger --per-ratio\n", opts.Eps, pts[len(pts)-1].N)
	}
	if err := os.MkdirAll(opts.Out, 0o755); err != nil {
		return err
	}
	return writeJSON(opts.f, opts.Out, "convergence.json", map[string]any{"tau": opts.Tau, "step": opts.Step, "eps": opts.Eps, "stable_n": stable, "points": pts})
}

func (opts *sweepNOptions) flags(fl *pflag.FlagSet) {
	fl.Float64Var(&opts.Tau, "tau", 0.97, "similarity threshold τ")
	fl.IntVar(&opts.Step, "step", 2, "N grows by this many requests per bin")
	fl.Float64Var(&opts.Eps, "eps", 0.05, "the table has converged once L1 stays ≤ eps (layers)")
	fl.StringVar(&opts.Stat, "stat", "mean", "depth statistic: mean, mean-std or min")
	fl.StringVar(&opts.Out, "out", ".", "directory for convergence.json (plot it with dlmcache plot convergence)")
	opts.similarityFiles.add(fl, "similarity.parquet files of one run")
}

func newCmdSweepN(f *factory, runF func(*sweepNOptions) error) *cobra.Command {
	return newCommand(&sweepNOptions{f: f}, runF, &cobra.Command{
		Use:   "n --from similarity.parquet...",
		Short: "Table convergence: L1 between tables from the first N and N-step requests per bin",
		Args:  cobra.NoArgs,
	})
}
