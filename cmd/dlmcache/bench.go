package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/parquet-go/parquet-go"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/dlmcache/dlmcache/cache"
	"github.com/dlmcache/dlmcache/datasets"
	"github.com/dlmcache/dlmcache/engine"
	"github.com/dlmcache/dlmcache/internal/atomicfile"
	"github.com/dlmcache/dlmcache/internal/progress"
	"github.com/dlmcache/dlmcache/model/cpu"
	"github.com/dlmcache/dlmcache/profile"
)

type benchOptions struct {
	f *factory

	modelFlags
	Methods []string
	suiteSampling
	Turns       int
	StoreAnswer bool
	// CompareModel, if set, runs the same methods (those it can run) on a
	// second model over the same samples, interleaved with the first's.
	CompareModel string
	Chat         []string
	ChatSystem   string
	ChatChars    int
	regimeFlags
	Cache cacheFlags
	Out   string
	JSON  bool
	Quiet bool
}

// benchConversations makes the multi-turn workload of --turns: the task
// samples' conversations and --wildchat's chat conversations.
func benchConversations(opts *benchOptions, samples []datasets.Sample) ([]datasets.Sample, error) {
	if opts.Turns == 0 {
		if len(opts.Chat) > 0 {
			return nil, fmt.Errorf("--wildchat needs --turns (the number of turns of each conversation)")
		}
		return samples, nil
	}
	if err := checkTurns(opts.Turns); err != nil {
		return nil, err
	}
	var out []datasets.Sample
	// With --wildchat, the suites' conversations come along where the
	// lookup suite is among them (a chats-only run names another suite,
	// as it always has).
	if len(opts.Chat) == 0 || slices.ContainsFunc(samples, func(s datasets.Sample) bool { return s.Suite == "lookup" }) {
		conv, err := suiteConversations(samples, opts.Turns)
		if err != nil {
			return nil, err
		}
		out = conv
	}
	if len(opts.Chat) > 0 {
		ps, err := datasets.LoadConversations(opts.Chat, datasets.WildChatFilter{Language: "English", MinTurns: opts.Turns,
			MaxConversationChars: opts.ChatChars}, opts.Seed, opts.Limit)
		if err != nil {
			return nil, fmt.Errorf("--wildchat: %w", err)
		}
		chat, err := datasets.ChatConversations(ps, opts.ChatSystem, opts.Turns)
		if err != nil {
			return nil, fmt.Errorf("--wildchat: %w", err)
		}
		out = append(out, chat...)
	}
	return out, nil
}

// checkTurns checks --turns.
func checkTurns(turns int) error {
	if turns < 2 || turns > 6 {
		return fmt.Errorf("--turns %d: want 2…6", turns)
	}
	return nil
}

// suiteConversations is --turns' workload of the task samples (bench's
// and loadtest's): each sample's system message a conversation of turns
// of its suite's questions (datasets.Conversations), turn by turn.
func suiteConversations(samples []datasets.Sample, turns int) ([]datasets.Sample, error) {
	if err := checkTurns(turns); err != nil {
		return nil, err
	}
	conv, err := datasets.Conversations(samples, turns)
	if err != nil {
		return nil, fmt.Errorf("--turns: %w (the conversations are built from the task suites)", err)
	}
	return conv, nil
}

// addTurnsFlag declares --turns into p; carried says what each turn
// carries of the earlier ones and how the results come.
func addTurnsFlag(fl *pflag.FlagSet, p *int, carried string) {
	fl.IntVar(p, "turns", 0, "a multi-turn workload: each task sample's system message becomes a conversation of this many questions of its suite (2–6), each turn carrying "+carried)
}

// storeAnswersNote checks --store-answers against the methods: those
// with a prefix store must keep it in blocks (only a block store can hold
// a conversation for its next turn), and where none of them keeps a store
// (--methods none alone: the baseline of a turns run) there is nothing to
// store, which it says and goes on.
func storeAnswersNote(opts *benchOptions, es []*profile.Evaluator) error {
	if !opts.StoreAnswer {
		return nil
	}
	ms := make([]cache.Method, len(es))
	for i, e := range es {
		ms[i] = e.Method
	}
	blocks, stores := storesOf(ms)
	if len(stores) > 0 {
		return fmt.Errorf("--store-answers keeps answered conversations in a block store, but %s keep whole prefixes: add --store-blocks N (a block store of N-token blocks)",
			strings.Join(stores, ", "))
	}
	if len(blocks) == 0 {
		fmt.Fprintf(opts.f.ErrOut, "bench: --store-answers: none of the methods (%s) keeps a prefix store, so no answered turn is stored\n",
			strings.Join(opts.Methods, ", "))
	}
	return nil
}

