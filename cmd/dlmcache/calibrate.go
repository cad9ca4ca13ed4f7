package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/dlmcache/dlmcache/cache"
	"github.com/dlmcache/dlmcache/engine"
	"github.com/dlmcache/dlmcache/internal/progress"
	"github.com/dlmcache/dlmcache/lut"
	"github.com/dlmcache/dlmcache/profile"
)

type calibrateOptions struct {
	f *factory

	modelFlags
	requestSampling
	LUT        string
	Sources    []string
	Gate       string
	Agreement  float64
	Confidence float64
	Method     cache.Options // bicache's --refresh (cache.AddFlags)
	Stat       string
	regimeFlags
	Shard      string
	Merge      []string
	Out        string
	Resume     bool
	Quiet      bool
	Mode       string
	Grid       []string
	MaxLoss    float64
	Risk       float64
	MinGain    float64
	Budget     time.Duration
	CacheBytes int64
	Guide      string
}

// checkCommon validates the flags both modes read: the agreement target,
// its confidence, the requests per ratio, and shard vs merge.
func (opts *calibrateOptions) checkCommon() error {
	switch {
	case !(opts.Agreement > 0 && opts.Agreement <= 1):
		return fmt.Errorf("--agreement %g: want (0, 1]", opts.Agreement)
	case !(opts.Confidence > 0.5 && opts.Confidence < 1):
		return fmt.Errorf("--confidence %g: want (0.5, 1)", opts.Confidence)
	case opts.PerRatio <= 0:
		return fmt.Errorf("--per-ratio must be positive, got %d", opts.PerRatio)
	case opts.Shard != "" && len(opts.Merge) > 0:
		return fmt.Errorf("--shard and --merge: a shard runs, a merge only reads shards; give one")
	}
	return nil
}

func (opts *calibrateOptions) run(ctx context.Context) error {
	switch opts.Mode {
	case "methods":
		return calibrateMethods(ctx, opts)
	case "depth":
	default:
		return fmt.Errorf("--mode %q: want methods or depth", opts.Mode)
	}
	if opts.Guide != "" {
		return fmt.Errorf("--guide is the methods mode's (its guided settings); --mode depth calibrates bicache's depths only")
	}
	if opts.Gate != profile.GateToken && opts.Gate != profile.GateAnswer {
		return fmt.Errorf("--gate %q: want token or answer", opts.Gate)
	}
	if err := opts.checkCommon(); err != nil {
		return err
	}
	if opts.Method.BiCache.Refresh < 0 {
		return fmt.Errorf("--refresh must be positive (0: the model card's), got %d", opts.Method.BiCache.Refresh)
	}
	for _, s := range opts.Sources {
		if s != "store" && s != "request" {
			return fmt.Errorf("--sources: %q is not a deep source to calibrate (want store, request)", s)
		}
	}
	stat, err := parseStat(opts.Stat)
	if err != nil {
		return err
	}
	return withEngine(modelConfig(opts.f, opts.modelFlags, opts.regimeFlags), func(eng *engine.Engine) error {
		lm, gen := eng.Model, eng.Gen
		var start *lut.Table
		if opts.LUT != "" {
			if start, err = engine.ReadTable(opts.LUT, lm); err != nil {
				return err
			}
			if err := start.CheckRegime(gen.Regime); err != nil {
				return fmt.Errorf("--lut %s: %w (calibrate in the table's regime, or profile this one)", opts.LUT, err)
			}
		}
		edges, shardK, shardN, err := opts.binsAndShard(opts.Shard)
		if err != nil {
			return err
		}
		reqs, _, err := opts.sample(opts.f, lm, gen.GenLength, edges, shardK, shardN)
		if err != nil {
			return err
		}
		c := &profile.Calibrator{
			Model: lm.Network, Gen: gen, Start: start, Stat: stat, Gate: opts.Gate, Target: opts.Agreement,
			Z: normalQuantile(opts.Confidence), Stop: lm.AnswerEnd, Warn: func(w string) { fmt.Fprintln(opts.f.ErrOut, "warning:", w) }, Exhaustive: opts.Shard != "", OutDir: opts.Out, Resume: opts.Resume,
			Run: profile.CalibrationRun{Model: lm.ID(),
				Regime: gen.Regime, Refresh: lm.Card.RefreshOr(opts.Method.BiCache.Refresh),
				Sources: slices.Clone(opts.Sources), Edges: edges, Seed: opts.Seed, Data: opts.Data, StartFrom: opts.LUT, Shard: opts.Shard},
		}
		t, err := opts.tableOrShard("bin·source", "depth of", profile.CalibrationFile, len(reqs), func() (*lut.Table, error) {
			t, err := c.Merge(opts.Merge, reqs)
			if err != nil {
				return nil, err
			}
			if err := os.MkdirAll(opts.Out, 0o755); err != nil {
				return nil, err
			}
			return t, t.Write(filepath.Join(opts.Out, profile.CalibratedTable))
		}, func(bar *lateBar) (*lut.Table, error) {
			c.Progress = bar.set
			return c.Calibrate(ctx, reqs)
		})
		if t == nil || err != nil {
			return err
		}
		fmt.Fprint(opts.f.Out, t.String())
		fmt.Fprintf(opts.f.ErrOut, "wrote %s (%d requests, sources %s)\n", filepath.Join(opts.Out, profile.CalibratedTable), len(reqs), strings.Join(opts.Sources, ", "))
		return nil
	})
}

