package profile

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/dlmcache/dlmcache/cache"
	"github.com/dlmcache/dlmcache/datasets"
	"github.com/dlmcache/dlmcache/model/load"
	"github.com/dlmcache/dlmcache/model/sample"
	"github.com/dlmcache/dlmcache/model/tokenizer"
)

// SuiteResult is one method's outcome on one task suite.
type SuiteResult struct {
	// Model names the model when a bench compares models ("" otherwise).
	Model    string  `json:"model,omitempty" parquet:"model,optional"`
	Method   string  `json:"method" parquet:"method"`
	Suite    string  `json:"suite" parquet:"suite"`
	N        int     `json:"n" parquet:"n"`
	Correct  int     `json:"correct" parquet:"correct"`
	Accuracy float64 `json:"accuracy" parquet:"accuracy"`
	// Unscored marks a suite without reference answers (chat
	// conversations): Correct and Accuracy are then 0 and mean nothing.
	Unscored bool `json:"unscored,omitempty" parquet:"unscored"`
	// AgreeNone is the fraction of answers identical (as text) to the
	// uncached model's answer to the same request, when a bench ran none
	// beside the method; nil otherwise (and for none itself).
	AgreeNone    *float64 `json:"agree_none,omitempty" parquet:"agree_none,optional"`
	Seconds      float64  `json:"seconds" parquet:"seconds"`
	TokensPerSec float64  `json:"tokens_per_sec" parquet:"tokens_per_sec"` // answer slots decoded per second
	NFE          int      `json:"nfe" parquet:"nfe"`
	TPF          float64  `json:"tokens_per_forward" parquet:"tokens_per_forward"`
	RowsFraction float64  `json:"rows_fraction" parquet:"rows_fraction"` // layer-rows computed (prefix-store fills included) / no caching's
	// FLOPs is the matrix products' FLOPs (prefix-store fills included);
	// FLOPsFraction divides it by what computing every row on the same
	// steps costs.
	FLOPs         float64 `json:"flops" parquet:"flops"`
	FLOPsFraction float64 `json:"flops_fraction" parquet:"flops_fraction"`
	MeanRatio     float64 `json:"mean_ratio" parquet:"mean_ratio"`
	MeanDepth     float64 `json:"mean_depth" parquet:"mean_depth"`
	Clamped       int     `json:"ratio_clamps" parquet:"ratio_clamps"`
	QueryTokens   int64   `json:"prefix_query_tokens" parquet:"prefix_query_tokens"`
	HitTokens     int64   `json:"prefix_hit_tokens" parquet:"prefix_hit_tokens"`
	// Refreshes counts the steps on which BiCache's deep layers refreshed
	// (fixed period or drift trigger), over all requests.
	Refreshes int64 `json:"deep_refreshes" parquet:"deep_refreshes"`
	// The guided decoder's (zero without it): NFE is the diffusion
	// model's forwards, GuideNFE the guide's; GuidedSteps the guided steps
	// and GuidedTokens the answer tokens they committed (AcceptLen, their
	// ratio: tokens per step); DLMSeconds and GuideSeconds the wall time
	// in each model's forwards.
	GuideNFE     int64   `json:"guide_nfe" parquet:"guide_nfe"`
	GuidedSteps  int64   `json:"guided_steps" parquet:"guided_steps"`
	GuidedTokens int64   `json:"guided_tokens" parquet:"guided_tokens"`
	AcceptLen    float64 `json:"accept_len" parquet:"accept_len"`
	DLMSeconds   float64 `json:"dlm_seconds" parquet:"dlm_seconds"`
	GuideSeconds float64 `json:"guide_seconds" parquet:"guide_seconds"`
}

// Evaluator runs task-suite samples through the model with one caching
// method and checks the answers.
type Evaluator struct {
	Model    *load.Model
	Method   cache.Method
	Gen      sample.GenOptions
	Progress func(done, total int)
	// ModelName, if set, labels the results (a bench comparing models);
	// agreement with none is then with none on the same model.
	ModelName string
	// HistoryPrefix makes a multi-turn sample's shared prefix the whole
	// conversation before its question (what a block store reuses) instead
	// of the system message.
	HistoryPrefix bool
	// StoreAnswers keeps each multi-turn sample's answered conversation in
	// the method's block store (serve --store-answers), as the next turn
	// renders it; its fill is counted in the rows and FLOPs.
	StoreAnswers bool
}

