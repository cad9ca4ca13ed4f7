package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dlmcache/dlmcache/datasets"
	"github.com/dlmcache/dlmcache/internal/atomicfile"
	"github.com/dlmcache/dlmcache/model/tokenizer"
)

// Config is what one corpus run makes.
type Config struct {
	Train      int       // training samples in all
	Eval       int       // evaluation samples per suite
	Seed       int64     // generator seed
	Vocab      int       // tokenizer vocabulary size
	GenLength  int       // answer slots; 0: automatic
	Out        string    // corpus directory
	TokIn      string    // existing tokenizer directory to encode with; "": train one into TokOut
	TokOut     string    // directory a trained tokenizer is saved to
	Mix        []float64 // share of training samples per curriculum level
	TokSamples int       // samples the tokenizer learns from; 0: all
	Workers    int       // encoding goroutines
}

// specials are LLaDA's special tokens, in the order their ids follow the
// BPE vocabulary.
var specials = []string{
	tokenizer.TokenBOS, tokenizer.TokenEOS, tokenizer.TokenMask,
	tokenizer.TokenStartHeader, tokenizer.TokenEndHeader, tokenizer.TokenEOT,
}

// evalLevel marks eval rows, made with datasets.DefaultOptions.
const evalLevel = -1

// formatName names the corpus layout in meta.json.
const formatName = "dlmcache.corpus/v1"

// row is one sample with its tokens.
type row struct {
	level  int
	s      datasets.Sample
	ids    []int32 // prompt: [n]
	prefix int     // templated system message: ids[:prefix]
	answer []int32 // "## answer" then EOS
}

func (c Config) validate() error {
	switch {
	case c.Train < 1:
		return fmt.Errorf("-train %d < 1", c.Train)
	case c.Eval < 1:
		return fmt.Errorf("-eval %d < 1", c.Eval)
	case c.Vocab < 300 || c.Vocab > 4096:
		return fmt.Errorf("-vocab %d outside [300, 4096]", c.Vocab)
	case c.GenLength < 0:
		return fmt.Errorf("-gen-length %d < 0", c.GenLength)
	case len(c.Mix) != datasets.NumLevels:
		return fmt.Errorf("-mix has %d shares, want one per level (%d)", len(c.Mix), datasets.NumLevels)
	case c.Out == "":
		return errors.New("-out must be set")
	case c.TokIn == "" && c.TokOut == "":
		return errors.New("-tokenizer-out must be set when -tokenizer is empty (a tokenizer is trained)")
	case c.Workers < 1:
		return fmt.Errorf("-workers %d < 1", c.Workers)
	}
	sum := 0.0
	for _, x := range c.Mix {
		if x < 0 || math.IsNaN(x) {
			return fmt.Errorf("-mix share %v < 0", x)
		}
		sum += x
	}
	if sum <= 0 {
		return errors.New("-mix shares sum to 0")
	}
	return nil
}

// tokDir is the directory of the tokenizer the corpus is encoded with.
func tokDir(c Config) string {
	if c.TokIn != "" {
		return c.TokIn
	}
	return c.TokOut
}