// storesOf names the methods that keep a block store (blocks) and those
// that keep whole prefixes (whole); the others keep no prefix store. Only
// a block store holds an answered conversation for its next turn
// (--store-answers).
func storesOf(ms []cache.Method) (blocks, whole []string) {
	for _, m := range ms {
		switch cache.StoreOf(m).(type) {
		case nil:
		case *cache.BlockStore:
			blocks = append(blocks, m.Name())
		default:
			whole = append(whole, m.Name())
		}
	}
	return blocks, whole
}

// benchBase is the method a composition or variant is built on ("" for
// the primitives); for a cache under another decoder than its own
// (NAME@DECODER), the decoder alone (none@DECODER): what the cache adds.
func benchBase(method string) string {
	if name, dec, ok := strings.Cut(method, "@"); ok && name != "none" {
		return "none@" + dec
	}
	s, err := cache.Lookup(method)
	if err != nil {
		return ""
	}
	return s.Base
}

func (opts *benchOptions) run(ctx context.Context) error {
	samples, err := opts.samples()
	if err != nil {
		return err
	}
	if samples, err = benchConversations(opts, samples); err != nil {
		return err
	}
	cfg := opts.Cache.config(opts.f, opts.modelFlags, opts.regimeFlags)
	cfg.Methods = opts.Methods
	return withEngine(cfg, func(eng *engine.Engine) error {
		lm, gen := eng.Model, eng.Gen
		if eng.StoreNote != "" {
			fmt.Fprintf(opts.f.ErrOut, "bench: %s\n", eng.StoreNote)
		}
		if opts.StoreAnswer && opts.Turns == 0 {
			return fmt.Errorf("--store-answers keeps each answered turn for the next: it needs --turns")
		}
		allMethods := slices.Equal(opts.Methods, cache.Names())
		label := ""
		if opts.CompareModel != "" {
			label = filepath.Base(lm.Name)
		}
		// The default list is every registered method: run those this model
		// and these flags allow, and say why each other one is left out (a
		// method named with --methods must run).
		es, skipped, err := opts.evaluators(eng, label, "", allMethods)
		if err != nil {
			return err
		}
		if len(es) == 0 {
			return fmt.Errorf("no registered method runs on this model with these flags:\n%w", errors.Join(skipped...))
		}
		if err := storeAnswersNote(opts, es); err != nil {
			return err
		}
		if err := guideUsed(eng, es); err != nil {
			return err
		}
		if opts.CompareModel != "" {
			other, err := compareEvaluators(opts)
			if err != nil {
				return err
			}
			defer other.eng.Close()
			es = append(es, other.es...)
		}
		bar := progress.New(opts.f.ErrOut, "bench "+strings.Join(opts.Methods, ","), "req", len(samples)*len(es), opts.Quiet)
		res, err := profile.EvaluateInterleaved(ctx, es, samples, func(d, _ int) { bar.Set(d) })
		bar.Done()
		if err != nil {
			return err
		}
		var rows []profile.SuiteResult
		for _, r := range res {
			rows = append(rows, r...)
			rows = append(rows, profile.Overall(r))
		}
		var md strings.Builder
		writeBenchMarkdown(&md, rows)
		// bench.json and --json print the same object.
		js, err := json.MarshalIndent(map[string]any{"model": lm.Name, "fingerprint": lm.Fingerprint, "arch": lm.Config.ArchName(), "gen_length": gen.GenLength,
			"steps": gen.Steps, "block_length": gen.BlockLength, "refresh": lm.Card.RefreshOr(opts.Cache.Method.BiCache.Refresh), "lut": opts.Cache.LUT,
			"backend": lm.Backend.Name(), "gemm": gemmOf(lm.Backend), "isa": cpu.ISADescription(), "results": rows}, "", "  ")
		if err != nil {
			return err
		}
		if opts.Out != "" {
			if err := os.MkdirAll(opts.Out, 0o755); err != nil {
				return err
			}
			if err := writeFileAtomic(filepath.Join(opts.Out, "bench.md"), []byte(md.String())); err != nil {
				return err
			}
			if err := writeFileAtomic(filepath.Join(opts.Out, "bench.json"), append(js, '\n')); err != nil {
				return err
			}
			if err := atomicfile.Write(filepath.Join(opts.Out, "bench.parquet"), 0o644, func(w io.Writer) error {
				return parquet.Write(w, rows, parquet.Compression(&parquet.Zstd))
			}); err != nil {
				return err
			}
		}
		if opts.JSON {
			_, err := fmt.Fprintf(opts.f.Out, "%s\n", js)
			return err
		}
		fmt.Fprint(opts.f.Out, md.String())
		return nil
	})
}

