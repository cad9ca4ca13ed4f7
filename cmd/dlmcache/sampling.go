package main

import (
	"fmt"

	"github.com/spf13/pflag"

	"github.com/dlmcache/dlmcache/datasets"
	"github.com/dlmcache/dlmcache/profile"
)

// requestSampling is how profile and calibrate sample requests into ratio
// bins: system prompts × user prompts (WildChat-style or WildChat parquet).
type requestSampling struct {
	Data        []string
	Systems     []string
	Language    string
	UserPrompts int
	MaxTokens   int
	PerRatio    int
	Seed        int64
	Ratios      string // for messages
}

func addSamplingFlags(fl *pflag.FlagSet, data, systems *[]string, language *string, userPrompts, maxTokens *int, seed *int64) {
	fl.StringSliceVar(data, "data", []string{"builtin"}, "user prompts: builtin (WildChat-style, generated) and/or WildChat parquet files or directories")
	fl.StringSliceVar(systems, "system-prompts", []string{"builtin"}, "system prompts: builtin, builtin:NAME, or @FILE (one prompt per file)")
	fl.StringVar(language, "language", "English", "WildChat language filter (empty: all)")
	fl.IntVar(userPrompts, "user-prompts", 2000, "number of builtin WildChat-style prompts to generate")
	fl.IntVar(maxTokens, "max-tokens", 1024, "longest input string (prompt + gen length) a request may have; 0: no bound")
	fl.Int64Var(seed, "seed", 1, "sampling seed (every shard must use the same)")
}

// sample draws the requests of shard k of n, tokenized with lm's chat
// template, and names the bins it could not fill (warned on f.ErrOut).
func (s requestSampling) sample(f *factory, lm *loadedModel, genLength int, edges []float64, k, n int) ([]profile.Request, []string, error) {
	systems, err := datasets.LoadSystemPrompts(s.Systems)
	if err != nil {
		return nil, nil, err
	}
	users, err := datasets.LoadUserPrompts(s.Data, datasets.WildChatFilter{Language: s.Language}, s.Seed, s.UserPrompts)
	if err != nil {
		return nil, nil, err
	}
	count := func(system, user string) (int, int, error) {
		ids, m, err := lm.Tokenizer.EncodeChat(system, user)
		return m, len(ids), err
	}
	reqs, unfilled, err := datasets.SampleRequests(systems, users, count,
		datasets.BinOptions{Edges: edges, PerBin: s.PerRatio, GenLength: genLength, Seed: s.Seed, MaxTokens: s.MaxTokens})
	if err != nil {
		return nil, nil, err
	}
	var unfilledS []string
	for _, u := range unfilled {
		unfilledS = append(unfilledS, u.String())
		fmt.Fprintf(f.ErrOut, "warning: could not fill %s\n", u)
	}
	if len(reqs) == 0 {
		return nil, nil, fmt.Errorf("no request could be sampled into any bin of %s (gen length %d): give longer system prompts (--system-prompts @FILE) or more user data", s.Ratios, genLength)
	}
	if reqs, err = datasets.ShardRequests(reqs, k, n); err != nil {
		return nil, nil, err
	}
	preqs := make([]profile.Request, 0, len(reqs))
	for _, r := range reqs {
		ids, m, err := lm.Tokenizer.EncodeChat(r.System, r.User)
		if err != nil {
			return nil, nil, err
		}
		preqs = append(preqs, profile.Request{ID: r.ID, Source: r.SystemName, Prompt: ids, PrefixLen: m})
	}
	return preqs, unfilledS, nil
}