func run(c Config, stdout, log io.Writer) error {
	if err := c.validate(); err != nil {
		return err
	}
	t0 := time.Now()
	if err := os.MkdirAll(c.Out, 0o755); err != nil {
		return err
	}
	// meta.json marks a complete corpus: remove a previous one first.
	if err := os.Remove(filepath.Join(c.Out, "meta.json")); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}

	train := trainSamples(c)
	eval := evalSamples(c)
	fmt.Fprintf(log, "corpus: %d train, %d eval samples generated (%.1fs)\n", len(train), len(eval), time.Since(t0).Seconds())

	t1 := time.Now()
	var tok *tokenizer.Tokenizer
	var err error
	if c.TokIn != "" {
		if tok, err = tokenizer.Load(c.TokIn); err != nil {
			return fmt.Errorf("loading the tokenizer (-tokenizer %s; -tokenizer '' trains a new one): %w", c.TokIn, err)
		}
		if tok.VocabSize() > c.Vocab {
			return fmt.Errorf("tokenizer %s has %d tokens, more than -vocab %d", c.TokIn, tok.VocabSize(), c.Vocab)
		}
		fmt.Fprintf(log, "corpus: tokenizer with %d tokens loaded from %s\n", tok.VocabSize(), c.TokIn)
	} else {
		if tok, err = trainTokenizer(c, train, log); err != nil {
			return err
		}
		fmt.Fprintf(log, "corpus: tokenizer with %d tokens saved to %s (%.1fs)\n", tok.VocabSize(), c.TokOut, time.Since(t1).Seconds())
	}
	ids, err := specialIDs(tok)
	if err != nil {
		return err
	}

	t2 := time.Now()
	if err := encode(tok, ids.eos, train, c.Workers); err != nil {
		return err
	}
	if err := encode(tok, ids.eos, eval, c.Workers); err != nil {
		return err
	}
	fmt.Fprintf(log, "corpus: encoded (%.1fs)\n", time.Since(t2).Seconds())

	maxAns := 0
	for _, rs := range [][]row{train, eval} {
		for _, r := range rs {
			maxAns = max(maxAns, len(r.answer))
		}
	}
	g := c.GenLength
	if g == 0 {
		g = autoGenLength(maxAns)
	} else if maxAns > g {
		return fmt.Errorf("-gen-length %d is shorter than the longest answer (%d tokens with EOS)", g, maxAns)
	}

	if err := writeJSONL(filepath.Join(c.Out, "train.jsonl"), train); err != nil {
		return err
	}
	if err := writeJSONL(filepath.Join(c.Out, "eval.jsonl"), eval); err != nil {
		return err
	}
	st := map[string]splitStats{"train": statistics(train, g), "eval": statistics(eval, g)}
	meta := buildMeta(c, tok, ids, g, maxAns, train, eval, st)
	mb, err := json.MarshalIndent(meta, "", "  ")
	if err != nil {
		return err
	}
	if err := writeFileAtomic(filepath.Join(c.Out, "meta.json"), append(mb, '\n')); err != nil {
		return err
	}
	printStats(stdout, st, g, maxAns)
	fmt.Fprintf(log, "corpus: wrote %s (train.jsonl, eval.jsonl, meta.json) in %.1fs\n", c.Out, time.Since(t0).Seconds())
	return nil
}

// trainSamples generates the training rows: level by level (short to long
// system messages), each level's share split evenly over the suites, the
// suites shuffled together within a level.
func trainSamples(c Config) []row {
	suites := datasets.Suites()
	counts := apportion(c.Train, c.Mix)
	var out []row
	for level, n := range counts {
		start := len(out)
		for si, suite := range suites {
			k := n / len(suites)
			if si < n%len(suites) {
				k++
			}
			for _, s := range datasets.Generate(suite, datasets.Train, c.Seed, k, datasets.Level(level)) {
				out = append(out, row{level: level, s: s})
			}
		}
		r := rand.New(rand.NewPCG(uint64(c.Seed), uint64(level)))
		lv := out[start:]
		r.Shuffle(len(lv), func(i, j int) { lv[i], lv[j] = lv[j], lv[i] })
	}
	return out
}

// evalSamples generates c.Eval held-out rows per suite with the evaluation
// options, the suites interleaved.
func evalSamples(c Config) []row {
	suites := datasets.Suites()
	per := make([][]datasets.Sample, len(suites))
	for i, s := range suites {
		per[i] = datasets.Generate(s, datasets.Eval, c.Seed, c.Eval, datasets.DefaultOptions())
	}
	var out []row
	for j := range c.Eval {
		for i := range suites {
			out = append(out, row{level: evalLevel, s: per[i][j]})
		}
	}
	return out
}

// apportion splits n by shares with the largest-remainder method.
func apportion(n int, shares []float64) []int {
	sum := 0.0
	for _, x := range shares {
		sum += x
	}
	out := make([]int, len(shares))
	rem := make([]float64, len(shares))
	left := n
	for i, x := range shares {
		q := float64(n) * x / sum
		out[i] = int(q)
		rem[i] = q - float64(out[i])
		left -= out[i]
	}
	idx := make([]int, len(shares))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return rem[idx[a]] > rem[idx[b]] })
	for k := 0; k < left; k++ {
		out[idx[k%len(idx)]]++
	}
	return out
}