func (opts *benchOptions) flags(fl *pflag.FlagSet) {
	opts.modelFlags.add(fl)
	fl.StringSliceVar(&opts.Methods, "methods", cache.Names(), "methods to compare (default: every registered method this model and flags allow; each one left out is printed with the reason)")
	opts.suiteSampling.add(fl, []string{"all"}, 20, "")
	addTurnsFlag(fl, &opts.Turns, "the earlier questions and their reference answers (--wildchat: the recorded replies); results per suite and turn")
	fl.StringSliceVar(&opts.Chat, "wildchat", nil, "with --turns: add --limit chat conversations to the workload, builtin (generated in WildChat's manner) and/or WildChat parquet files or directories (English conversations with that many turns); they have no reference answers, so each method's answers are compared with none's")
	fl.StringVar(&opts.ChatSystem, "chat-system", "You are a helpful assistant.", "system message of the --wildchat conversations")
	fl.IntVar(&opts.ChatChars, "max-conversation-chars", 6000, "skip --wildchat conversations whose first --turns exchanges are longer (characters; 0: no bound)")
	fl.BoolVar(&opts.StoreAnswer, "store-answers", false, "with --turns: the methods with a block store keep each answered conversation's blocks for the next turn (serve --store-answers)")
	fl.StringVar(&opts.CompareModel, "compare-model", "", "a second model run on the same samples, interleaved request by request (e.g. llada-tiny beside llada-tiny-block): the methods it can run, each at its own defaults, the results labelled by model; --lut applies to --model only")
	opts.regimeFlags.add(fl)
	addCacheFlags(fl, &opts.Cache)
	addGuideFlag(fl, &opts.Cache.Guide)
	fl.StringVar(&opts.Out, "out", "", "directory for bench.md, bench.parquet and bench.json")
	fl.BoolVar(&opts.JSON, "json", false, "print JSON instead of the markdown table")
	fl.BoolVar(&opts.Quiet, "quiet", false, "no progress bar")
}

// writeBenchMarkdown prints one row per method and suite with deltas
// against none on the same suite, and the speed-up against the method's
// base for compositions and variants.
func writeBenchMarkdown(w io.Writer, rows []profile.SuiteResult) {
	by := map[string]profile.SuiteResult{}
	for _, r := range rows {
		by[r.Model+"/"+r.Method+"/"+r.Suite] = r
	}
	// The guided decoder's columns, where a method decodes with it: the
	// guide's forwards (NFE is the diffusion model's), the tokens a step
	// committed, and the time in each model.
	guided := slices.ContainsFunc(rows, func(r profile.SuiteResult) bool { return r.GuidedSteps > 0 })
	head, rule := "", ""
	if guided {
		head, rule = " guide NFE | tokens / step | DLM s | guide s |", "---|---|---|---|"
	}
	fmt.Fprintln(w, "| method | suite | n | accuracy | Δ acc (pts) | = none | tokens/s | speed-up | vs base | FLOPs predict | NFE | rows computed | FLOPs | mean ratio | mean depth | deep refreshes / request | prefix hits (tokens) |"+head)
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"+rule)
	for _, r := range rows {
		acc, dAcc, agree, speed, vsBase, predict := "n/a", "", "", "", "", ""
		if !r.Unscored {
			acc = fmt.Sprintf("%.1f%%", 100*r.Accuracy)
		}
		if r.AgreeNone != nil {
			agree = fmt.Sprintf("%.1f%%", 100**r.AgreeNone)
		}
		if b, ok := by[r.Model+"/none/"+r.Suite]; ok && r.Method != "none" {
			if !r.Unscored {
				dAcc = fmt.Sprintf("%+.1f", 100*(r.Accuracy-b.Accuracy))
			}
			speed = fmt.Sprintf("%.2f×", r.TokensPerSec/b.TokensPerSec)
			if r.FLOPs > 0 && r.N == b.N {
				predict = fmt.Sprintf("%.2f×", b.FLOPs/r.FLOPs)
			}
		}
		if b, ok := by[r.Model+"/"+benchBase(r.Method)+"/"+r.Suite]; ok {
			vsBase = fmt.Sprintf("%.2f× vs %s", r.TokensPerSec/b.TokensPerSec, b.Method)
			if !r.Unscored {
				vsBase += fmt.Sprintf(" (%+.1f pts)", 100*(r.Accuracy-b.Accuracy))
			}
		}
		name := r.Suite
		if name == "average" {
			name = "**average**"
		}
		method := r.Method
		if r.Model != "" {
			method = r.Model + " " + r.Method
		}
		fmt.Fprintf(w, "| %s | %s | %d | %s | %s | %s | %.1f | %s | %s | %s | %d | %.1f%% | %.1f%% | %.3f | %.2f | %.1f | %d/%d |", method, name, r.N, acc, dAcc, agree,
			r.TokensPerSec, speed, vsBase, predict, r.NFE, 100*r.RowsFraction, 100*r.FLOPsFraction, r.MeanRatio, r.MeanDepth, float64(r.Refreshes)/float64(max(1, r.N)), r.HitTokens, r.QueryTokens)
		if guided {
			if r.GuidedSteps > 0 {
				fmt.Fprintf(w, " %d | %.2f | %.2f | %.2f |", r.GuideNFE, r.AcceptLen, r.DLMSeconds, r.GuideSeconds)
			} else {
				fmt.Fprint(w, " | | | |")
			}
		}
		fmt.Fprintln(w)
	}
}