// Evaluate runs every sample, one request at a time (batch 1, as the
// paper measures), and reports per suite, in the order of first appearance.
func (e *Evaluator) Evaluate(ctx context.Context, samples []datasets.Sample) ([]SuiteResult, error) {
	if len(samples) == 0 {
		return nil, fmt.Errorf("eval: no samples")
	}
	t := newTally(e.ModelName, e.Method.Name())
	for i, s := range samples {
		if err := e.run(ctx, s, t); err != nil {
			return nil, err
		}
		if e.Progress != nil {
			e.Progress(i+1, len(samples))
		}
	}
	return t.results(e.Gen.GenLength), nil
}

// EvaluateInterleaved runs every sample through every evaluator, the
// evaluators taking turns request by request (the order rotates from one
// sample to the next), so that a slow spell on a shared machine slows every
// method alike instead of the one that happened to run then. It returns one
// result list per evaluator, as Evaluate would; progress (may be nil) counts
// requests over all evaluators.
func EvaluateInterleaved(ctx context.Context, es []*Evaluator, samples []datasets.Sample, progress func(done, total int)) ([][]SuiteResult, error) {
	if len(samples) == 0 {
		return nil, fmt.Errorf("eval: no samples")
	}
	tallies := make([]*tally, len(es))
	for j, e := range es {
		tallies[j] = newTally(e.ModelName, e.Method.Name())
	}
	done, total := 0, len(samples)*len(es)
	for i, s := range samples {
		for k := range es {
			j := (i + k) % len(es)
			if err := es[j].run(ctx, s, tallies[j]); err != nil {
				return nil, fmt.Errorf("method %s: %w", es[j].Method.Name(), err)
			}
			done++
			if progress != nil {
				progress(done, total)
			}
		}
	}
	out := make([][]SuiteResult, len(es))
	for j, e := range es {
		out[j] = tallies[j].results(e.Gen.GenLength)
	}
	for j := range es {
		// Against the first none on the same model.
		for k, e := range es {
			if e.Method.Name() == "none" && e.ModelName == es[j].ModelName {
				if k != j {
					tallies[j].agreement(tallies[k], out[j])
				}
				break
			}
		}
	}
	return out, nil
}

// tally accumulates one method's per-suite outcomes.
type tally struct {
	model, method        string
	by                   map[string]*SuiteResult
	order                []string
	rows, full, depthSum map[string]int
	flopsFull            map[string]float64
	// answers holds each sample's answer text by suite key and sample ID,
	// for comparing methods.
	answers map[string]map[string]string
}

func newTally(model, method string) *tally {
	return &tally{model: model, method: method, by: map[string]*SuiteResult{}, rows: map[string]int{}, full: map[string]int{},
		depthSum: map[string]int{}, flopsFull: map[string]float64{}, answers: map[string]map[string]string{}}
}

// agreement sets AgreeNone on rs (t's results) against ref, none's tally
// over the same samples.
func (t *tally) agreement(ref *tally, rs []SuiteResult) {
	for i := range rs {
		mine, theirs := t.answers[rs[i].Suite], ref.answers[rs[i].Suite]
		same, n := 0, 0
		for id, a := range mine {
			if b, ok := theirs[id]; ok {
				n++
				if a == b {
					same++
				}
			}
		}
		if n > 0 {
			f := float64(same) / float64(n)
			rs[i].AgreeNone = &f
		}
	}
}

// encode is a sample's prompt and shared-prefix length; a multi-turn
// sample's messages come back too.
func (e *Evaluator) encode(s datasets.Sample) ([]int32, int, []tokenizer.Message, error) {
	tok := e.Model.Tokenizer
	if s.Turn == 0 {
		ids, m, err := tok.EncodeChat(s.System, s.User)
		return ids, m, nil, err
	}
	msgs := []tokenizer.Message{{Role: "system", Content: s.System}}
	for _, h := range s.History {
		msgs = append(msgs, tokenizer.Message{Role: "user", Content: h.User}, tokenizer.Message{Role: "assistant", Content: h.Assistant})
	}
	msgs = append(msgs, tokenizer.Message{Role: "user", Content: s.User})
	pm := 1
	if e.HistoryPrefix {
		pm = len(msgs) - 1
	}
	ids, m, err := tok.EncodeMessages(msgs, pm)
	return ids, m, msgs, err
}

