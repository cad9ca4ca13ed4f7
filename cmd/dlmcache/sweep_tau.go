package main

import (
	"context"
	"fmt"
	"os"

	"github.com/spf13/pflag"

	"github.com/dlmcache/dlmcache/cache"
	"github.com/dlmcache/dlmcache/datasets"
	"github.com/dlmcache/dlmcache/internal/progress"
	"github.com/dlmcache/dlmcache/lut"
	"github.com/dlmcache/dlmcache/profile"
)

// sweepCommon are the flags sweep tau and sweep refresh share.
type sweepCommon struct {
	modelFlags
	Suites []string
	Limit  int
	Seed   int64
	Cache  cacheFlags
	Out    string
	Quiet  bool
}

func (c *sweepCommon) addFlags(fl *pflag.FlagSet) {
	c.modelFlags.add(fl)
	fl.StringSliceVar(&c.Suites, "suite", []string{"all"}, "task suites")
	fl.IntVar(&c.Limit, "limit", 10, "samples per suite at each point")
	fl.Int64Var(&c.Seed, "seed", 1, "sample seed")
	addCacheFlags(fl, &c.Cache)
	fl.StringVar(&c.Out, "out", ".", "output directory")
	fl.BoolVar(&c.Quiet, "quiet", false, "no progress bar")
}

// sweepEnv is a loaded model with its samples and generation settings.
type sweepEnv struct {
	*methodEnv
	f       *factory
	samples []datasets.Sample
	quiet   bool
}

func (c *sweepCommon) load(f *factory) (*sweepEnv, error) {
	samples, err := profile.SuiteSamples(c.Suites, c.Limit, c.Seed, datasets.DefaultOptions())
	if err != nil {
		return nil, err
	}
	env, err := loadMethodEnv(f, c.modelFlags, regimeFlags{}, &c.Cache)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(c.Out, 0o755); err != nil {
		env.lm.Close()
		return nil, err
	}
	return &sweepEnv{methodEnv: env, f: f, samples: samples, quiet: c.Quiet}, nil
}

// points evaluates no caching and one bicache configuration per x on the
// samples, the configurations taking turns request by request (so a slow
// spell on a shared machine slows them alike), and fills res.
func (e *sweepEnv) points(ctx context.Context, label string, xs []float64, meths []cache.Method, res *sweepResult) error {
	none, err := e.method("none", e.cache, nil)
	if err != nil {
		return err
	}
	es := []*profile.Evaluator{{Model: e.lm.Model, Method: none, Gen: e.gen}}
	for _, m := range meths {
		es = append(es, &profile.Evaluator{Model: e.lm.Model, Method: m, Gen: e.gen})
	}
	bar := progress.New(e.f.ErrOut, label, "req", len(e.samples)*len(es), e.quiet)
	out, err := profile.EvaluateInterleaved(ctx, es, e.samples, func(d, _ int) { bar.Set(d) })
	bar.Done()
	if err != nil {
		return err
	}
	pt := func(x float64, r []profile.SuiteResult) sweepPoint {
		o := profile.Overall(r)
		return sweepPoint{X: x, Accuracy: o.Accuracy, TokensPerSec: o.TokensPerSec, RowsFraction: o.RowsFraction, MeanDepth: o.MeanDepth,
			FLOPsFraction: o.FLOPsFraction, Refreshes: float64(o.Refreshes) / float64(max(o.N, 1))}
	}
	base := pt(0, out[0])
	res.Baseline = &base
	for i, x := range xs {
		res.Points = append(res.Points, pt(x, out[i+1]))
	}
	return nil
}

func printSweep(f *factory, param string, r *sweepResult) {
	if r.Baseline != nil {
		fmt.Fprintf(f.Out, "%-8s accuracy %5.1f%%  tokens/s %7.1f  rows %5.1f%%\n", "none", 100*r.Baseline.Accuracy, r.Baseline.TokensPerSec, 100*r.Baseline.RowsFraction)
	}
	for _, p := range r.Points {
		fmt.Fprintf(f.Out, "%s=%-6.4g accuracy %5.1f%%  tokens/s %7.1f  rows %5.1f%%  depth %.2f", param, p.X, 100*p.Accuracy, p.TokensPerSec, 100*p.RowsFraction, p.MeanDepth)
		if b := r.Baseline; b != nil && b.TokensPerSec > 0 && p.FLOPsFraction > 0 {
			// The baseline computes every row: its FLOPs fraction is 1.
			fmt.Fprintf(f.Out, "  speed-up %.2f×  FLOPs predict %.2f×  refreshes/request %.1f", p.TokensPerSec/b.TokensPerSec, 1/p.FLOPsFraction, p.Refreshes)
		}
		fmt.Fprintln(f.Out)
	}
}

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
	defer env.lm.Close()
	res := &sweepResult{Param: "tau"}
	var meths []cache.Method
	for _, tau := range taus {
		t, err := profile.BuildTable(recs, info, tau, sim)
		if err != nil {
			return err
		}
		if err := t.Check(env.lm.Name, len(env.lm.Blocks), env.lm.Fingerprint); err != nil {
			return fmt.Errorf("--from: %w", err)
		}
		meth, err := env.method("bicache", &opts.Cache, t)
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
