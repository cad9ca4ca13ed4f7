package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/dlmcache/dlmcache/cache"
	"github.com/dlmcache/dlmcache/datasets"
	"github.com/dlmcache/dlmcache/engine"
	"github.com/dlmcache/dlmcache/lut"
	"github.com/dlmcache/dlmcache/profile"
)

// calibrateMethods is calibrate --mode methods: the method search that
// writes a v3 table.
func calibrateMethods(ctx context.Context, opts *calibrateOptions) error {
	if err := opts.checkCommon(); err != nil {
		return err
	}
	if opts.MaxLoss < 0 {
		return fmt.Errorf("--max-loss %g: want ≥ 0 points", opts.MaxLoss)
	}
	test := profile.ChangeTest{Risk: opts.Risk, Alpha: 1 - opts.Confidence}
	if err := test.Check(); err != nil {
		return fmt.Errorf("--risk %g, --confidence %g: %w", opts.Risk, opts.Confidence, err)
	}
	if opts.MinGain < 0 {
		return fmt.Errorf("--min-gain %g: want ≥ 0", opts.MinGain)
	}
	if min := test.MinRequests(); opts.PerRatio < min {
		fmt.Fprintf(opts.f.ErrOut, "warning: --per-ratio %d: the changed-answer bound falls below --risk %g at %g%% confidence on %d requests at the least, so every bin will keep none on the schedule\n", opts.PerRatio, opts.Risk, 100*opts.Confidence, min)
	}
	grid, err := opts.searchGrid()
	if err != nil {
		return err
	}
	return withEngine(modelConfig(opts.f, opts.modelFlags, opts.regimeFlags), func(eng *engine.Engine) error {
		lm, gen := eng.Model, eng.Gen
		edges, shardK, shardN, err := opts.binsAndShard(opts.Shard)
		if err != nil {
			return err
		}
		base := cache.DefaultOptions()
		base.Fingerprint, base.BiCache.Refresh = lm.Fingerprint, lm.Card.RefreshOr(opts.Method.BiCache.Refresh)
		var guideID *lut.ModelID
		if opts.Guide != "" {
			if err := eng.AddGuide(opts.Guide); err != nil {
				return err
			}
			g := eng.Guide
			fmt.Fprintln(opts.f.ErrOut, "dlmcache: guide", g.Describe())
			gen.Guide, base.GuideFingerprint = g.Network, g.Fingerprint
			id := g.ID()
			guideID = &id
		}
		if grid, err = opts.buildable(grid, base, lm); err != nil {
			return err
		}
		data := opts.Data
		if slices.Equal(data, []string{"builtin"}) {
			data = []string{"suites", "external"} // requests with reference answers: accuracy is checked too
		}
		classes := profile.DefaultClasses(gen)
		var reqs []profile.ClassRequest
		for _, cl := range classes {
			g := profile.ClassGen(gen, cl)
			s := opts.requestSampling
			s.Data = data
			rs, _, err := s.sample(opts.f, lm, g.GenLength, edges, shardK, shardN)
			if err != nil {
				return fmt.Errorf("class %s (gen length %d): %w", cl.Name, g.GenLength, err)
			}
			for _, r := range rs {
				reqs = append(reqs, profile.ClassRequest{Request: r, Class: cl.Name})
			}
		}
		var names []string
		for _, g := range grid {
			names = append(names, g.String())
		}
		s := &profile.Searcher{
			Model: lm.Network, Gen: gen, Grid: grid, Test: test, MinGain: opts.MinGain, Cap: opts.PerRatio, Z: normalQuantile(opts.Confidence), MaxLoss: opts.MaxLoss,
			Stop: lm.AnswerEnd, Text: lm.AnswerText, Check: datasets.CheckAnswer, Budget: opts.Budget, Shard: opts.Shard != "",
			OutDir: opts.Out, Resume: opts.Resume, Log: func(l string) { fmt.Fprintln(opts.f.ErrOut, l) },
			Run: profile.SearchRun{Model: lm.ID(),
				Regime: gen.Regime, Classes: classes, Edges: edges,
				Settings: names, Seed: opts.Seed, Data: data, Shard: opts.Shard, Guide: guideID},
		}
		s.Base = base
		s.NewStore = func() cache.PrefixStore { return cache.NewStore(lm.Backend, opts.CacheBytes, cache.LRU) }
		t, err := opts.tableOrShard("req", "setting on", profile.SearchFile, len(reqs), func() (*lut.Table, error) {
			return s.Merge(opts.Merge, reqs)
		}, func(bar *lateBar) (*lut.Table, error) {
			s.Progress = bar.set
			s.Log = func(l string) {
				if bar.bar != nil && !opts.Quiet {
					fmt.Fprintln(opts.f.ErrOut)
				}
				fmt.Fprintln(opts.f.ErrOut, l)
			}
			return s.Search(ctx, reqs)
		})
		if t == nil || err != nil {
			return err
		}
		if err := os.MkdirAll(opts.Out, 0o755); err != nil {
			return err
		}
		path := filepath.Join(opts.Out, profile.CalibratedTable)
		if err := t.Write(path); err != nil {
			return err
		}
		fmt.Fprint(opts.f.Out, t.String())
		fmt.Fprintf(opts.f.ErrOut, "wrote %s (%d requests, %d settings; serve it with dlmcache serve --lut %s)\n", path, len(reqs), len(grid), path)
		return nil
	})
}

