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

type sweepRefreshOptions struct {
	f *factory
	sweepCommon
	Rs       string
	PictureR int
	PictureN int
}

func (opts *sweepRefreshOptions) run(ctx context.Context) error {
	env, err := opts.load(opts.f)
	if err != nil {
		return err
	}
	defer env.Close()
	table := env.Table
	var rs []float64
	if opts.Rs != "" {
		if rs, err = parseFloats(opts.Rs); err != nil {
			return fmt.Errorf("--rs %w", err)
		}
	} else {
		for r := 1; r <= env.Gen.Steps; r *= 2 {
			rs = append(rs, float64(r))
		}
	}
	res := &sweepResult{Param: "refresh"}
	var meths []cache.Method
	for _, r := range rs {
		if r < 1 || r != float64(int(r)) {
			return fmt.Errorf("--rs: refresh periods must be positive integers, got %v", r)
		}
		meth, err := env.NewMethod("bicache", nil, func(o *cache.Options) { o.BiCache.Refresh = int(r) })
		if err != nil {
			return err
		}
		meths = append(meths, meth)
	}
	if err := env.points(ctx, fmt.Sprintf("sweep none + %d R", len(rs)), rs, meths, res); err != nil {
		return err
	}
	pr := opts.PictureR
	if pr <= 0 {
		pr = max(1, env.Gen.Steps/4)
	}
	var pic profile.RefreshPicture
	n := min(opts.PictureN, len(env.samples))
	for _, s := range env.samples[:n] {
		ids, prefix, err := env.Model.Tokenizer.EncodeChat(s.System, s.User)
		if err != nil {
			return err
		}
		p, err := profile.MeasureRefresh(ctx, env.Model.Network, ids, prefix, env.Gen, pr)
		if err != nil {
			return err
		}
		pic.Add(p)
	}
	if n > 0 {
		pic.Scale(float64(n))
		pic.R = pr
		res.Refresh = pic
	}
	printSweep(opts.f, "R", res)
	d, _ := table.Lookup(0.9, lut.Mean)
	fmt.Fprintf(opts.f.Out, "deep-layer prefix K/V similarity (mean over %d requests and all steps; R=%d; table depth at r=0.9: %d)\n", n, pr, d)
	fmt.Fprintf(opts.f.Out, "%6s %14s %8s %10s   worst row: %14s %8s %10s\n", "layer", "cross-request", "stale", "refreshed", "cross-request", "stale", "refreshed")
	for i, l := range pic.Layers {
		fmt.Fprintf(opts.f.Out, "%6d %14.4f %8.4f %10.4f              %14.4f %8.4f %10.4f\n", l, pic.Cross[i], pic.Stale[i], pic.Refreshed[i],
			pic.CrossRowMin[i], pic.StaleRowMin[i], pic.RefreshedRowMin[i])
	}
	return writeJSON(opts.f, opts.Out, "sweep-refresh.json", res)
}

func (opts *sweepRefreshOptions) flags(fl *pflag.FlagSet) {
	opts.addFlags(fl)
	fl.StringVar(&opts.Rs, "rs", "", "refresh periods R: a,b,c or lo:hi:step (default: 1, 2, 4, … up to the model's step count)")
	fl.IntVar(&opts.PictureR, "picture-refresh", 0, "R of the deep-layer picture (default: a quarter of the steps, at least 1)")
	fl.IntVar(&opts.PictureN, "picture-requests", 8, "requests averaged in the deep-layer picture")
	_ = cobra.MarkFlagRequired(fl, "lut")
}

func newCmdSweepRefresh(f *factory, runF func(*sweepRefreshOptions) error) *cobra.Command {
	return newCommand(&sweepRefreshOptions{f: f}, runF, &cobra.Command{
		Use:   "refresh --lut table.json",
		Short: "Accuracy and throughput of BiCache vs the deep-layer refresh period R, and the deep-layer similarity picture",
		Long: `Sweep refresh evaluates BiCache at several refresh periods R, and measures, per
layer, how similar the prefix K/V are to the ones the request really has at
each step when they are reused across requests (computed alone), computed
once per request (stale after step 1), or refreshed every R steps.`,
		Args: cobra.NoArgs,
	})
}