func writeFileAtomic(path string, b []byte) error { return atomicfile.WriteFile(path, b, 0o644) }

// compared is the second model of bench --compare-model with its
// evaluators.
type compared struct {
	eng *engine.Engine
	es  []*profile.Evaluator
}

// compareEvaluators loads --compare-model and builds the evaluators of
// the methods it can run (at its own generation defaults and its own
// block store size for the exact cache); the others are skipped, said on
// stderr.
func compareEvaluators(opts *benchOptions) (*compared, error) {
	mf := opts.modelFlags
	mf.Model = opts.CompareModel
	cfg := opts.Cache.config(opts.f, mf, opts.regimeFlags)
	// --guide was checked against --model's vocabulary: the second model's
	// guided methods are skipped.
	cfg.LUT, cfg.Guide, cfg.Methods = "", "", opts.Methods
	eng, err := engine.Build(cfg)
	if err != nil {
		return nil, fmt.Errorf("--compare-model: %w", err)
	}
	if eng.StoreNote != "" {
		fmt.Fprintf(opts.f.ErrOut, "bench: %s: %s\n", eng.Model.Name, eng.StoreNote)
	}
	out := &compared{eng: eng}
	out.es, _, _ = opts.evaluators(eng, filepath.Base(eng.Model.Name), eng.Model.Name+": ", true)
	if len(out.es) == 0 {
		eng.Close()
		return nil, fmt.Errorf("--compare-model %s runs none of %v", opts.CompareModel, opts.Methods)
	}
	return out, nil
}

// evaluators builds the evaluators of --methods on eng's model, label
// naming the model in the rows ("" with one model). With skip, a method
// the model or the flags refuse is left out, said on stderr (after
// prefix) and returned among skipped; without, its error is returned.
func (opts *benchOptions) evaluators(eng *engine.Engine, label, prefix string, skip bool) (es []*profile.Evaluator, skipped []error, err error) {
	for _, name := range opts.Methods {
		meth, err := eng.NewMethod(name, nil, nil)
		if err != nil {
			if !skip {
				return nil, nil, err
			}
			fmt.Fprintf(opts.f.ErrOut, "bench: %sskipping %s: %v\n", prefix, name, err)
			skipped = append(skipped, fmt.Errorf("%s: %w", name, err))
			continue
		}
		_, blocks := cache.StoreOf(meth).(*cache.BlockStore)
		es = append(es, &profile.Evaluator{Model: eng.Model.Model, ModelName: label, Method: meth, Gen: meth.Gen(eng.Gen),
			HistoryPrefix: blocks, StoreAnswers: opts.StoreAnswer})
	}
	return es, skipped, nil
}

func newCmdBench(f *factory, runF func(*benchOptions) error) *cobra.Command {
	return newCommand(&benchOptions{f: f}, runF, &cobra.Command{
		Use:   "bench",
		Short: "Side-by-side throughput and accuracy of caching methods on task suites",
		Long: `Bench runs the same held-out samples through each caching method, one request
at a time, and prints tokens/s and accuracy per method and suite with deltas
against none, and for compositions and variants against their base
(bicache+block against block, bicache-elastic against bicache, …). Every
method gets a fresh prefix store, so the first request of each system
message pays for computing its prefix. The methods take turns request by
request (the order rotating), so that a slow spell on a shared machine
slows them alike; the speed-ups are ratios of the same run.

Methods:` + methodsHelp(),
		Example: `  dlmcache bench --lut out/table.json --limit 20 --out bench-out`,
		Args:    cobra.NoArgs,
	})
}