// searchGrid is the settings the search tries: --setting's, or the
// default grid (with the guided settings under --guide); a guided setting
// needs --guide and --guide a guided setting.
func (opts *calibrateOptions) searchGrid() ([]lut.Setting, error) {
	grid := cache.DefaultGrid()
	if opts.Guide != "" {
		grid = cache.GuidedGrid()
	}
	if len(opts.Grid) > 0 {
		grid = nil
		for _, g := range opts.Grid {
			st, err := cache.ParseSetting(g)
			if err != nil {
				return nil, fmt.Errorf("--setting: %w", err)
			}
			grid = append(grid, st)
		}
	}
	guided := slices.ContainsFunc(grid, lut.Setting.Guided)
	switch {
	case opts.Guide != "" && !guided:
		return nil, fmt.Errorf("--guide %s: no --setting decodes with the guided decoder (NAME@guided, NAME@guided:TAU, NAME@guided+threshold:T): the guide would be loaded for nothing", opts.Guide)
	case opts.Guide == "" && guided:
		i := slices.IndexFunc(grid, lut.Setting.Guided)
		return nil, fmt.Errorf("--setting %s decodes with the guided decoder: it needs --guide MODEL, an autoregressive LM with the model's vocabulary and chat template", grid[i])
	}
	return grid, nil
}

// buildable is grid less the settings the model cannot run (refused when
// --setting named them); every setting must build before hours are spent.
func (opts *calibrateOptions) buildable(grid []lut.Setting, base cache.Options, lm *engine.Model) ([]lut.Setting, error) {
	kept := grid[:0:0]
	for _, g := range grid {
		m, err := cache.FromSetting(g, withStore(base, lm, opts.CacheBytes))
		if err != nil {
			return nil, fmt.Errorf("setting %s: %w", g, err)
		}
		if err := cache.CheckModel(m, lm.Config); err != nil {
			if len(opts.Grid) > 0 {
				return nil, fmt.Errorf("--setting %s: %w", g, err)
			}
			fmt.Fprintf(opts.f.ErrOut, "calibrate: leaving out %s: %v\n", g, err)
			continue
		}
		kept = append(kept, g)
	}
	return kept, nil
}

// withStore is o with a fresh whole-prefix store of budget bytes.
func withStore(o cache.Options, lm *engine.Model, bytes int64) cache.Options {
	o.Store = cache.NewStore(lm.Backend, bytes, cache.LRU)
	return o
}