// chatText renders a sample as the tokenizer will see it in training: the
// LLaDA chat template with the assistant's answer and EOS.
func chatText(s datasets.Sample) string {
	return tokenizer.TokenBOS +
		tokenizer.TokenStartHeader + "system" + tokenizer.TokenEndHeader + "\n\n" + strings.TrimSpace(s.System) + tokenizer.TokenEOT +
		tokenizer.TokenStartHeader + "user" + tokenizer.TokenEndHeader + "\n\n" + strings.TrimSpace(s.User) + tokenizer.TokenEOT +
		tokenizer.TokenStartHeader + "assistant" + tokenizer.TokenEndHeader + "\n\n" + s.Target() + tokenizer.TokenEOS
}

// trainTokenizer learns the BPE from evenly spaced training samples, saves
// it and loads it back, so that the corpus is encoded by the files shipped.
func trainTokenizer(c Config, train []row, log io.Writer) (*tokenizer.Tokenizer, error) {
	step := 1
	if c.TokSamples > 0 && len(train) > c.TokSamples {
		step = len(train) / c.TokSamples
	}
	var texts []string
	for i := 0; i < len(train); i += step {
		texts = append(texts, chatText(train[i].s))
	}
	fmt.Fprintf(log, "corpus: training a %d-token BPE on %d samples\n", c.Vocab, len(texts))
	tok, err := tokenizer.Train(texts, c.Vocab, specials)
	if err != nil {
		return nil, fmt.Errorf("training the tokenizer: %w", err)
	}
	if err := tok.Save(c.TokOut); err != nil {
		return nil, fmt.Errorf("saving the tokenizer to %s: %w", c.TokOut, err)
	}
	return tokenizer.Load(c.TokOut)
}

type tokenIDs struct{ bos, eos, mask, eot int32 }

func specialIDs(tok *tokenizer.Tokenizer) (tokenIDs, error) {
	var ids tokenIDs
	for _, x := range []struct {
		name string
		dst  *int32
	}{{tokenizer.TokenBOS, &ids.bos}, {tokenizer.TokenEOS, &ids.eos}, {tokenizer.TokenMask, &ids.mask}, {tokenizer.TokenEOT, &ids.eot}} {
		id, ok := tok.TokenID(x.name)
		if !ok {
			return ids, fmt.Errorf("tokenizer has no %s token", x.name)
		}
		*x.dst = id
	}
	return ids, nil
}

