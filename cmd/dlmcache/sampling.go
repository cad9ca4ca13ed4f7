package main

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/spf13/pflag"

	"github.com/dlmcache/dlmcache/datasets"
	"github.com/dlmcache/dlmcache/engine"
	"github.com/dlmcache/dlmcache/profile"
)

// requestSampling is how profile and calibrate sample requests into ratio
// bins: system prompts × user prompts (WildChat-style or WildChat parquet).
// Both commands embed it; addFlags declares the flags they share (each
// declares its own --ratios and --per-ratio: their defaults differ).
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

func (s *requestSampling) addFlags(fl *pflag.FlagSet) {
	fl.StringSliceVar(&s.Data, "data", []string{"builtin"}, "user prompts: builtin (WildChat-style, generated) and/or WildChat parquet files or directories; or suites (the task suites' own requests)")
	fl.StringSliceVar(&s.Systems, "system-prompts", []string{"builtin"}, "system prompts: builtin, builtin:NAME, or @FILE (one prompt per file)")
	fl.StringVar(&s.Language, "language", "English", "WildChat language filter (empty: all)")
	fl.IntVar(&s.UserPrompts, "user-prompts", 2000, "number of builtin WildChat-style prompts to generate")
	fl.IntVar(&s.MaxTokens, "max-tokens", 1024, "longest input string (prompt + gen length) a request may have; 0: no bound")
	fl.Int64Var(&s.Seed, "seed", 1, "sampling seed (every shard must use the same)")
}

// binsAndShard parses --ratios and shard (--shard K/N; "": the whole
// set, shard 0 of 1).
func (s *requestSampling) binsAndShard(shard string) (edges []float64, k, n int, err error) {
	if edges, err = datasets.ParseRatioBins(s.Ratios); err != nil {
		return nil, 0, 0, err
	}
	k, n = 0, 1
	if shard != "" {
		if k, n, err = datasets.ParseShard(shard); err != nil {
			return nil, 0, 0, err
		}
	}
	return edges, k, n, nil
}

// sample draws the requests of shard k of n, tokenized with lm's chat
// template, and names the bins it could not fill (warned on f.ErrOut).
// --data suites takes the task suites' training samples instead (see
// sampleSuites).
func (s requestSampling) sample(f *factory, lm *engine.Model, genLength int, edges []float64, k, n int) ([]profile.Request, []string, error) {
	if len(s.Data) > 0 && !slices.ContainsFunc(s.Data, func(d string) bool { return d != "suites" && d != "external" }) {
		return s.sampleSuites(f, lm, genLength, edges, k, n)
	}
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
		return profile.ReusablePrefix(lm.Config, m), len(ids), err
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
		preqs = append(preqs, profile.Request{ID: r.ID, Source: r.SystemName, Prompt: ids, PrefixLen: profile.ReusablePrefix(lm.Config, m)})
	}
	return preqs, unfilledS, nil
}

// sampleSuites bins datasets.External's requests (--data external: system
// messages the suites' generators never produce, every suite, span copies
// and arithmetic included) and/or the task suites' training samples (every
// curriculum level and the evaluation options, so ratios span 0.5–0.95 at
// the bundled model's gen length; --data suites) by ratio: up to PerRatio
// a bin. With both, External's requests come first and the suites' fill
// what they leave (the bins whose ratios External's system messages do
// not reach), the suites taking turns.
// Samples whose answer does not fit the gen length (the span suite at 16
// slots) are skipped. These are the requests a model trained on the
// suites answers stably; on prompts it cannot answer, a greedy answer
// flips under float rounding alone, which no depth can be held to.
func (s requestSampling) sampleSuites(f *factory, lm *engine.Model, genLength int, edges []float64, k, n int) ([]profile.Request, []string, error) {
	perBin := make([]int, len(edges)-1)
	var out []profile.Request
	opts := []datasets.GenOptions{datasets.Level(0), datasets.Level(1), datasets.Level(2), datasets.DefaultOptions()}
	const pool = 400 // samples drawn per suite and option set
	// First datasets.External's system messages (lut verify's builtin set
	// is datasets.Heldout's, a register calibration never sees), a system message's
	// four questions at a time, kept together in order so that a bin holds
	// requests that share their system message, as served traffic does
	// (the search then times the prefix store with hits, not only fills);
	// then, for what they leave, the suites' sources taking turns, each
	// suite under each option set, one sample a turn.
	var sources, first [][][]datasets.Sample
	if slices.Contains(s.Data, "external") {
		const questions = 4
		// Enough system messages to fill every bin from them alone where
		// their ratios reach it (a quarter or more of them fit a bin).
		groups := max(pool/4, s.PerRatio*(len(edges)-1))
		ext := datasets.External(groups, questions, 1000+s.Seed)
		var src [][]datasets.Sample
		for g := 0; g+questions <= len(ext); g += questions {
			src = append(src, ext[g:g+questions])
		}
		first = append(first, src)
	}
	if slices.Contains(s.Data, "suites") {
		for oi, o := range opts {
			for _, suite := range datasets.Suites() {
				var src [][]datasets.Sample
				for _, x := range datasets.Generate(suite, datasets.Train, s.Seed+int64(oi)*7919, pool, o) {
					src = append(src, []datasets.Sample{x})
				}
				sources = append(sources, src)
			}
		}
	}
	full := func() bool { return !slices.ContainsFunc(perBin, func(c int) bool { return c < s.PerRatio }) }
	for _, pass := range [][][][]datasets.Sample{first, sources} {
		for i := 0; !full() && slices.ContainsFunc(pass, func(src [][]datasets.Sample) bool { return i < len(src) }); i++ {
			for _, src := range pass {
				if i >= len(src) {
					continue
				}
				for _, x := range src[i] {
					ids, m, err := lm.Tokenizer.EncodeChat(x.System, x.User)
					if err != nil {
						return nil, nil, err
					}
					m = profile.ReusablePrefix(lm.Config, m)
					if m == 0 || len(lm.Tokenizer.Encode(x.Target()))+1 > genLength || (s.MaxTokens > 0 && len(ids)+genLength > s.MaxTokens) {
						continue
					}
					r := float64(m) / float64(len(ids)+genLength)
					b := sort.SearchFloat64s(edges, r) - 1
					if b < 0 || b >= len(perBin) || r == edges[b+1] || perBin[b] >= s.PerRatio {
						continue
					}
					perBin[b]++
					out = append(out, profile.Request{ID: x.ID, Source: x.ID[:strings.Index(x.ID, "/")], Prompt: ids, PrefixLen: m, Suite: x.Suite, Answer: x.Answer})
				}
			}
		}
	}
	var unfilled []string
	for b, c := range perBin {
		if c < s.PerRatio {
			u := fmt.Sprintf("[%.2f, %.2f): %d of %d suite requests", edges[b], edges[b+1], c, s.PerRatio)
			unfilled = append(unfilled, u)
			fmt.Fprintf(f.ErrOut, "warning: could not fill %s\n", u)
		}
	}
	if len(out) == 0 {
		return nil, nil, fmt.Errorf("no suite request has a ratio in %v at gen length %d", edges, genLength)
	}
	var shard []profile.Request
	for i, r := range out {
		if i%n == k {
			shard = append(shard, r)
		}
	}
	return shard, unfilled, nil
}
