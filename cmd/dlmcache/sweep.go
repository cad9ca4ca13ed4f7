package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"github.com/dlmcache/dlmcache/cache"
	"github.com/dlmcache/dlmcache/datasets"
	"github.com/dlmcache/dlmcache/engine"
	"github.com/dlmcache/dlmcache/internal/progress"
	"github.com/dlmcache/dlmcache/profile"
)

// sweepCommon are the flags sweep tau, sweep refresh and sweep modules
// share.
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
	*engine.Engine
	f       *factory
	samples []datasets.Sample
	quiet   bool
}

func (c *sweepCommon) load(f *factory) (*sweepEnv, error) {
	samples, err := profile.SuiteSamples(c.Suites, c.Limit, c.Seed, datasets.DefaultOptions())
	if err != nil {
		return nil, err
	}
	env, err := engine.Build(c.Cache.config(f, c.modelFlags, regimeFlags{}))
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(c.Out, 0o755); err != nil {
		env.Close()
		return nil, err
	}
	return &sweepEnv{Engine: env, f: f, samples: samples, quiet: c.Quiet}, nil
}

// points evaluates no caching and one bicache configuration per x on the
// samples, the configurations taking turns request by request (so a slow
// spell on a shared machine slows them alike), and fills res.
func (e *sweepEnv) points(ctx context.Context, label string, xs []float64, meths []cache.Method, res *sweepResult) error {
	none, err := e.NewMethod("none", nil, nil)
	if err != nil {
		return err
	}
	es := []*profile.Evaluator{{Model: e.Model.Model, Method: none, Gen: e.Gen}}
	for _, m := range meths {
		es = append(es, &profile.Evaluator{Model: e.Model.Model, Method: m, Gen: e.Gen})
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

// sweepResult is what sweep tau and sweep refresh write: one point per
// parameter value, averaged over the suites.
type sweepResult struct {
	Param    string       `json:"param"`
	Points   []sweepPoint `json:"points"`
	Baseline *sweepPoint  `json:"baseline,omitempty"` // the method none, for reference
	Refresh  any          `json:"deep_layers,omitempty"`
}

type sweepPoint struct {
	X            float64 `json:"x"`
	Accuracy     float64 `json:"accuracy"`
	TokensPerSec float64 `json:"tokens_per_sec"`
	RowsFraction float64 `json:"rows_fraction"`
	MeanDepth    float64 `json:"mean_depth"`
	// FLOPsFraction is the matrix products' FLOPs over computing every
	// row; Refreshes the deep-layer refreshes per request.
	FLOPsFraction float64 `json:"flops_fraction"`
	Refreshes     float64 `json:"deep_refreshes_per_request"`
}

// parseFloats accepts "a,b,c" or "lo:hi:step".
func parseFloats(s string) ([]float64, error) {
	if parts := strings.Split(s, ":"); len(parts) == 3 {
		var v [3]float64
		for i, p := range parts {
			x, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
			if err != nil {
				return nil, fmt.Errorf("%q: %w", s, err)
			}
			v[i] = x
		}
		if v[2] <= 0 || v[1] < v[0] {
			return nil, fmt.Errorf("%q: want lo:hi:step with lo ≤ hi and step > 0", s)
		}
		var out []float64
		for i := 0; ; i++ {
			x := v[0] + float64(i)*v[2]
			if x > v[1]+1e-9 {
				break
			}
			out = append(out, x)
		}
		return out, nil
	}
	var out []float64
	for _, p := range strings.Split(s, ",") {
		x, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", s, err)
		}
		out = append(out, x)
	}
	return out, nil
}

// writeJSON writes v as indented JSON to dir/name and says so on f.ErrOut.
func writeJSON(f *factory, dir, name string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	p := filepath.Join(dir, name)
	if err := writeFileAtomic(p, append(b, '\n')); err != nil {
		return err
	}
	fmt.Fprintln(f.ErrOut, "wrote", p)
	return nil
}