func (opts *calibrateOptions) flags(fl *pflag.FlagSet) {
	opts.modelFlags.add(fl)
	opts.requestSampling.addFlags(fl)
	fl.StringVar(&opts.LUT, "lut", "", "cosine table (table.json from dlmcache profile): the table calibrated (its bins take the calibration bin holding their middle) and the depths the search starts from; empty: the calibration bins, starting at depth 1")
	fl.StringVar(&opts.Ratios, "ratios", "0.5:1:0.1", "calibration bins: LO:HI:STEP or ascending edges; a table bin outside them keeps no reuse (depth 0)")
	fl.IntVar(&opts.PerRatio, "per-ratio", 150, "requests per calibration bin and class (methods mode: the changed-answer test's cap; a setting is accepted on all of them, stopped early once it cannot pass; at --risk 0.02 and --confidence 0.95 it needs ≥ 149 with no changed answer, 236 allow one; depth mode at 90% confidence: 0.9 needs ≥ 15 agreeing samples, 0.95 ≥ 32, 0.99 ≥ 163)")
	fl.StringSliceVar(&opts.Sources, "sources", []string{"store", "request"}, "deep sources to calibrate: store, request")
	fl.StringVar(&opts.Gate, "gate", profile.GateAnswer, "agreement a depth must keep: answer (whole answers unchanged) or token (per answer token: laxer, one changed token in twenty passes 0.95)")
	fl.Float64Var(&opts.Agreement, "agreement", 0.9, "depth mode: the Wilson lower bound the gated agreement must reach (0.9 needs ≥ 15 agreeing requests a bin with the answer gate; 0.99 is out of reach: depth 1, exact reuse but for float rounding, already changes ~2% of the bundled model's answer tokens)")
	fl.Float64Var(&opts.Confidence, "confidence", 0.95, "one-sided confidence of the bounds: depth mode's Wilson bound; methods mode's changed-answer bound (a setting changing --risk of the answers is accepted with probability at most 1 − this) and speed intervals")
	cache.AddFlags(fl, &opts.Method, "refresh")
	fl.StringVar(&opts.Stat, "stat", "mean", "statistic of the cosine table's start depth: mean, mean-std, min")
	opts.regimeFlags.add(fl)
	fl.StringVar(&opts.Shard, "shard", "", "evaluate every depth for shard K/N of the requests (merge with --merge)")
	fl.StringSliceVar(&opts.Merge, "merge", nil, "merge these shard directories' outcomes into one table (same flags as the shards, without --shard)")
	fl.StringVar(&opts.Out, "out", "calibrate-out", "output directory")
	fl.BoolVar(&opts.Resume, "resume", false, "continue an interrupted run in --out")
	fl.BoolVar(&opts.Quiet, "quiet", false, "no progress bar")
	fl.StringVar(&opts.Mode, "mode", "methods", "methods: search the method space (methods × knobs × decoders) per ratio bin and answer-length class and write a table that chooses (format v3); depth: calibrate bicache's depth per bin and deep source only (format v2)")
	fl.StringArrayVar(&opts.Grid, "setting", nil, "methods mode: a setting to try, as \"NAME@DECODER knob=v … source=S\" (repeat the flag); default: every method's declared grid (dlmcache calibrate --help lists it)")
	fl.Float64Var(&opts.MaxLoss, "max-loss", 1, "methods mode: the accuracy (points against none) a user may lose: a setting must lose at most this much on the bin's requests that carry reference answers, besides meeting --agreement")
	fl.Float64Var(&opts.Risk, "risk", profile.DefaultChangeTest.Risk, "methods mode: the rate of answers changed from the uncached ones a setting must be shown to stay below: its one-sided Clopper–Pearson bound at --confidence, on the bin's --per-ratio requests")
	fl.Float64Var(&opts.MinGain, "min-gain", 0.1, "methods mode: a setting adding approximation replaces a simpler one only if its speed-up over it, paired by request, is at least 1 + this at the lower end of its confidence interval")
	fl.DurationVar(&opts.Budget, "budget", 0, "methods mode: stop starting settings on new requests after this long (those cut short do not pass); 0: no limit")
	fl.Int64Var(&opts.CacheBytes, "cache-bytes", 1<<30, "methods mode: each setting's prefix store budget in bytes")
	fl.StringVar(&opts.Guide, "guide", "", "methods mode: the guided decoder's guide (an autoregressive LM with the model's vocabulary and chat template, as --model names it): the default grid adds none@guided, none@guided:0.9 and each primitive cache method under guided (bicache, block and d2cache at their first grid point; prefix-all, dllm-cache and freecache at their defaults), and the table records the guide's fingerprint (serve --lut then needs the same --guide)")
}

