package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/dlmcache/dlmcache/cache"
	"github.com/dlmcache/dlmcache/datasets"
	"github.com/dlmcache/dlmcache/engine"
	"github.com/dlmcache/dlmcache/internal/atomicfile"
	"github.com/dlmcache/dlmcache/internal/progress"
	"github.com/dlmcache/dlmcache/lut"
	"github.com/dlmcache/dlmcache/model/sample"
	"github.com/dlmcache/dlmcache/profile"
)

type lutVerifyOptions struct {
	f *factory

	File string
	modelFlags
	Cache      cacheFlags
	Requests   string
	Groups     int
	Seed       int64
	Gate       string
	Agreement  float64
	MaxLoss    float64
	Confidence float64
	JSON       bool
	Dump       string
	Quiet      bool
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
		// Heldout's system messages: a generator calibration never draws
		// from (its requests are External's).
		for _, s := range datasets.Heldout(groups, 4, seed) {
			out = append(out, verifyRequest{System: s.System, User: s.User, Answer: s.Answer, Suite: s.Suite})
		}
		// Every suite's held-out split too (the generators' own system
		// messages, held-out data blocks), groups samples each: with
		// Heldout's, span copies and arithmetic in both kinds.
		for _, suite := range datasets.Suites() {
			for _, s := range datasets.Generate(suite, datasets.Eval, seed, groups, datasets.DefaultOptions()) {
				out = append(out, verifyRequest{System: s.System, User: s.User, Answer: s.Answer, Suite: s.Suite})
			}
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

// verifyBin is one ratio bin's outcome for one answer-length class.
type verifyBin struct {
	Lo              float64        `json:"lo"`
	Hi              float64        `json:"hi"`
	Class           string         `json:"class"`
	Methods         map[string]int `json:"methods"` // requests per method served (the table's choices)
	SecondsNone     float64        `json:"seconds_none"`
	SecondsMethod   float64        `json:"seconds_table"`
	SpeedUp         float64        `json:"speedup"`
	Requests        int            `json:"requests"`
	Depth           float64        `json:"mean_depth"`
	Tokens          int            `json:"tokens"`
	TokensAgree     int            `json:"tokens_agreeing"`
	Answers         int            `json:"answers_agreeing"`
	TokenAgreement  float64        `json:"token_agreement"`
	AnswerAgreement float64        `json:"answer_agreement"`
	Checked         int            `json:"checked"` // requests with a reference answer
	CorrectNone     int            `json:"correct_none"`
	CorrectMethod   int            `json:"correct_method"`
	Pass            bool           `json:"pass"`
}

func (opts *lutVerifyOptions) run(ctx context.Context) error {
	if opts.Gate != profile.GateToken && opts.Gate != profile.GateAnswer && opts.Gate != gateAccuracy && opts.Gate != gateLoss {
		return fmt.Errorf("--gate %q: want accuracy, loss, answer or token", opts.Gate)
	}
	if !(opts.Confidence > 0 && opts.Confidence < 1) {
		return fmt.Errorf("--confidence %g: want (0, 1)", opts.Confidence)
	}
	reqs, err := readVerifyRequests(opts.Requests, opts.Groups, opts.Seed)
	if err != nil {
		return err
	}
	if opts.Dump != "" {
		return dumpVerifyRequests(opts.Dump, reqs)
	}
	cfg := opts.Cache.config(opts.f, opts.modelFlags, regimeFlags{})
	// The table's regime, and the method serve --lut runs with no other
	// flag.
	cfg.LUT, cfg.TableRegime = opts.File, true
	eng, err := engine.Build(cfg)
	if err != nil {
		return err
	}
	defer eng.Close()
	lm, table := eng.Model, eng.Table
	name := engine.TableMethod(table)
	meth, err := eng.NewMethod(name, nil, nil)
	if err != nil {
		return err
	}
	gen := eng.Gen
	guideStore, guidedTable, err := opts.verifyGuide(eng, meth)
	if err != nil {
		return err
	}
	if guideStore != nil { // the guide's shared prefixes as serve's store gives them
		gen.GuidePrefix = cache.GuidePrefix(guideStore, eng.Guide.Fingerprint, opts.Cache.Salt)
	}
	classes, runs := verifyRuns(lm, table, gen, reqs)
	t := newVerifyTally(table, classes)
	bar := progress.New(opts.f.ErrOut, "lut verify", "req", len(runs), opts.Quiet)
	for i, x := range runs {
		ids, m, err := lm.Tokenizer.EncodeChat(x.r.System, x.r.User)
		if err != nil {
			return err
		}
		ref, err := sample.Generate(ctx, lm.Network, ids, m, x.gen, nil)
		if err != nil {
			return err
		}
		chosen, cg := cache.Choose(meth, len(ids), m, x.gen)
		got, err := cache.Generate(ctx, lm.Network, chosen, cache.Request{Prompt: ids, PrefixLen: m}, cg)
		if err != nil {
			return err
		}
		t.add(lm, x, float64(m)/float64(len(ids)+x.gen.GenLength), chosen.Name(), ref, got)
		bar.Set(i + 1)
	}
	bar.Done()
	used, all, failed := t.summary(classes, opts.Gate, opts.Agreement)
	guided, guidedReqs := t.guided, t.guidedReqs
	loss := 0.0
	if all.Checked > 0 {
		loss = 100 * float64(all.CorrectNone-all.CorrectMethod) / float64(all.Checked)
	}
	diff := pairedDiff(t.diffs, normalQuantile((1+opts.Confidence)/2))
	speed := t.secNone / max(t.secMeth, 1e-9)
	var st cache.Stats
	if store := cache.StoreOf(meth); store != nil {
		st = store.Stats()
	}
	var gst cache.Stats
	if guideStore != nil {
		gst = guideStore.Stats()
	}
	if opts.JSON {
		enc := json.NewEncoder(opts.f.Out)
		enc.SetIndent("", "  ")
		rec := map[string]any{"table": opts.File, "method": name, "gate": opts.Gate, "agreement": opts.Agreement, "max_loss": opts.MaxLoss,
			"requests": len(runs), "checked": all.Checked, "accuracy_none": acc(all.CorrectNone, all.Checked), "accuracy_table": acc(all.CorrectMethod, all.Checked),
			"loss_points": loss, "difference_points": diff.Mean, "difference_low": diff.Low, "difference_high": diff.High, "confidence": opts.Confidence,
			"speedup": speed, "prefix_hit_tokens": st.HitTokens, "prefix_query_tokens": st.QueryTokens, "bins": used}
		if g := eng.Guide; g != nil && guidedTable {
			gr := guideRecord(g, guided)
			gr["requests"] = guidedReqs
			gr["prefix_hit_tokens"], gr["prefix_query_tokens"] = gst.HitTokens, gst.QueryTokens
			rec["guide"] = gr
		}
		if err := enc.Encode(rec); err != nil {
			return err
		}
	} else {
		writeVerify(opts.f.Out, used)
		fmt.Fprintf(opts.f.Out, "method %s, %d requests (%d with reference answers): accuracy none %.1f%%, table %.1f%% (%+.1f points; paired %.0f%% interval [%+.1f, %+.1f]), answers unchanged %.1f%%, %.2f× none's generation speed; prefix store hits %d of %d prefix tokens\n",
			name, len(runs), all.Checked, 100*acc(all.CorrectNone, all.Checked), 100*acc(all.CorrectMethod, all.Checked), diff.Mean,
			100*opts.Confidence, diff.Low, diff.High,
			100*float64(all.Answers)/float64(max(1, all.Requests)), speed, st.HitTokens, st.QueryTokens)
		if g := eng.Guide; g != nil && guidedTable {
			fmt.Fprintf(opts.f.Out, "guide %s: %d requests decoded guided, %d guided steps committing %d tokens (%.2f a step), guide NFE %d (DLM %.2f s, guide %.2f s); guide prefix store hits %d of %d prefix tokens\n",
				g.Name, guidedReqs, guided.Steps, guided.Committed, guided.AcceptLen(), guided.NFE, guided.DLMTime.Seconds(), guided.GuideTime.Seconds(), gst.HitTokens, gst.QueryTokens)
		}
	}
	return opts.verdict(diff, all.Checked, failed, len(used))
}

// verdict is lut verify's exit: the gate's failure (exit 1) or its PASS
// line, on the paired difference diff over checked requests and the bins
// that failed of those used.
func (opts *lutVerifyOptions) verdict(diff interval, checked, failed, used int) error {
	if opts.Gate == gateAccuracy || opts.Gate == gateLoss {
		if why := accuracyGate(diff, opts.MaxLoss, opts.Gate == gateAccuracy); why != "" {
			return &exitError{code: 1, err: fmt.Errorf("%s: the table's accuracy against none on %d held-out requests is %+.1f points (paired %.0f%% interval [%+.1f, %+.1f]): %s",
				opts.File, checked, diff.Mean, 100*opts.Confidence, diff.Low, diff.High, why)}
		}
	}
	if failed > 0 {
		return &exitError{code: 1, err: fmt.Errorf("%s: %d of %d bins below %s agreement %g", opts.File, failed, used, opts.Gate, opts.Agreement)}
	}
	switch opts.Gate {
	case gateAccuracy:
		fmt.Fprintf(opts.f.ErrOut, "%s: PASS: %+.1f points of accuracy against none on %d held-out requests, the paired %.0f%% interval [%+.1f, %+.1f] at or above −%g\n",
			opts.File, diff.Mean, checked, 100*opts.Confidence, diff.Low, diff.High, opts.MaxLoss)
	case gateLoss:
		note := ""
		if diff.Low < -opts.MaxLoss {
			note = fmt.Sprintf("; the interval's lower end is below −%g: too few requests to show the table within %g points (--gate accuracy; more --groups)", opts.MaxLoss, opts.MaxLoss)
		}
		fmt.Fprintf(opts.f.ErrOut, "%s: PASS (--gate loss): %+.1f points of accuracy against none on %d held-out requests (at least −%g), paired %.0f%% interval [%+.1f, %+.1f], not wholly below 0%s\n",
			opts.File, diff.Mean, checked, opts.MaxLoss, 100*opts.Confidence, diff.Low, diff.High, note)
	default:
		fmt.Fprintf(opts.f.ErrOut, "%s: every bin keeps %s agreement ≥ %g\n", opts.File, opts.Gate, opts.Agreement)
	}
	return nil
}

// dumpVerifyRequests writes reqs to path as JSON Lines (--dump-requests).
func dumpVerifyRequests(path string, reqs []verifyRequest) error {
	return atomicfile.Write(path, 0o644, func(w io.Writer) error {
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

// verifyRun is one request lut verify serves, in one answer-length class.
type verifyRun struct {
	r   verifyRequest
	gen sample.GenOptions
	cls string
}

// verifyRuns is every answer-length class the table knows and the runs of
// reqs in each: the regime's gen length for every request, and one block
// for the requests whose reference answer fits one (a client's
// max_tokens).
func verifyRuns(lm *engine.Model, table *lut.Table, gen sample.GenOptions, reqs []verifyRequest) ([]lut.Class, []verifyRun) {
	classes := []lut.Class{{Name: "all"}}
	if table.Chooses() {
		classes = table.Classes
	}
	var runs []verifyRun
	for _, cl := range classes {
		g := profile.ClassGen(gen, cl)
		for _, r := range reqs {
			if cl.MaxGen > 0 && (r.Answer == "" || len(lm.Tokenizer.Encode(r.Answer))+2 > g.GenLength) {
				continue
			}
			runs = append(runs, verifyRun{r, g, cl.Name})
		}
	}
	return classes, runs
}

// verifyTally sums lut verify's runs: per class and table bin, the
// seconds of both, the paired differences of correctness (table correct −
// none correct, per request with a reference answer) and the guided
// choices' guide counters.
type verifyTally struct {
	bins             map[string][]verifyBin
	secNone, secMeth float64
	diffs            []float64
	guided           sample.GuideStats
	guidedReqs       int
}

func newVerifyTally(table *lut.Table, classes []lut.Class) *verifyTally {
	t := &verifyTally{bins: map[string][]verifyBin{}}
	for _, cl := range classes {
		for _, b := range table.Bins {
			t.bins[cl.Name] = append(t.bins[cl.Name], verifyBin{Lo: b.Lo, Hi: b.Hi, Class: cl.Name, Methods: map[string]int{}})
		}
	}
	return t
}

// add counts run x at prefix ratio ratio: none's generation ref and the
// chosen method's got.
func (t *verifyTally) add(lm *engine.Model, x verifyRun, ratio float64, chosen string, ref *sample.Generation, got *cache.Result) {
	t.secNone += ref.Duration.Seconds()
	t.secMeth += got.Duration.Seconds()
	if gs := got.Guide; gs.Steps > 0 {
		t.guidedReqs++
		t.guided.Add(gs)
	}
	bs := t.bins[x.cls]
	bi := sort.Search(len(bs), func(k int) bool { return bs[k].Hi > ratio }) // the bin, or the last
	b := &bs[min(bi, len(bs)-1)]
	n, k, eq := profile.CompareAnswers(ref.Answer, got.Answer, lm.AnswerEnd)
	b.Requests++
	b.Methods[chosen]++
	b.Depth += float64(got.Info.Depth)
	b.Tokens += n
	b.TokensAgree += k
	b.SecondsNone += ref.Duration.Seconds()
	b.SecondsMethod += got.Duration.Seconds()
	if eq {
		b.Answers++
	}
	if x.r.Answer != "" {
		b.Checked++
		okNone := datasets.CheckAnswer(x.r.Suite, lm.AnswerText(ref.Answer), x.r.Answer)
		okMeth := datasets.CheckAnswer(x.r.Suite, lm.AnswerText(got.Answer), x.r.Answer)
		if okNone {
			b.CorrectNone++
		}
		if okMeth {
			b.CorrectMethod++
		}
		t.diffs = append(t.diffs, b2f(okMeth)-b2f(okNone))
	}
}

// summary is the bins that served requests (their means and gate
// verdicts filled in), their sum and how many fail the gate.
func (t *verifyTally) summary(classes []lut.Class, gate string, agreement float64) (used []verifyBin, all verifyBin, failed int) {
	for _, cl := range classes {
		for _, b := range t.bins[cl.Name] {
			if b.Requests == 0 {
				continue
			}
			all.Checked += b.Checked
			all.CorrectNone += b.CorrectNone
			all.CorrectMethod += b.CorrectMethod
			all.Requests += b.Requests
			all.Answers += b.Answers
			b.Depth /= float64(b.Requests)
			b.TokenAgreement = float64(b.TokensAgree) / float64(max(1, b.Tokens))
			b.AnswerAgreement = float64(b.Answers) / float64(b.Requests)
			if b.SecondsMethod > 0 {
				b.SpeedUp = b.SecondsNone / b.SecondsMethod
			}
			b.Pass = true
			switch gate {
			case profile.GateAnswer:
				b.Pass = b.AnswerAgreement >= agreement
			case profile.GateToken:
				b.Pass = b.TokenAgreement >= agreement
			}
			if !b.Pass {
				failed++
			}
			used = append(used, b)
		}
	}
	return used, all, failed
}

// verifyGuide settles --guide against the table (engine.Build loaded the
// guide and held it to the table's guide record, Table.CheckGuide, as
// serve --lut does): a table that records no guide is refused with it
// (nothing of the table decodes guided); a table whose choices decode
// guided gets the guide's prefix store serve builds (engine.Engine.GuideStore);
// a table calibrated with this guide whose choices all left the guided
// decoder verifies with the guide unused, said in one line. guided says
// whether the table's choices decode guided (the report then adds the
// guide's work).
func (opts *lutVerifyOptions) verifyGuide(eng *engine.Engine, meth cache.Method) (store *cache.BlockStore, guided bool, err error) {
	g, t := eng.Guide, eng.Table
	switch {
	case g == nil:
		return nil, false, nil
	case t.Guide == nil:
		return nil, false, fmt.Errorf("--guide %s: table %s records no guide (calibrated without --guide), so none of its choices decodes with the guided decoder: verify it without --guide", opts.Cache.Guide, opts.File)
	case !engine.DecodesGuided(meth, eng.Gen):
		fmt.Fprintf(opts.f.ErrOut, "dlmcache: table %s was calibrated with guide %s, but none of its choices decodes with the guided decoder: the guide goes unused (serve the table without --guide)\n", opts.File, g.Name)
		return nil, false, nil
	}
	st, note := eng.GuideStore()
	fmt.Fprintf(opts.f.ErrOut, "dlmcache: guide %s (%s, %s): verifies the guided choices' proposals, %d a forward; %s\n", g.Name, g.Config.ArchName(), g.Fingerprint, sample.GuideChunk, note)
	return st, true, nil
}

func (opts *lutVerifyOptions) setArgs(args []string) { opts.File = args[0] }

func (opts *lutVerifyOptions) flags(fl *pflag.FlagSet) {
	opts.modelFlags.add(fl)
	addCacheFlags(fl, &opts.Cache)
	addGuideFlag(fl, &opts.Cache.Guide)
	fl.StringVar(&opts.Requests, "requests", "builtin", "held-out requests: builtin (datasets.Heldout's system messages, which calibration never draws, and the suites' held-out samples) or a JSON Lines file")
	fl.IntVar(&opts.Groups, "groups", 30, "builtin: held-out system messages (4 questions each), and samples of each suite's held-out split")
	fl.Int64Var(&opts.Seed, "seed", 7, "builtin: sampling seed")
	fl.StringVar(&opts.Gate, "gate", gateAccuracy, "what is held to the target: accuracy (the held-out accuracy a user may lose against none, --max-loss, shown by the paired interval's lower end), loss (the mean loss at most --max-loss and the interval not wholly below 0: for sets too small to show the first, make run's), answer (each bin's whole-answer agreement, --agreement) or token")
	fl.Float64Var(&opts.Agreement, "agreement", 0.9, "--gate answer or token: the least agreement a bin may have")
	fl.Float64Var(&opts.MaxLoss, "max-loss", 1, "--gate accuracy and loss: the accuracy (points against none, over every held-out request with a reference answer) the table may lose: accuracy fails when the paired interval's lower end is below minus this, loss when the mean difference is, or the interval lies wholly below 0")
	fl.Float64Var(&opts.Confidence, "confidence", 0.95, "--gate accuracy: the two-sided confidence of the paired interval of the accuracy difference")
	fl.BoolVar(&opts.JSON, "json", false, "print the per-bin report as JSON")
	fl.StringVar(&opts.Dump, "dump-requests", "", "write the requests as JSON Lines to this file and exit (to replay them elsewhere, e.g. through serve)")
	fl.BoolVar(&opts.Quiet, "quiet", false, "no progress bar")
}

// interval is a paired difference in accuracy points with its interval.
type interval struct{ Mean, Low, High float64 }

// pairedDiff is the mean of the per-request differences d (each −1, 0 or
// 1: the table's answer correct minus none's), in points, with the
// normal interval mean ± z·sd/√n (z the quantile of (1+confidence)/2).
// Where no answer changed correctness the interval is [0, 0].
func pairedDiff(d []float64, z float64) interval {
	mean, se := profile.MeanSE(d)
	return interval{Mean: 100 * mean, Low: 100 * (mean - z*se), High: 100 * (mean + z*se)}
}

// accuracyGate is the accuracy gates' verdict on the paired difference d
// (points, table − none): "" when the table passes, else why it fails.
// strict (--gate accuracy) fails a table unless the interval's lower end
// is at or above −maxLoss: it is shown within maxLoss points. The other
// (--gate loss) fails a table whose mean difference loses more than
// maxLoss points, or that is worse than none beyond the noise (the
// interval's upper end below 0). The strict gate needs many requests: on
// the 243 make run can afford, a single answer lost, or one lost and one
// gained, puts the lower end near −1.1 points, so make run gates with
// loss and prints where the strict one would need more requests.
func accuracyGate(d interval, maxLoss float64, strict bool) string {
	switch {
	case strict && d.Low < -maxLoss:
		return fmt.Sprintf("its interval's lower end is below −%g points (not shown within %g points: a table that changes nothing on average needs more requests for that, --groups)", maxLoss, maxLoss)
	case d.Mean < -maxLoss:
		return fmt.Sprintf("it loses more than %g points", maxLoss)
	case d.High < 0:
		return "it is worse than none beyond the noise (the interval's upper end is below 0)"
	}
	return ""
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// gateAccuracy holds the table to the accuracy a user may lose, shown by
// the paired interval's lower end; gateLoss to the mean loss and to not
// being worse than none beyond the noise (accuracyGate).
const (
	gateAccuracy = "accuracy"
	gateLoss     = "loss"
)

func acc(k, n int) float64 {
	if n == 0 {
		return 0
	}
	return float64(k) / float64(n)
}

func writeVerify(w io.Writer, bins []verifyBin) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ratio\tclass\trequests\tmethods\tdepth\ttoken agreement\tanswer agreement\taccuracy none\taccuracy table\tspeed-up\t")
	for _, b := range bins {
		pct := func(k int) string {
			if b.Checked == 0 {
				return "-"
			}
			return fmt.Sprintf("%.1f%%", 100*float64(k)/float64(b.Checked))
		}
		mark := ""
		if !b.Pass {
			mark = "BELOW TARGET"
		}
		var ms []string
		for _, m := range slices.Sorted(maps.Keys(b.Methods)) {
			ms = append(ms, fmt.Sprintf("%s ×%d", m, b.Methods[m]))
		}
		fmt.Fprintf(tw, "[%.2f, %.2f)\t%s\t%d\t%s\t%.1f\t%.4f\t%.4f\t%s\t%s\t%.2f×\t%s\n", b.Lo, b.Hi, b.Class, b.Requests, strings.Join(ms, ", "), b.Depth,
			b.TokenAgreement, b.AnswerAgreement, pct(b.CorrectNone), pct(b.CorrectMethod), b.SpeedUp, mark)
	}
	tw.Flush()
}

func newCmdLutVerify(f *factory, runF func(*lutVerifyOptions) error) *cobra.Command {
	return newCommand(&lutVerifyOptions{f: f}, runF, &cobra.Command{
		Use:   "verify table.json",
		Short: "Replay held-out requests through what serve --lut runs with the table; fail when it loses accuracy",
		Long: `Verify replays held-out requests, in order, through what serve --lut would
run with the table and no other flag (a calibrated table's per-request
choice, the chosen methods on one prefix store so that requests sharing a
system message share its K/V as behind serve; bicache for a table without
choices), and answers each with no caching too, in every answer-length
class the table knows (the regime's gen length for every request, one block
for those whose answer fits one). Per ratio bin and class it reports the
methods served, the agreement of the answers with the uncached ones — per
token and per whole answer —, the accuracy of both, and the speed-up.

It exits with status 1 when the table loses more than --max-loss points of
accuracy against none over the requests with reference answers (--gate
accuracy, the default), or with --gate answer/token when a bin's agreement
is below --agreement: a gate to put in CI before deploying a table.

--requests builtin (default) is datasets.Heldout — system messages neither
the suites' generators nor calibration's (datasets.External) ever produce
(openings and filler of their own, 3–22 rows, 0–160 words), 4 questions
each, --groups of them — and --groups held-out
samples of every suite, the long-answer span suite among them. Otherwise a
JSON Lines file, one request a line: {"system": "...", "user": "...",
"answer": "..." (optional), "suite": "..."}.

A table calibrated with --guide (calibrate --guide: its record names the
guide) whose choices decode with the guided decoder needs --guide: the
guide it was calibrated with (its fingerprint checked against the table's
record, as serve --lut checks it), its shared prefixes from a block store
of its own as behind serve; the report adds the guide's work (guided
steps, tokens a step, NFE, time in each model, prefix store hits). Such a
table is refused without --guide, and with another guide; --guide with a
table that records none is refused.`,
		Example: `  dlmcache lut verify calib/table.json                          # the calibrated table, its deep source
  dlmcache lut verify prof/table-cosine.json                      # a cosine estimate, served as bicache (fails the gate)
  dlmcache lut verify calib/table.json --requests held-out.jsonl
  dlmcache lut verify calib/table.json --guide models/llada-tiny-ar # a table calibrate --guide wrote`,
		Args: cobra.ExactArgs(1),
	})
}