// run generates the answer to one sample and adds it to t.
func (e *Evaluator) run(ctx context.Context, s datasets.Sample, t *tally) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	key := s.Suite
	if s.Turn > 0 {
		key = fmt.Sprintf("%s turn %d", s.Suite, s.Turn)
	}
	r := t.by[key]
	if r == nil {
		r = &SuiteResult{Model: t.model, Method: t.method, Suite: key, Unscored: !s.Scored()}
		t.by[key] = r
		t.answers[key] = map[string]string{}
		t.order = append(t.order, key)
	}
	ids, prefix, msgs, err := e.encode(s)
	if err != nil {
		return fmt.Errorf("sample %s: %w", s.ID, err)
	}
	t0 := time.Now()
	res, err := cache.Run(ctx, e.Model.Network, e.Method, cache.Request{Prompt: ids, PrefixLen: prefix}, e.Gen)
	if err != nil {
		return fmt.Errorf("sample %s: %w", s.ID, err)
	}
	g, info := res.Generation, res.Info
	if e.StoreAnswers && msgs != nil {
		answered, err := e.Model.Tokenizer.EncodeConversation(ctx, append(msgs, tokenizer.Message{Role: "assistant", Content: s.AssistantTurn()}), false)
		if err != nil {
			return fmt.Errorf("sample %s: %w", s.ID, err)
		}
		rows, flops, err := cache.StorePrefix(e.Model.Network, e.Method, answered, "")
		if err != nil {
			return fmt.Errorf("sample %s: storing the answered conversation: %w", s.ID, err)
		}
		info.PrefixRows += rows
		info.PrefixFLOPs += flops
	}
	r.Seconds += time.Since(t0).Seconds()
	r.QueryTokens += int64(info.QueryTokens)
	r.HitTokens += int64(info.HitTokens)
	r.N++
	answer := e.Model.AnswerText(g.Answer)
	t.answers[key][s.ID] = answer
	if s.Scored() && datasets.CheckBenchmarkAnswer(s.Suite, answer, s.Answer) {
		r.Correct++
	}
	r.NFE += g.NFE
	t.rows[key] += g.RowsComputed + info.PrefixRows
	t.full[key] += g.RowsFull
	r.FLOPs += g.FLOPs + info.PrefixFLOPs
	t.flopsFull[key] += g.FLOPsFull
	r.MeanRatio += float64(prefix) / float64(len(ids)+e.Gen.GenLength)
	t.depthSum[key] += info.Depth
	r.Refreshes += int64(info.Refreshes)
	if gs := g.Guide; gs.Steps > 0 {
		r.GuideNFE += int64(gs.NFE)
		r.GuidedSteps += int64(gs.Steps)
		r.GuidedTokens += int64(gs.Committed)
		r.DLMSeconds += gs.DLMTime.Seconds()
		r.GuideSeconds += gs.GuideTime.Seconds()
	}
	if info.Clamped {
		r.Clamped++
	}
	return nil
}

// results turns the sums into per-suite results, in the order the suites
// first appeared.
func (t *tally) results(genLength int) []SuiteResult {
	out := make([]SuiteResult, 0, len(t.order))
	for _, name := range t.order {
		r := t.by[name]
		r.Accuracy = float64(r.Correct) / float64(r.N)
		r.TokensPerSec = float64(r.N*genLength) / r.Seconds
		r.TPF = float64(r.N*genLength) / float64(r.NFE)
		r.RowsFraction = float64(t.rows[name]) / float64(t.full[name])
		r.FLOPsFraction = r.FLOPs / t.flopsFull[name]
		r.MeanRatio /= float64(r.N)
		r.MeanDepth = float64(t.depthSum[name]) / float64(r.N)
		r.AcceptLen = acceptLen(r)
		out = append(out, *r)
	}
	return out
}

