package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/dlmcache/dlmcache/cache"
	"github.com/dlmcache/dlmcache/datasets"
	"github.com/dlmcache/dlmcache/internal/atomicfile"
	"github.com/dlmcache/dlmcache/internal/progress"
	"github.com/dlmcache/dlmcache/profile"
)

type lutVerifyOptions struct {
	f *factory

	File string
	modelFlags
	Cache     cacheFlags
	Requests  string
	Groups    int
	Seed      int64
	Gate      string
	Agreement float64
	JSON      bool
	Dump      string
	Quiet     bool
}

func newCmdLutVerify(f *factory, runF func(*lutVerifyOptions) error) *cobra.Command {
	opts := &lutVerifyOptions{f: f}
	cmd := &cobra.Command{
		Use:   "verify table.json",
		Short: "Replay held-out requests through serve's method with a table; fail below the agreement target",
		Long: `Verify replays held-out requests, in order, through the method serve would
run with the table (bicache on one prefix store, so requests that share a
system message share its K/V, as they do behind serve), and answers each
with no caching too. Per ratio bin it reports the agreement of the answers
with the uncached ones — per token and per whole answer — and the accuracy
of both where the requests carry reference answers. It exits with status 1
when any bin's --gate agreement is below --agreement: a gate to put in CI
before deploying a new table.

--requests builtin (default) is datasets.External: system messages the
suites' generators never produce (other openings and filler, 3–22 rows,
0–160 words), 4 questions each. Otherwise a JSON Lines file, one request a
line: {"system": "...", "user": "...", "answer": "..." (optional), "suite": "..."}.`,
		Example: `  dlmcache lut verify calib/table.json                          # the calibrated table, its deep source
  dlmcache lut verify prof/table.json --deep-source store       # a cosine table across requests
  dlmcache lut verify calib/table.json --requests held-out.jsonl`,
		Args: cobra.ExactArgs(1),
		RunE: runE(opts, runF, func(args []string) { opts.File = args[0] }, func(ctx context.Context) error { return lutVerifyRun(ctx, opts) }),
	}
	fl := cmd.Flags()
	opts.modelFlags.add(fl)
	addCacheFlags(fl, &opts.Cache)
	fl.StringVar(&opts.Requests, "requests", "builtin", "held-out requests: builtin (datasets.External) or a JSON Lines file")
	fl.IntVar(&opts.Groups, "groups", 40, "builtin: system messages (4 questions each)")
	fl.Int64Var(&opts.Seed, "seed", 7, "builtin: sampling seed")
	fl.StringVar(&opts.Gate, "gate", profile.GateAnswer, "agreement held to the target: answer (whole answers) or token")
	fl.Float64Var(&opts.Agreement, "agreement", 0.9, "the least agreement a bin may have")
	fl.BoolVar(&opts.JSON, "json", false, "print the per-bin report as JSON")
	fl.StringVar(&opts.Dump, "dump-requests", "", "write the requests as JSON Lines to this file and exit (to replay them elsewhere, e.g. through serve)")
	fl.BoolVar(&opts.Quiet, "quiet", false, "no progress bar")
	return cmd
}

// verifyRequest is one held-out request.
type verifyRequest struct {
	System string `json:"system"`
	User   string `json:"user"`
	Answer string `json:"answer,omitempty"`
	Suite  string `json:"suite,omitempty"`
}

func readVerifyRequests(path string, groups int, seed int64) ([]verifyRequest, error) {
	if path == "builtin" {
		var out []verifyRequest
		for _, s := range datasets.External(groups, 4, seed) {
			out = append(out, verifyRequest{System: s.System, User: s.User, Answer: s.Answer, Suite: s.Suite})
		}
		return out, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []verifyRequest
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<24)
	for n := 1; sc.Scan(); n++ {
		if len(sc.Bytes()) == 0 {
			continue
		}
		var r verifyRequest
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		if r.User == "" {
			return nil, fmt.Errorf("%s:%d: no \"user\"", path, n)
		}
		out = append(out, r)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no requests", path)
	}
	return out, nil
}

// verifyBin is one ratio bin's outcome.
type verifyBin struct {
	Lo              float64 `json:"lo"`
	Hi              float64 `json:"hi"`
	Requests        int     `json:"requests"`
	Depth           float64 `json:"mean_depth"`
	Tokens          int     `json:"tokens"`
	TokensAgree     int     `json:"tokens_agreeing"`
	Answers         int     `json:"answers_agreeing"`
	TokenAgreement  float64 `json:"token_agreement"`
	AnswerAgreement float64 `json:"answer_agreement"`
	Checked         int     `json:"checked"` // requests with a reference answer
	CorrectNone     int     `json:"correct_none"`
	CorrectMethod   int     `json:"correct_method"`
	Pass            bool    `json:"pass"`
}

