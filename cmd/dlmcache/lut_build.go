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
	f          *factory
	From       []string
	Tau        float64
	Similarity string
	Out        string
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

func newCmdLutBuild(f *factory, runF func(*lutBuildOptions) error) *cobra.Command {
	opts := &lutBuildOptions{f: f}
	cmd := &cobra.Command{
		Use:   "build --from similarity.parquet... --tau X --out table-cosine.json",
		Short: "Rebuild a table from similarity files at any τ, merging shards, without the model",
		Args:  cobra.NoArgs,
		RunE:  runE(opts, runF, nil, func(context.Context) error { return lutBuildRun(opts) }),
	}
	cmd.Flags().StringSliceVar(&opts.From, "from", nil, "similarity.parquet files (shards of one run are merged)")
	cmd.Flags().Float64Var(&opts.Tau, "tau", 0.97, "similarity threshold τ in (0, 1]")
	addSimilarityFlag(cmd.Flags(), &opts.Similarity)
	cmd.Flags().StringVar(&opts.Out, "out", "table-cosine.json", "output table (a cosine estimate: dlmcache calibrate makes the table.json to serve)")
	_ = cmd.MarkFlagRequired("from")
	return cmd
}

func lutBuildRun(opts *lutBuildOptions) error {
	if err := lut.CheckTau(opts.Tau); err != nil {
		return err
	}
	sim, err := parseSimilarity(opts.Similarity)
	if err != nil {
		return err
	}
	recs, info, err := profile.ReadAll(opts.From)
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