// Overall pools suite results into one line (accuracy is the mean of the
// scored suites' accuracies, as the paper averages its benchmarks;
// agreement with none pools the answers).
func Overall(rs []SuiteResult) SuiteResult {
	if len(rs) == 0 {
		return SuiteResult{}
	}
	o := SuiteResult{Model: rs[0].Model, Method: rs[0].Method, Suite: "average"}
	var acc, rowsW, ratio, depth, flopsFull, agree float64
	scored, agreed := 0, 0
	for _, r := range rs {
		if !r.Unscored {
			scored++
			acc += r.Accuracy
		}
		if r.AgreeNone != nil {
			agreed += r.N
			agree += *r.AgreeNone * float64(r.N)
		}
		o.N += r.N
		o.Correct += r.Correct
		o.Seconds += r.Seconds
		o.NFE += r.NFE
		o.Clamped += r.Clamped
		o.QueryTokens += r.QueryTokens
		o.HitTokens += r.HitTokens
		o.Refreshes += r.Refreshes
		o.GuideNFE += r.GuideNFE
		o.GuidedSteps += r.GuidedSteps
		o.GuidedTokens += r.GuidedTokens
		o.DLMSeconds += r.DLMSeconds
		o.GuideSeconds += r.GuideSeconds
		rowsW += r.RowsFraction * float64(r.N)
		o.FLOPs += r.FLOPs
		if r.FLOPsFraction > 0 {
			flopsFull += r.FLOPs / r.FLOPsFraction
		}
		ratio += r.MeanRatio * float64(r.N)
		depth += r.MeanDepth * float64(r.N)
	}
	if scored > 0 {
		o.Accuracy = acc / float64(scored)
	} else {
		o.Unscored = true
	}
	if agreed > 0 {
		f := agree / float64(agreed)
		o.AgreeNone = &f
	}
	genTokens := 0.0
	for _, r := range rs {
		genTokens += r.TokensPerSec * r.Seconds
	}
	o.TokensPerSec = genTokens / o.Seconds
	o.TPF = genTokens / float64(o.NFE)
	o.RowsFraction = rowsW / float64(o.N)
	if flopsFull > 0 {
		o.FLOPsFraction = o.FLOPs / flopsFull
	}
	o.MeanRatio = ratio / float64(o.N)
	o.MeanDepth = depth / float64(o.N)
	o.AcceptLen = acceptLen(&o)
	return o
}

// acceptLen is the tokens a guided step committed on average (0 without
// guided steps).
func acceptLen(r *SuiteResult) float64 {
	if r.GuidedSteps == 0 {
		return 0
	}
	return float64(r.GuidedTokens) / float64(r.GuidedSteps)
}

// SuiteSamples draws limit held-out evaluation samples from each named
// suite ("all" for every suite), interleaved so a partial run covers all.
// A suite written KIND=PATH loads the first limit questions of a public
// benchmark file instead (KIND: gsm8k, arc, math500, gpqa).
func SuiteSamples(suites []string, limit int, seed int64, opt datasets.GenOptions) ([]datasets.Sample, error) {
	var names []string
	per := map[string][]datasets.Sample{}
	for _, s := range suites {
		if kind, path, ok := strings.Cut(s, "="); ok {
			if limit <= 0 {
				return nil, fmt.Errorf("--limit must be positive, got %d", limit)
			}
			b, err := datasets.LoadBenchmark(kind, path, limit)
			if err != nil {
				return nil, err
			}
			names = append(names, s)
			per[s] = b
			continue
		}
		if s == "all" {
			names = append(names, datasets.Suites()...)
			continue
		}
		if err := datasets.Validate(s, opt); err != nil {
			return nil, err
		}
		names = append(names, s)
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("no suites given (have %v)", datasets.Suites())
	}
	if limit <= 0 {
		return nil, fmt.Errorf("--limit must be positive, got %d", limit)
	}
	for _, n := range names {
		if per[n] == nil {
			per[n] = datasets.Generate(n, datasets.Eval, seed, limit, opt)
		}
	}
	var out []datasets.Sample
	for i := 0; i < limit; i++ {
		for _, n := range names {
			if i < len(per[n]) {
				out = append(out, per[n][i])
			}
		}
	}
	return out, nil
}