func lutVerifyRun(ctx context.Context, opts *lutVerifyOptions) error {
	if opts.Gate != profile.GateToken && opts.Gate != profile.GateAnswer {
		return fmt.Errorf("--gate %q: want token or answer", opts.Gate)
	}
	reqs, err := readVerifyRequests(opts.Requests, opts.Groups, opts.Seed)
	if err != nil {
		return err
	}
	if opts.Dump != "" {
		return atomicfile.Write(opts.Dump, 0o644, func(w io.Writer) error {
			enc := json.NewEncoder(w)
			enc.SetEscapeHTML(false)
			for _, r := range reqs {
				if err := enc.Encode(r); err != nil {
					return err
				}
			}
			return nil
		})
	}
	opts.Cache.LUT = opts.File
	env, err := loadMethodEnv(opts.f, opts.modelFlags, regimeFlags{}, &opts.Cache)
	if err != nil {
		return err
	}
	defer env.lm.Close()
	lm, table := env.lm, env.table
	if table.GenLength > 0 { // the table's regime
		if env.gen, err = lm.genOptions(table.GenLength, table.Steps, table.BlockLength); err != nil {
			return err
		}
	}
	meth, err := env.method("bicache", &opts.Cache, nil)
	if err != nil {
		return err
	}
	bins := make([]verifyBin, len(table.Bins))
	for i, b := range table.Bins {
		bins[i] = verifyBin{Lo: b.Lo, Hi: b.Hi}
	}
	bar := progress.New(opts.f.ErrOut, "lut verify", "req", len(reqs), opts.Quiet)
	for i, r := range reqs {
		ids, m, err := lm.Tokenizer.EncodeChat(r.System, r.User)
		if err != nil {
			return err
		}
		ref, err := lm.Generate(ctx, ids, m, env.gen, nil)
		if err != nil {
			return err
		}
		got, err := cache.Run(ctx, lm.LLaDA, meth, cache.Request{Prompt: ids, PrefixLen: m}, env.gen)
		if err != nil {
			return err
		}
		info := got.Info
		bi := sort.Search(len(bins), func(k int) bool { return bins[k].Hi > info.Ratio }) // the bin, or the last
		bi = min(bi, len(bins)-1)
		b := &bins[bi]
		n, k, eq := profile.CompareAnswers(ref.Answer, got.Answer, lm.AnswerEnd)
		b.Requests++
		b.Depth += float64(info.Depth)
		b.Tokens += n
		b.TokensAgree += k
		if eq {
			b.Answers++
		}
		if r.Answer != "" {
			b.Checked++
			if datasets.CheckAnswer(r.Suite, lm.AnswerText(ref.Answer), r.Answer) {
				b.CorrectNone++
			}
			if datasets.CheckAnswer(r.Suite, lm.AnswerText(got.Answer), r.Answer) {
				b.CorrectMethod++
			}
		}
		bar.Set(i + 1)
	}
	bar.Done()
	failed := 0
	var used []verifyBin
	for _, b := range bins {
		if b.Requests == 0 {
			continue
		}
		b.Depth /= float64(b.Requests)
		b.TokenAgreement = float64(b.TokensAgree) / float64(max(1, b.Tokens))
		b.AnswerAgreement = float64(b.Answers) / float64(b.Requests)
		g := b.TokenAgreement
		if opts.Gate == profile.GateAnswer {
			g = b.AnswerAgreement
		}
		b.Pass = g >= opts.Agreement
		if !b.Pass {
			failed++
		}
		used = append(used, b)
	}
	st := meth.Store().Stats()
	if opts.JSON {
		enc := json.NewEncoder(opts.f.Out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(map[string]any{"table": opts.File, "deep_source": meth.Source(), "gate": opts.Gate, "agreement": opts.Agreement,
			"requests": len(reqs), "prefix_hit_tokens": st.HitTokens, "prefix_query_tokens": st.QueryTokens, "bins": used}); err != nil {
			return err
		}
	} else {
		writeVerify(opts.f.Out, used)
		fmt.Fprintf(opts.f.Out, "deep source %s, %d requests, prefix store hits %d of %d prefix tokens\n", meth.Source(), len(reqs), st.HitTokens, st.QueryTokens)
	}
	if failed > 0 {
		return &exitError{code: 1, err: fmt.Errorf("%s: %d of %d bins below %s agreement %g with the %s deep source", opts.File, failed, len(used), opts.Gate, opts.Agreement, meth.Source())}
	}
	fmt.Fprintf(opts.f.ErrOut, "%s: every bin keeps %s agreement ≥ %g with the %s deep source\n", opts.File, opts.Gate, opts.Agreement, meth.Source())
	return nil
}

func writeVerify(w io.Writer, bins []verifyBin) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ratio\trequests\tdepth\ttoken agreement\tanswer agreement\taccuracy none\taccuracy table\t")
	for _, b := range bins {
		acc := func(k int) string {
			if b.Checked == 0 {
				return "-"
			}
			return fmt.Sprintf("%.1f%%", 100*float64(k)/float64(b.Checked))
		}
		mark := "ok"
		if !b.Pass {
			mark = "BELOW TARGET"
		}
		fmt.Fprintf(tw, "[%.2f, %.2f)\t%d\t%.1f\t%.4f\t%.4f\t%s\t%s\t%s\n", b.Lo, b.Hi, b.Requests, b.Depth,
			b.TokenAgreement, b.AnswerAgreement, acc(b.CorrectNone), acc(b.CorrectMethod), mark)
	}
	tw.Flush()
}
