package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/dlmcache/dlmcache/datasets"
	"github.com/dlmcache/dlmcache/internal/progress"
	"github.com/dlmcache/dlmcache/lut"
	"github.com/dlmcache/dlmcache/profile"
)

type profileOptions struct {
	f *factory

	Model       string
	Device      string
	Threads     int
	Data        []string
	Systems     []string
	Language    string
	UserPrompts int
	MaxTokens   int
	Ratios      string
	PerRatio    int
	Tau         float64
	Similarity  string
	GenLength   int
	Steps       int
	BlockLength int
	AllSteps    bool
	Shard       string
	Seed        int64
	Out         string
	Resume      bool
	Quiet       bool
}

func newCmdProfile(f *factory, runF func(*profileOptions) error) *cobra.Command {
	opts := &profileOptions{f: f}
	cmd := &cobra.Command{
		Use:   "profile",
		Short: "Measure prefix K/V similarity per layer and build the ratio→depth table",
		Long: `Profile samples requests into shared-prefix-ratio bins (system prompts ×
WildChat or WildChat-style user prompts), runs each through the model twice —
the prefix alone (the K/V a cross-request cache would hold) and the full input
string with no caching (the reference) — and records the cosine similarity of
the prefix's K, V and K⊕V at every layer (and every denoising step with
--all-steps), and of its worst row's K⊕V. It writes, to --out:

  similarity.parquet  one row per (request, layer, step), run parameters in the metadata
  table.json          the ratio→safe-depth table at --tau by --similarity (rebuild at any τ
                      with dlmcache lut build)
  table-row-min.json  the same by the worst prefix row (when --similarity is kv): the
                      table to serve with --deep-source store or recompute
  run.json            the run's parameters, unfilled bins and duration

Each finished request is logged first to similarity.partial.jsonl, so an
interrupted run continues with --resume. --shard K/N runs one of N disjoint
parts (for several machines); dlmcache lut build --from merges them.`,
		Example: `  dlmcache profile                                   # bundled model, builtin data
  dlmcache profile --model llada --data wildchat/*.parquet --per-ratio 64 --shard 0/4 --out prof-0`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if runF != nil {
				return runF(opts)
			}
			return profileRun(cmd.Context(), opts)
		},
	}
	fl := cmd.Flags()
	addModelFlags(fl, &opts.Model, &opts.Device, &opts.Threads)
	fl.StringSliceVar(&opts.Data, "data", []string{"builtin"}, "user prompts: builtin (WildChat-style, generated) and/or WildChat parquet files or directories")
	fl.StringSliceVar(&opts.Systems, "system-prompts", []string{"builtin"}, "system prompts: builtin, builtin:NAME, or @FILE (one prompt per file)")
	fl.StringVar(&opts.Language, "language", "English", "WildChat language filter (empty: all)")
	fl.IntVar(&opts.UserPrompts, "user-prompts", 2000, "number of builtin WildChat-style prompts to generate")
	fl.IntVar(&opts.MaxTokens, "max-tokens", 1024, "longest input string (prompt + gen length) a request may have; 0: no bound")
	fl.StringVar(&opts.Ratios, "ratios", "0.05:0.95:0.05", "ratio bins: LO:HI:STEP or ascending edges a,b,c")
	fl.IntVar(&opts.PerRatio, "per-ratio", 64, "requests per ratio bin (N)")
	fl.Float64Var(&opts.Tau, "tau", 0.97, "similarity threshold τ of the table")
	addSimilarityFlag(fl, &opts.Similarity)
	fl.IntVar(&opts.GenLength, "gen-length", 0, "answer slots; 0: the model's default")
	fl.IntVar(&opts.Steps, "steps", 0, "denoising steps (used with --all-steps); 0: the model's default")
	fl.IntVar(&opts.BlockLength, "block-length", 0, "block length (used with --all-steps); 0: the model's default")
	fl.BoolVar(&opts.AllSteps, "all-steps", false, "measure at every denoising step (for heatmaps), not only the first")
	fl.StringVar(&opts.Shard, "shard", "", "run shard K/N of the requests (0 ≤ K < N)")
	fl.Int64Var(&opts.Seed, "seed", 1, "sampling seed (every shard must use the same)")
	fl.StringVar(&opts.Out, "out", "profile-out", "output directory")
	fl.BoolVar(&opts.Resume, "resume", false, "continue an interrupted run in --out")
	fl.BoolVar(&opts.Quiet, "quiet", false, "no progress bar")
	return cmd
}

