package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/dlmcache/dlmcache/engine"
	"github.com/dlmcache/dlmcache/internal/progress"
	"github.com/dlmcache/dlmcache/lut"
	"github.com/dlmcache/dlmcache/profile"
)

type profileOptions struct {
	f *factory

	modelFlags
	requestSampling
	Tau        float64
	Similarity string
	regimeFlags
	AllSteps bool
	Shard    string
	Out      string
	Resume   bool
	Quiet    bool
}

func (opts *profileOptions) run(ctx context.Context) error {
	if err := lut.CheckTau(opts.Tau); err != nil {
		return fmt.Errorf("--tau: %w", err)
	}
	sim, err := parseSimilarity(opts.Similarity)
	if err != nil {
		return err
	}
	if opts.PerRatio <= 0 {
		return fmt.Errorf("--per-ratio must be positive, got %d", opts.PerRatio)
	}
	edges, shardK, shardN, err := opts.binsAndShard(opts.Shard)
	if err != nil {
		return err
	}
	return withEngine(modelConfig(opts.f, opts.modelFlags, opts.regimeFlags), func(eng *engine.Engine) error {
		lm, gen := eng.Model, eng.Gen
		if B := lm.Config.CausalBlock(); B > 0 {
			fmt.Fprintf(opts.f.ErrOut, "profile: block-causal model (blocks of %d tokens): each request's shared prefix is measured at its full blocks, the part a cache reuses exactly\n", B)
		}
		preqs, unfilledS, err := opts.sample(opts.f, lm, gen.GenLength, edges, shardK, shardN)
		if err != nil {
			return err
		}
		info := profile.RunInfo{
			Model:  lm.ID(),
			Regime: gen.Regime, AllSteps: opts.AllSteps,
			Tau: opts.Tau, Similarity: sim, Ratios: opts.Ratios, Edges: edges, PerRatio: opts.PerRatio, Seed: opts.Seed,
			Shard: opts.Shard, Data: opts.Data, Systems: opts.Systems, Unfilled: unfilledS, MaxTokens: opts.MaxTokens,
		}
		bar := progress.New(opts.f.ErrOut, "profile", "req", len(preqs), opts.Quiet)
		r := &profile.Runner{Model: lm.Network, Gen: gen, AllSteps: opts.AllSteps, Info: info, OutDir: opts.Out, Resume: opts.Resume,
			Progress: func(d, _ int) { bar.Set(d) }}
		res, err := r.Run(ctx, preqs)
		bar.Done()
		if err != nil {
			return err
		}
		fmt.Fprint(opts.f.Out, res.Table.String())
		names := []string{profile.SimilarityFile, profile.TableFile}
		if res.CrossTable != nil {
			names = append(names, profile.CrossTableFile)
		}
		names = append(names, profile.RunFile)
		paths := make([]string, len(names))
		for i, n := range names {
			paths[i] = filepath.Join(opts.Out, n)
		}
		fmt.Fprintf(opts.f.ErrOut, "wrote %s (%d requests, %d resumed)\n", strings.Join(paths, ", "), len(preqs), res.Resumed)
		if len(unfilledS) > 0 {
			fmt.Fprintf(opts.f.ErrOut, "%d bin(s) not filled: %s\n", len(unfilledS), strings.Join(unfilledS, "; "))
		}
		return nil
	})
}

func (opts *profileOptions) flags(fl *pflag.FlagSet) {
	opts.modelFlags.add(fl)
	opts.requestSampling.addFlags(fl)
	fl.StringVar(&opts.Ratios, "ratios", "0.05:0.95:0.05", "ratio bins: LO:HI:STEP or ascending edges a,b,c")
	fl.IntVar(&opts.PerRatio, "per-ratio", 64, "requests per ratio bin (N)")
	fl.Float64Var(&opts.Tau, "tau", 0.97, "similarity threshold τ of the table")
	addSimilarityFlag(fl, &opts.Similarity)
	opts.regimeFlags.add(fl)
	fl.BoolVar(&opts.AllSteps, "all-steps", false, "measure at every denoising step (for heatmaps), not only the first")
	fl.StringVar(&opts.Shard, "shard", "", "run shard K/N of the requests (0 ≤ K < N)")
	fl.StringVar(&opts.Out, "out", "profile-out", "output directory")
	fl.BoolVar(&opts.Resume, "resume", false, "continue an interrupted run in --out")
	fl.BoolVar(&opts.Quiet, "quiet", false, "no progress bar")
}

func newCmdProfile(f *factory, runF func(*profileOptions) error) *cobra.Command {
	return newCommand(&profileOptions{f: f}, runF, &cobra.Command{
		Use:   "profile",
		Short: "Measure prefix K/V similarity per layer and build the ratio→depth table",
		Long: `Profile samples requests into shared-prefix-ratio bins (system prompts ×
WildChat or WildChat-style user prompts), runs each through the model twice —
the prefix alone (the K/V a cross-request cache would hold) and the full input
string with no caching (the reference) — and records the cosine similarity of
the prefix's K, V and K⊕V at every layer (and every denoising step with
--all-steps), and of its worst row's K⊕V. It writes, to --out:

  similarity.parquet  one row per (request, layer, step), run parameters in the metadata
  table-cosine.json   the ratio→depth estimate at --tau by --similarity (rebuild at any τ
                      with dlmcache lut build); an estimate, not checked against answers:
                      dlmcache calibrate turns it into table.json, the table to serve
  table-cosine-row-min.json  the same by the worst prefix row (when --similarity is kv)
  run.json            the run's parameters, unfilled bins and duration

Each finished request is logged first to similarity.partial.jsonl, so an
interrupted run continues with --resume. --shard K/N runs one of N disjoint
parts (for several machines); dlmcache lut build --from merges them.`,
		Example: `  dlmcache profile                                   # bundled model, builtin data
  dlmcache profile --model llada --data wildchat/*.parquet --per-ratio 64 --shard 0/4 --out prof-0`,
		Args: cobra.NoArgs,
	})
}