// tableOrShard is the table a calibration (either mode) ends with:
// merge's, from the --merge shard directories, else run's (its progress on
// a lateBar counting unit). It is nil, said on ErrOut, where run was one
// --shard: every what (a setting on, a depth of) n requests, its outcomes
// kept in file under --out for a later --merge.
func (opts *calibrateOptions) tableOrShard(unit, what, file string, n int,
	merge func() (*lut.Table, error), run func(*lateBar) (*lut.Table, error)) (*lut.Table, error) {
	var t *lut.Table
	var err error
	if len(opts.Merge) > 0 {
		t, err = merge()
	} else {
		bar := &lateBar{f: opts.f, unit: unit, quiet: opts.Quiet}
		t, err = run(bar)
		bar.done()
	}
	if t != nil || err != nil {
		return t, err
	}
	fmt.Fprintf(opts.f.ErrOut, "shard %s: every %s %d requests in %s; merge the shards with --merge\n",
		opts.Shard, what, n, filepath.Join(opts.Out, file))
	return nil, nil
}

// lateBar is calibrate's progress bar, whose total (bins × sources, or
// requests × settings) is known at the first report.
type lateBar struct {
	f     *factory
	unit  string
	quiet bool
	bar   *progress.Bar
}

func (b *lateBar) set(done, total int) {
	if b.bar == nil {
		b.bar = progress.New(b.f.ErrOut, "calibrate", b.unit, total, b.quiet)
	}
	b.bar.Set(done)
}

func (b *lateBar) done() { b.bar.Done() }

// normalQuantile is the standard normal quantile Φ⁻¹(p) (bisection on
// math.Erfc; a bound's z needs no more).
func normalQuantile(p float64) float64 {
	lo, hi := -10.0, 10.0
	for range 200 {
		mid := (lo + hi) / 2
		if 0.5*math.Erfc(-mid/math.Sqrt2) < p {
			lo = mid
		} else {
			hi = mid
		}
	}
	return (lo + hi) / 2
}

func newCmdCalibrate(f *factory, runF func(*calibrateOptions) error) *cobra.Command {
	return newCommand(&calibrateOptions{f: f}, runF, &cobra.Command{
		Use:   "calibrate",
		Short: "Check each ratio bin's depth against the model's own answers and write a calibrated table",
		Long: `Calibrate samples requests into ratio bins (--ratios, coarser than a profile's:
each needs enough answer tokens for the bound) as profile does, answers each with no caching (greedy: the
reference), then with BiCache at candidate depths, per deep source (store:
the prefix K/V shared across requests; request: the request's own first
step). Per bin and source it keeps the deepest depth whose agreement with
the reference — per whole answer (--gate answer, the default) or per answer
token (--gate token) — has a one-sided Wilson lower bound (--confidence) of
at least --agreement. The search starts at the cosine table's depth and walks
up while depths pass, or down until one does; depth 0 (no reuse) always
does. No reference answers are needed: the uncached answer is the
reference, so WildChat prompts (--data) calibrate too.

It writes, to --out:

  table.json         the table (format dlmcache.lut/v2) with each bin's calibrated depth
                     per source, its agreement, sample count and every depth tried
                     (dlmcache lut show prints them); serve --lut uses them
  calibration.jsonl  every reference answer and every (request, source, depth) outcome,
                     written before it is used: --resume continues an interrupted run
                     to the identical table

--shard K/N evaluates every depth for one of N disjoint parts of the
requests (for several machines: deploy/k8s/); --merge DIR,DIR,... then
searches their merged outcomes and writes the table one run would have.`,
		Example: `  dlmcache profile --out prof && dlmcache calibrate --mode depth --lut prof/table-cosine.json --data suites,external --out calib
  dlmcache calibrate --mode depth --lut prof/table-cosine.json --shard 0/4 --out calib-0     # on four machines
  dlmcache calibrate --mode depth --lut prof/table-cosine.json --merge calib-0,calib-1,calib-2,calib-3 --out calib`,
		Args: cobra.NoArgs,
	})
}