// encode tokenizes rows in place with workers goroutines and checks each:
// the answer decodes back to its target and passes datasets.CheckAnswer.
func encode(tok *tokenizer.Tokenizer, eos int32, rows []row, workers int) error {
	var wg sync.WaitGroup
	errs := make([]error, workers)
	for w := range workers {
		wg.Go(func() {
			for i := w; i < len(rows); i += workers {
				r := &rows[i]
				ids, m, err := tok.EncodeChat(r.s.System, r.s.User)
				if err != nil {
					errs[w] = fmt.Errorf("%s: %w", r.s.ID, err)
					return
				}
				r.ids, r.prefix = ids, m
				r.answer = append(tok.Encode(r.s.Target()), eos)
				if got := tok.Decode(r.answer[:len(r.answer)-1]); got != r.s.Target() {
					errs[w] = fmt.Errorf("%s: answer %q decodes as %q", r.s.ID, r.s.Target(), got)
					return
				}
				if !datasets.CheckAnswer(r.s.Suite, tok.Decode(r.answer), r.s.Answer) {
					errs[w] = fmt.Errorf("%s: the encoded answer fails CheckAnswer", r.s.ID)
					return
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// autoGenLength returns the smallest multiple of 8, at least 16, that holds
// the longest answer (EOS included) plus a margin of 2.
func autoGenLength(maxAnswer int) int {
	g := 16
	for g < maxAnswer+2 {
		g += 8
	}
	return g
}

// writeJSONL writes rows, one JSON object a line, atomically.
func writeJSONL(path string, rows []row) error {
	return writeAtomic(path, func(w *bufio.Writer) error {
		var b []byte
		for _, r := range rows {
			b = b[:0]
			b = append(b, `{"suite":`...)
			b = appendJSONString(b, r.s.Suite)
			b = append(b, `,"level":`...)
			b = strconv.AppendInt(b, int64(r.level), 10)
			b = append(b, `,"id":`...)
			b = appendJSONString(b, r.s.ID)
			b = append(b, `,"ids":`...)
			b = appendIDs(b, r.ids)
			b = append(b, `,"prefix_len":`...)
			b = strconv.AppendInt(b, int64(r.prefix), 10)
			b = append(b, `,"answer":`...)
			b = appendIDs(b, r.answer)
			b = append(b, `,"answer_text":`...)
			b = appendJSONString(b, r.s.Answer)
			b = append(b, "}\n"...)
			if _, err := w.Write(b); err != nil {
				return err
			}
		}
		return nil
	})
}

func appendJSONString(b []byte, s string) []byte {
	q, _ := json.Marshal(s) // a string always marshals
	return append(b, q...)
}

func appendIDs(b []byte, ids []int32) []byte {
	b = append(b, '[')
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(id), 10)
	}
	return append(b, ']')
}

func writeFileAtomic(path string, data []byte) error {
	return writeAtomic(path, func(w *bufio.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// writeAtomic writes path atomically (internal/atomicfile, 0644) through a
// buffered writer.
func writeAtomic(path string, fill func(*bufio.Writer) error) error {
	err := atomicfile.Write(path, 0o644, func(w io.Writer) error {
		bw := bufio.NewWriter(w)
		if err := fill(bw); err != nil {
			return err
		}
		return bw.Flush()
	})
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// ---- statistics ------------------------------------------------------------

// dist summarises integers or ratios.
type dist struct {
	N    int     `json:"n"`
	Mean float64 `json:"mean"`
	Min  float64 `json:"min"`
	P10  float64 `json:"p10"`
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	Max  float64 `json:"max"`
}

func summarize(xs []float64) dist {
	if len(xs) == 0 {
		return dist{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	sum := 0.0
	for _, x := range s {
		sum += x
	}
	q := func(p float64) float64 { return s[int(p*float64(len(s)-1)+0.5)] }
	return dist{N: len(s), Mean: sum / float64(len(s)), Min: s[0], P10: q(0.1), P50: q(0.5), P90: q(0.9), Max: s[len(s)-1]}
}

// groupStats describes one group of rows (a suite at a level).
type groupStats struct {
	Prompt dist `json:"prompt_tokens"`
	Prefix dist `json:"prefix_tokens"`
	Ratio  dist `json:"ratio"`
	Answer dist `json:"answer_tokens"`
}

type splitStats struct {
	All       groupStats            `json:"all"`
	Groups    map[string]groupStats `json:"groups"` // "suite/level"
	RatioHist []int                 `json:"ratio_hist"`
	// InRange is the share of rows with ratio in [0.75, 0.95].
	InRange float64 `json:"ratio_in_0.75_0.95"`
}

// ratioBins is the number of ratio histogram bins over [0, 1).
const ratioBins = 20

func statistics(rows []row, genLength int) splitStats {
	type acc struct{ prompt, prefix, ratio, answer []float64 }
	groups := map[string]*acc{}
	all := &acc{}
	hist := make([]int, ratioBins)
	in := 0
	for _, r := range rows {
		key := fmt.Sprintf("%s/%d", r.s.Suite, r.level)
		g := groups[key]
		if g == nil {
			g = &acc{}
			groups[key] = g
		}
		ratio := datasets.Ratio(r.prefix, len(r.ids), genLength)
		for _, a := range []*acc{g, all} {
			a.prompt = append(a.prompt, float64(len(r.ids)))
			a.prefix = append(a.prefix, float64(r.prefix))
			a.ratio = append(a.ratio, ratio)
			a.answer = append(a.answer, float64(len(r.answer)))
		}
		hist[min(ratioBins-1, int(ratio*ratioBins))]++
		if ratio >= 0.75 && ratio <= 0.95 {
			in++
		}
	}
	mk := func(a *acc) groupStats {
		return groupStats{summarize(a.prompt), summarize(a.prefix), summarize(a.ratio), summarize(a.answer)}
	}
	st := splitStats{All: mk(all), Groups: map[string]groupStats{}, RatioHist: hist}
	for k, a := range groups {
		st.Groups[k] = mk(a)
	}
	if len(rows) > 0 {
		st.InRange = float64(in) / float64(len(rows))
	}
	return st
}

func printStats(w io.Writer, st map[string]splitStats, genLength, maxAns int) {
	fmt.Fprintf(w, "gen_length %d (longest answer %d tokens with EOS)\n", genLength, maxAns)
	for _, split := range []string{"train", "eval"} {
		s := st[split]
		fmt.Fprintf(w, "\n%s: %d samples; ratio r = prefix/(prompt+%d) in [0.75, 0.95]: %.1f%%\n", split, s.All.Prompt.N, genLength, 100*s.InRange)
		fmt.Fprintf(w, "  %-14s %6s  %-22s %-22s %-24s %s\n", "suite/level", "n", "prompt mean [min,max]", "prefix mean [min,max]", "r mean [min,max]", "answer mean/max")
		keys := make([]string, 0, len(s.Groups))
		for k := range s.Groups {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		line := func(name string, g groupStats) {
			fmt.Fprintf(w, "  %-14s %6d  %6.1f [%4.0f,%4.0f]    %6.1f [%4.0f,%4.0f]    %.3f [%.3f,%.3f]    %.1f/%.0f\n",
				name, g.Prompt.N, g.Prompt.Mean, g.Prompt.Min, g.Prompt.Max, g.Prefix.Mean, g.Prefix.Min, g.Prefix.Max,
				g.Ratio.Mean, g.Ratio.Min, g.Ratio.Max, g.Answer.Mean, g.Answer.Max)
		}
		for _, k := range keys {
			line(k, s.Groups[k])
		}
		line("all", s.All)
		fmt.Fprintf(w, "  ratio histogram (bins of 0.05):")
		for i, n := range s.RatioHist {
			if n > 0 {
				fmt.Fprintf(w, " [%.2f,%.2f):%d", float64(i)/ratioBins, float64(i+1)/ratioBins, n)
			}
		}
		fmt.Fprintln(w)
	}
}

// ---- meta.json -------------------------------------------------------------

type meta struct {
	Format       string                    `json:"format"`
	VocabSize    int                       `json:"vocab_size"`
	VocabAsked   int                       `json:"vocab_requested"`
	MaskID       int32                     `json:"mask_id"`
	EOSID        int32                     `json:"eos_id"`
	BOSID        int32                     `json:"bos_id"`
	EOTID        int32                     `json:"eot_id"`
	GenLength    int                       `json:"gen_length"`
	MaxAnswer    int                       `json:"max_answer_len"`
	SuiteVersion int                       `json:"suite_version"`
	Seed         int64                     `json:"seed"`
	Suites       []string                  `json:"suites"`
	Counts       map[string]map[string]int `json:"counts"` // split → suite → rows
	LevelCounts  []int                     `json:"train_level_counts"`
	Mix          []float64                 `json:"mix"`
	Levels       []datasets.GenOptions     `json:"levels"`
	EvalOptions  datasets.GenOptions       `json:"eval_options"`
	Tokenizer    string                    `json:"tokenizer_dir"`
	TokSamples   int                       `json:"tokenizer_samples"`
	Stats        map[string]splitStats     `json:"stats"`
}

func buildMeta(c Config, tok *tokenizer.Tokenizer, ids tokenIDs, g, maxAns int, train, eval []row, st map[string]splitStats) meta {
	counts := map[string]map[string]int{"train": {}, "eval": {}}
	levelCounts := make([]int, datasets.NumLevels)
	for _, r := range train {
		counts["train"][r.s.Suite]++
		levelCounts[r.level]++
	}
	for _, r := range eval {
		counts["eval"][r.s.Suite]++
	}
	levels := make([]datasets.GenOptions, datasets.NumLevels)
	for l := range levels {
		levels[l] = datasets.Level(l)
	}
	return meta{
		Format: formatName, VocabSize: tok.VocabSize(), VocabAsked: c.Vocab,
		MaskID: ids.mask, EOSID: ids.eos, BOSID: ids.bos, EOTID: ids.eot,
		GenLength: g, MaxAnswer: maxAns, SuiteVersion: datasets.SuiteVersion, Seed: c.Seed,
		Suites: datasets.Suites(), Counts: counts, LevelCounts: levelCounts, Mix: c.Mix,
		Levels: levels, EvalOptions: datasets.DefaultOptions(), Tokenizer: tokDir(c),
		TokSamples: c.TokSamples, Stats: st,
	}
}
