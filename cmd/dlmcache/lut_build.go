package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/dlmcache/dlmcache/lut"
	"github.com/dlmcache/dlmcache/profile"
)

type lutBuildOptions struct {
	f *factory
	similarityFiles
	Tau float64
	Out string
}

// addSimilarityFlag registers --similarity, the statistic depths come from.
func addSimilarityFlag(fl *pflag.FlagSet, p *string) {
	fl.StringVar(p, "similarity", string(profile.SimPrefix), "statistic of a layer's safety: kv (the whole prefix's K⊕V cosine, the design's S(l,t)) or kv-row-min (the worst prefix row's)")
}

func parseSimilarity(s string) (profile.Similarity, error) {
	sim := profile.Similarity(s)
	if err := sim.Check(); err != nil {
		return "", fmt.Errorf("--similarity: %w", err)
	}
	return sim, nil
}

// similarityFiles are the similarity files of one profile run (--from;
// shards are merged) and the statistic read from them (--similarity), for
// the commands that rebuild tables without the model.
type similarityFiles struct {
	From []string
	Sim  string
}

func (s *similarityFiles) add(fl *pflag.FlagSet, fromHelp string) {
	fl.StringSliceVar(&s.From, "from", nil, fromHelp)
	addSimilarityFlag(fl, &s.Sim)
	_ = cobra.MarkFlagRequired(fl, "from")
}

// read parses --similarity and reads the files' records.
func (s *similarityFiles) read() ([]profile.Record, profile.RunInfo, profile.Similarity, error) {
	sim, err := parseSimilarity(s.Sim)
	if err != nil {
		return nil, profile.RunInfo{}, "", err
	}
	recs, info, err := profile.ReadAll(s.From)
	return recs, info, sim, err
}

func (opts *lutBuildOptions) run(context.Context) error {
	if err := lut.CheckTau(opts.Tau); err != nil {
		return err
	}
	recs, info, sim, err := opts.read()
	if err != nil {
		return err
	}
	t, err := profile.BuildTable(recs, info, opts.Tau, sim)
	if err != nil {
		return err
	}
	if err := t.Write(opts.Out); err != nil {
		return err
	}
	fmt.Fprint(opts.f.Out, t.String())
	fmt.Fprintf(opts.f.ErrOut, "wrote %s (%d requests from %d file(s))\n", opts.Out, info.Requests, len(opts.From))
	return nil
}

func (opts *lutBuildOptions) flags(fl *pflag.FlagSet) {
	opts.similarityFiles.add(fl, "similarity.parquet files (shards of one run are merged)")
	fl.Float64Var(&opts.Tau, "tau", 0.97, "similarity threshold τ in (0, 1]")
	fl.StringVar(&opts.Out, "out", "table-cosine.json", "output table (a cosine estimate: dlmcache calibrate makes the table.json to serve)")
}

func newCmdLutBuild(f *factory, runF func(*lutBuildOptions) error) *cobra.Command {
	return newCommand(&lutBuildOptions{f: f}, runF, &cobra.Command{
		Use:   "build --from similarity.parquet... --tau X --out table-cosine.json",
		Short: "Rebuild a table from similarity files at any τ, merging shards, without the model",
		Args:  cobra.NoArgs,
	})
}
