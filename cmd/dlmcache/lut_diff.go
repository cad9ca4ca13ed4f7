package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/dlmcache/dlmcache/lut"
)

type lutDiffOptions struct {
	f    *factory
	A, B string
	Stat string
}

func parseStat(s string) (lut.Statistic, error) {
	switch st := lut.Statistic(s); st {
	case lut.Mean, lut.MeanStd, lut.MinStat:
		return st, nil
	}
	return "", fmt.Errorf("--stat %q: want mean, mean-std or min", s)
}

func (opts *lutDiffOptions) run(context.Context) error {
	stat, err := parseStat(opts.Stat)
	if err != nil {
		return err
	}
	a, err := lut.Read(opts.A)
	if err != nil {
		return err
	}
	b, err := lut.Read(opts.B)
	if err != nil {
		return err
	}
	d, err := lut.L1(a, b, stat)
	if err != nil {
		return err
	}
	fmt.Fprintf(opts.f.Out, "L1 %.4f layers (mean |depth difference| over bins filled in both)\n", d)
	for i := range a.Bins {
		x, y := a.Bins[i], b.Bins[i]
		if x.Count == 0 || y.Count == 0 {
			continue
		}
		dx, dy := x.Depth(stat, a.Model.NLayers), y.Depth(stat, b.Model.NLayers)
		if dx != dy {
			fmt.Fprintf(opts.f.Out, "  [%.2f, %.2f)  %d → %d\n", x.Lo, x.Hi, dx, dy)
		}
	}
	return nil
}

func (opts *lutDiffOptions) setArgs(args []string) { opts.A, opts.B = args[0], args[1] }

func (opts *lutDiffOptions) flags(fl *pflag.FlagSet) {
	fl.StringVar(&opts.Stat, "stat", "mean", "depth statistic: mean, mean-std or min")
}

func newCmdLutDiff(f *factory, runF func(*lutDiffOptions) error) *cobra.Command {
	return newCommand(&lutDiffOptions{f: f}, runF, &cobra.Command{
		Use:   "diff A.json B.json",
		Short: "L1 distance between two tables' depths (mean over bins both filled)",
		Args:  cobra.ExactArgs(2),
	})
}