func profileRun(ctx context.Context, opts *profileOptions) error {
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
	edges, err := datasets.ParseRatioBins(opts.Ratios)
	if err != nil {
		return err
	}
	shardK, shardN := 0, 1
	if opts.Shard != "" {
		if shardK, shardN, err = datasets.ParseShard(opts.Shard); err != nil {
			return err
		}
	}
	systems, err := datasets.LoadSystemPrompts(opts.Systems)
	if err != nil {
		return err
	}
	users, err := datasets.LoadUserPrompts(opts.Data, datasets.WildChatFilter{Language: opts.Language}, opts.Seed, opts.UserPrompts)
	if err != nil {
		return err
	}
	lm, err := loadModel(opts.f, opts.Model, opts.Device, opts.Threads)
	if err != nil {
		return err
	}
	defer lm.Close()
	gen, err := lm.genOptions(opts.GenLength, opts.Steps, opts.BlockLength)
	if err != nil {
		return err
	}
	count := func(system, user string) (int, int, error) {
		ids, m, err := lm.Tokenizer.EncodeChat(system, user)
		return m, len(ids), err
	}
	reqs, unfilled, err := datasets.SampleRequests(systems, users, count,
		datasets.BinOptions{Edges: edges, PerBin: opts.PerRatio, GenLength: gen.GenLength, Seed: opts.Seed, MaxTokens: opts.MaxTokens})
	if err != nil {
		return err
	}
	var unfilledS []string
	for _, u := range unfilled {
		unfilledS = append(unfilledS, u.String())
		fmt.Fprintf(opts.f.ErrOut, "warning: could not fill %s\n", u)
	}
	if len(reqs) == 0 {
		return fmt.Errorf("no request could be sampled into any bin of %s (gen length %d): give longer system prompts (--system-prompts @FILE) or more user data", opts.Ratios, gen.GenLength)
	}
	if reqs, err = datasets.ShardRequests(reqs, shardK, shardN); err != nil {
		return err
	}
	preqs := make([]profile.Request, 0, len(reqs))
	for _, r := range reqs {
		ids, m, err := lm.Tokenizer.EncodeChat(r.System, r.User)
		if err != nil {
			return err
		}
		preqs = append(preqs, profile.Request{ID: r.ID, Source: r.SystemName, Prompt: ids, PrefixLen: m})
	}
	info := profile.RunInfo{
		Model:     lut.ModelID{Name: lm.Name, NLayers: len(lm.Blocks), Fingerprint: lm.Fingerprint},
		GenLength: gen.GenLength, Steps: gen.Steps, BlockLength: gen.BlockLength, AllSteps: opts.AllSteps,
		Tau: opts.Tau, Similarity: sim, Ratios: opts.Ratios, Edges: edges, PerRatio: opts.PerRatio, Seed: opts.Seed,
		Shard: opts.Shard, Data: opts.Data, Systems: opts.Systems, Unfilled: unfilledS, MaxTokens: opts.MaxTokens,
	}
	bar := progress.New(opts.f.ErrOut, "profile", "req", len(preqs), opts.Quiet)
	r := &profile.Runner{Model: lm.LLaDA, Gen: gen, AllSteps: opts.AllSteps, Info: info, OutDir: opts.Out, Resume: opts.Resume,
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
}
