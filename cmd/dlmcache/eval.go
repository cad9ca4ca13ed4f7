package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/dlmcache/dlmcache/cache"
	"github.com/dlmcache/dlmcache/datasets"
	"github.com/dlmcache/dlmcache/engine"
	"github.com/dlmcache/dlmcache/internal/progress"
	"github.com/dlmcache/dlmcache/profile"
)

type evalOptions struct {
	f *factory

	modelFlags
	suiteSampling
	regimeFlags
	Method string
	Cache  cacheFlags
	JSON   bool
	Quiet  bool
}

// suiteSampling is how bench and eval draw held-out samples: the task
// suites, the samples per suite, the seed, the lookup questions asked
// under one system message (a shared-prefix workload), and the filler
// prose around each system message's data (longer system messages).
type suiteSampling struct {
	Suites    []string
	Limit     int
	PerSystem int
	Seed      int64
	Filler    string // "MIN:MAX" estimated tokens; "": the suites' own
}

// add declares the sampling flags: --suite defaults to suites (nil: no
// suites, for a command with another request source, which more names in
// --suite's help) and --limit to limit.
func (s *suiteSampling) add(fl *pflag.FlagSet, suites []string, limit int, more string) {
	fl.StringSliceVar(&s.Suites, "suite", suites, "task suites: all, names from "+fmt.Sprint(datasets.Suites())+", or KIND=FILE for a public benchmark (gsm8k, arc, math500, gpqa)"+more)
	fl.IntVar(&s.Limit, "limit", limit, "samples per suite")
	fl.Int64Var(&s.Seed, "seed", 1, "sample seed")
	fl.IntVar(&s.PerSystem, "questions-per-system", 1, "ask each system message this many questions of its suite, about other items of its data (keys, constants, letters, names): a shared-prefix workload, requests sharing system messages")
	d := datasets.DefaultOptions()
	fl.StringVar(&s.Filler, "filler-tokens", "", fmt.Sprintf("MIN:MAX: the filler prose around each system message's data, in estimated tokens, drawn per sample (empty: the suites' own, %d:%d; longer system messages, as deployments carry documents and rules)", d.MinFiller, d.MaxFiller))
}

// genOptions are the suites' generator options, with --filler-tokens.
func (s *suiteSampling) genOptions() (datasets.GenOptions, error) {
	o := datasets.DefaultOptions()
	if s.Filler == "" {
		return o, nil
	}
	lo, hi, ok := strings.Cut(s.Filler, ":")
	a, err1 := strconv.Atoi(lo)
	b, err2 := strconv.Atoi(hi)
	if !ok || err1 != nil || err2 != nil || a < 0 || b < a || b > 100000 {
		return o, fmt.Errorf("--filler-tokens %q: want MIN:MAX, 0 ≤ MIN ≤ MAX ≤ 100000 (estimated tokens)", s.Filler)
	}
	o.MinFiller, o.MaxFiller = a, b
	return o, nil
}

// samples draws the samples, --questions-per-system questions to a system
// message.
func (s *suiteSampling) samples() ([]datasets.Sample, error) {
	o, err := s.genOptions()
	if err != nil {
		return nil, err
	}
	samples, err := profile.SuiteSamples(s.Suites, s.Limit, s.Seed, o)
	if err != nil {
		return nil, err
	}
	return datasets.Shared(samples, s.PerSystem)
}

func (opts *evalOptions) run(ctx context.Context) error {
	samples, err := opts.samples()
	if err != nil {
		return err
	}
	cfg := opts.Cache.config(opts.f, opts.modelFlags, opts.regimeFlags)
	cfg.Method = opts.Method
	return withEngine(cfg, func(eng *engine.Engine) error {
		lm, gen, meth := eng.Model, eng.Gen, eng.Method
		if eng.StoreNote != "" {
			fmt.Fprintf(opts.f.ErrOut, "eval: %s\n", eng.StoreNote)
		}
		e := &profile.Evaluator{Model: lm.Model, Method: meth, Gen: meth.Gen(gen)}
		if err := guideUsed(eng, []*profile.Evaluator{e}); err != nil {
			return err
		}
		bar := progress.New(opts.f.ErrOut, "eval "+opts.Method, "req", len(samples), opts.Quiet)
		e.Progress = func(d, _ int) { bar.Set(d) }
		res, err := e.Evaluate(ctx, samples)
		bar.Done()
		if err != nil {
			return err
		}
		all := profile.Overall(res)
		if opts.JSON {
			enc := json.NewEncoder(opts.f.Out)
			enc.SetIndent("", "  ")
			return enc.Encode(map[string]any{"model": lm.Name, "fingerprint": lm.Fingerprint, "arch": lm.Config.ArchName(), "gen_length": gen.GenLength,
				"steps": gen.Steps, "method": opts.Method, "suites": res, "average": all})
		}
		printResults(opts.f.Out, append(res, all))
		return nil
	})
}

func (opts *evalOptions) flags(fl *pflag.FlagSet) {
	opts.modelFlags.add(fl)
	opts.suiteSampling.add(fl, []string{"all"}, 50, "")
	opts.regimeFlags.add(fl)
	fl.StringVar(&opts.Method, "method", "none", "caching method: "+strings.Join(cache.Names(), ", "))
	addCacheFlags(fl, &opts.Cache)
	addGuideFlag(fl, &opts.Cache.Guide)
	fl.BoolVar(&opts.JSON, "json", false, "print JSON: per-suite results and the average")
	fl.BoolVar(&opts.Quiet, "quiet", false, "no progress bar")
}

func printResults(w io.Writer, rs []profile.SuiteResult) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	guided := slices.ContainsFunc(rs, func(r profile.SuiteResult) bool { return r.GuidedSteps > 0 })
	head := "method\tsuite\tn\taccuracy\ttokens/s\tNFE\trows computed\tratio\tdepth\tprefix hit tokens"
	if guided {
		head += "\tguide NFE\ttokens/step\tDLM s\tguide s"
	}
	fmt.Fprintln(tw, head)
	for _, r := range rs {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.1f%%\t%.1f\t%d\t%.1f%%\t%.3f\t%.2f\t%d/%d", r.Method, r.Suite, r.N, 100*r.Accuracy,
			r.TokensPerSec, r.NFE, 100*r.RowsFraction, r.MeanRatio, r.MeanDepth, r.HitTokens, r.QueryTokens)
		if guided {
			fmt.Fprintf(tw, "\t%d\t%.2f\t%.2f\t%.2f", r.GuideNFE, r.AcceptLen, r.DLMSeconds, r.GuideSeconds)
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
}

func newCmdEval(f *factory, runF func(*evalOptions) error) *cobra.Command {
	return newCommand(&evalOptions{f: f}, runF, &cobra.Command{
		Use:   "eval",
		Short: "Accuracy and throughput on the task suites (held-out system messages)",
		Long: `Eval generates answers for held-out samples of the task suites (system
messages never seen in training) and checks the text after "##" strictly.
It reports per-suite accuracy, tokens/s, forward evaluations, the fraction of
layer-rows computed and the mean shared-prefix ratio.

Methods:` + methodsHelp(),
		Example: `  dlmcache eval --suite all --limit 50
  dlmcache eval --suite lookup --method bicache --lut out/table.json --json`,
		Args: cobra.NoArgs,
	})
}
