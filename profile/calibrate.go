package profile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"time"

	"github.com/dlmcache/dlmcache/cache"
	"github.com/dlmcache/dlmcache/lut"
	"github.com/dlmcache/dlmcache/model"
	"github.com/dlmcache/dlmcache/model/sample"
	"github.com/dlmcache/dlmcache/regime"
)

// Calibration checks depths against answers. For every request it runs the
// model with no caching (greedy: the reference answer) and then BiCache at
// candidate depths; per ratio bin and deep source it keeps the deepest
// depth whose agreement with the reference — per answer token, or per whole
// answer — has a Wilson lower bound at or above the target. The search
// starts at the cosine table's depth and walks up while depths pass, or
// down until one does (depth 0, no reuse, always does). No reference
// answers are needed, so any prompts (WildChat's too) calibrate.
//
// Every result is appended to calibration.jsonl before it is used, so an
// interrupted run resumes with the same results and writes the identical
// table. A shard (Exhaustive) evaluates every depth for its requests; the
// search over the merged shards' results then picks what one run would.

// Calibration output files.
const (
	CalibrationFile = "calibration.jsonl"
	CalibratedTable = "table.json"
)

// Gates.
const (
	GateToken  = "token"
	GateAnswer = "answer"
)

// CalibrationRun is the header of calibration.jsonl: what must match for a
// resume or a merge.
type CalibrationRun struct {
	Model lut.ModelID `json:"model"`
	regime.Regime
	Refresh   int       `json:"refresh"`
	Sources   []string  `json:"sources"`
	Edges     []float64 `json:"edges"`
	Seed      int64     `json:"seed"`
	Data      []string  `json:"data,omitempty"`
	StartFrom string    `json:"start_from,omitempty"`
	Shard     string    `json:"shard,omitempty"`
}

// sameModelRegime says where two headers differ in model (m, mb) or
// regime (r, rb), or is nil: what the headers check first.
func sameModelRegime(m, mb lut.ModelID, r, rb regime.Regime) error {
	switch {
	case m.Fingerprint != mb.Fingerprint:
		return fmt.Errorf("model %s vs %s", m.Fingerprint, mb.Fingerprint)
	case r != rb:
		return fmt.Errorf("regime %s vs %s", r.Short(), rb.Short())
	}
	return nil
}

func (a CalibrationRun) same(b CalibrationRun) error {
	if err := sameModelRegime(a.Model, b.Model, a.Regime, b.Regime); err != nil {
		return err
	}
	switch {
	case a.Refresh != b.Refresh || !slices.Equal(a.Sources, b.Sources):
		return fmt.Errorf("refresh %d sources %v vs refresh %d sources %v", a.Refresh, a.Sources, b.Refresh, b.Sources)
	case !slices.Equal(a.Edges, b.Edges):
		return fmt.Errorf("ratio bins %v vs %v", a.Edges, b.Edges)
	case a.Seed != b.Seed:
		return fmt.Errorf("seed %d vs %d (--seed)", a.Seed, b.Seed)
	case !slices.Equal(a.Data, b.Data):
		return fmt.Errorf("data %q vs %q (--data)", a.Data, b.Data)
	}
	return nil
}

// calibLine is one line of calibration.jsonl after the header: a reference
// answer (Ref set) or one request's outcome at one depth and source.
type calibLine struct {
	Ref    string  `json:"ref,omitempty"`
	Answer []int32 `json:"answer,omitempty"`

	ID          string `json:"id,omitempty"`
	Source      string `json:"source,omitempty"`
	Depth       int    `json:"depth,omitempty"`
	Tokens      int    `json:"tokens,omitempty"`
	Agree       int    `json:"agree,omitempty"`
	AnswerEqual bool   `json:"answer_equal,omitempty"`
}

type outcome struct {
	tokens, agree int
	equal         bool
}

type trialKey struct {
	id, source string
	depth      int
}

// Calibrator runs a calibration.
type Calibrator struct {
	Model  *model.Network
	Gen    sample.GenOptions
	Run    CalibrationRun
	Start  *lut.Table // the cosine table whose bin depths start the search (nil: depth 1); its bins are reused
	Stat   lut.Statistic
	Gate   string                   // GateToken or GateAnswer
	Target float64                  // the lower bound a depth must reach
	Z      float64                  // one-sided normal quantile of the bound
	Stop   func(answer []int32) int // index of the answer's first end token (len when none)
	// Exhaustive evaluates every depth (a shard: the merge searches).
	Exhaustive bool
	OutDir     string
	Resume     bool
	Progress   func(done, total int)
	Warn       func(string) // told when a bin's samples cannot reach the target

	refs    map[string][]int32
	results map[trialKey]outcome
	store   *cache.Store
	log     *os.File
}

// Calibrate runs (or resumes) the calibration of reqs and, unless
// Exhaustive, writes the calibrated table.
func (c *Calibrator) Calibrate(ctx context.Context, reqs []Request) (*lut.Table, error) {
	start := time.Now()
	if len(reqs) == 0 {
		return nil, errors.New("calibrate: no requests")
	}
	path, err := logPath(c.OutDir, CalibrationFile, c.Resume)
	if err != nil {
		return nil, err
	}
	c.refs, c.results = map[string][]int32{}, map[trialKey]outcome{}
	if c.Resume {
		if err := c.load(path); err != nil {
			return nil, err
		}
	}
	f, err := openLog(path, c.Run)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	c.log = f
	c.store = cache.NewStore(c.Model.Backend, 1<<40, cache.LRU)
	bins := binRequests(reqs, c.Run.Edges, c.Gen.GenLength)
	units, done := 0, 0
	for _, b := range bins {
		if len(b) > 0 {
			units += len(c.Run.Sources)
		}
	}
	if c.Progress != nil {
		c.Progress(0, units)
	}
	L := len(c.Model.Blocks)
	eval := func(q Request, src string, d int) (outcome, error) { return c.evaluate(ctx, q, src, d) }
	var cal []map[string]*lut.BinCalibration
	for bi, b := range bins {
		row := map[string]*lut.BinCalibration{}
		for _, src := range c.Run.Sources {
			if len(b) == 0 {
				continue
			}
			if c.Exhaustive {
				for d := 1; d <= L; d++ {
					for _, q := range b {
						if _, err := eval(q, src, d); err != nil {
							return nil, err
						}
					}
				}
			} else {
				rt, err := c.refTokens(ctx, b)
				if err != nil {
					return nil, err
				}
				if best := c.bestBound(rt); best < c.Target && c.Warn != nil {
					c.Warn(fmt.Sprintf("bin [%.2f, %.2f): %d requests (%d answer tokens) cannot show agreement ≥ %g even if every one agrees (best bound %.3f): depth 0 there; give a larger --per-ratio",
						c.Run.Edges[bi], c.Run.Edges[bi+1], len(b), sum(rt), c.Target, best))
				}
				bc, err := search(b, rt, src, c.startDepth(bi, L), L, c.Gate, c.Target, c.Z, eval)
				if err != nil {
					return nil, err
				}
				row[src] = bc
			}
			done++
			if c.Progress != nil {
				c.Progress(done, units)
			}
		}
		cal = append(cal, row)
	}
	if c.Exhaustive {
		return nil, nil
	}
	t := c.table(cal, len(reqs), time.Since(start))
	return t, t.Write(filepath.Join(c.OutDir, CalibratedTable))
}

// startDepth is the cosine table's depth at calibration bin bi's middle
// (1 without a start table).
func (c *Calibrator) startDepth(bi, L int) int {
	if c.Start == nil {
		return 1
	}
	d, _ := c.Start.Lookup((c.Run.Edges[bi]+c.Run.Edges[bi+1])/2, c.Stat)
	return min(d, L)
}

// table is the start table (or empty bins over the calibration edges)
// with the calibrated depths and the calibration record. A start bin takes
// the calibration of the calibration bin holding its middle; a bin no
// calibration covers gets depth 0 (no reuse: nothing showed reuse is safe
// there) with no samples.
func (c *Calibrator) table(cal []map[string]*lut.BinCalibration, requests int, took time.Duration) *lut.Table {
	var t lut.Table
	if c.Start != nil {
		t = *c.Start
		t.Bins = slices.Clone(c.Start.Bins)
	} else {
		t = lut.Table{Model: c.Run.Model, Tau: 1, Created: time.Now().UTC().Truncate(time.Second)}
		for i := 1; i < len(c.Run.Edges); i++ {
			t.Bins = append(t.Bins, lut.Bin{Lo: c.Run.Edges[i-1], Hi: c.Run.Edges[i]})
		}
	}
	t.GenLength, t.Steps, t.BlockLength = c.Run.GenLength, c.Run.Steps, c.Run.BlockLength
	edges := c.Run.Edges
	for i, b := range t.Bins {
		mid := (b.Lo + b.Hi) / 2
		j := sort.SearchFloat64s(edges, mid) - 1 // edges[j] < mid ≤ edges[j+1]
		if j >= 0 && j < len(cal) && len(cal[j]) > 0 {
			t.Bins[i].Calibrated = cal[j]
			continue
		}
		t.Bins[i].Calibrated = map[string]*lut.BinCalibration{}
		for _, src := range c.Run.Sources {
			t.Bins[i].Calibrated[src] = &lut.BinCalibration{Depth: 0, TokenAgreement: 1, AnswerAgreement: 1, LowerBound: 1}
		}
	}
	t.Calibration = &lut.Calibration{Method: "bicache", Refresh: c.Run.Refresh, Sources: c.Run.Sources, Gate: c.Gate,
		Target: c.Target, Confidence: normalCDF(c.Z), Requests: requests, Seconds: math.Round(took.Seconds()*10) / 10,
		Data: c.Run.Data, StartFrom: c.Run.StartFrom, Seed: c.Run.Seed}
	return &t
}

// search finds bin's depth for deep source src and returns its
// calibration: depth d0 first; if it passes, the deepest passing depth
// above it, else the deepest passing one below it (0 when none), each by
// bisection (safe depth falls with depth: a depth passes when every
// shallower one would). A trial stops at the first request after which
// the bound can no longer reach the target even if every remaining token
// (refTokens: the reference answers' compared tokens) agreed. eval gives
// one request's outcome at a depth.
func search(bin []Request, refTokens []int, src string, d0, L int, gate string, target, z float64,
	eval func(Request, string, int) (outcome, error)) (*lut.BinCalibration, error) {
	bc := &lut.BinCalibration{Samples: len(bin)}
	bound := func(answers, requests, agree, tokens int) float64 {
		if gate == GateAnswer {
			return lut.Wilson(answers, requests, z)
		}
		return lut.Wilson(agree, tokens, z)
	}
	restTokens := make([]int, len(bin)+1) // tokens of requests i.. of the bin
	for i := len(bin) - 1; i >= 0; i-- {
		restTokens[i] = restTokens[i+1] + refTokens[i]
	}
	trial := func(d int) (bool, error) {
		tr := lut.Trial{Depth: d}
		for i, q := range bin {
			o, err := eval(q, src, d)
			if err != nil {
				return false, err
			}
			tr.Requests++
			tr.Tokens += o.tokens
			tr.TokensAgree += o.agree
			if o.equal {
				tr.Answers++
			}
			rest := len(bin) - i - 1
			if rest > 0 && bound(tr.Answers+rest, tr.Requests+rest, tr.TokensAgree+restTokens[i+1], tr.Tokens+restTokens[i+1]) < target {
				break // cannot pass any more
			}
		}
		tr.LowerBound = bound(tr.Answers, tr.Requests, tr.TokensAgree, tr.Tokens)
		tr.Passed = tr.Requests == len(bin) && tr.LowerBound >= target
		bc.Tried = append(bc.Tried, tr)
		return tr.Passed, nil
	}
	// deepest passing depth in [lo, hi], given that lo-1 passes (or is 0).
	bisect := func(lo, hi int) (int, error) {
		best := lo - 1
		for lo <= hi {
			mid := (lo + hi + 1) / 2
			ok, err := trial(mid)
			if err != nil {
				return 0, err
			}
			if ok {
				best, lo = mid, mid+1
			} else {
				hi = mid - 1
			}
		}
		return best, nil
	}
	ok, err := trial(d0)
	if err != nil {
		return nil, err
	}
	if ok {
		bc.Depth, err = bisect(d0+1, L)
	} else {
		bc.Depth, err = bisect(1, d0-1)
	}
	if err != nil {
		return nil, err
	}
	if bc.Depth == 0 { // no reuse keeps every answer by definition
		bc.TokenAgreement, bc.AnswerAgreement, bc.LowerBound = 1, 1, 1
		return bc, nil
	}
	for _, tr := range bc.Tried {
		if tr.Depth == bc.Depth {
			bc.LowerBound = tr.LowerBound
			bc.TokenAgreement = float64(tr.TokensAgree) / float64(max(1, tr.Tokens))
			bc.AnswerAgreement = float64(tr.Answers) / float64(max(1, tr.Requests))
		}
	}
	return bc, nil
}

// bestBound is the bound a bin reaches when everything agrees.
func (c *Calibrator) bestBound(refTokens []int) float64 {
	if c.Gate == GateAnswer {
		return lut.Wilson(len(refTokens), len(refTokens), c.Z)
	}
	return lut.Wilson(sum(refTokens), sum(refTokens), c.Z)
}

func sum(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}

// refTokens is the compared token count of each request's reference
// answer (computing the references first).
func (c *Calibrator) refTokens(ctx context.Context, bin []Request) ([]int, error) {
	out := make([]int, len(bin))
	for i, q := range bin {
		ref, err := c.reference(ctx, q)
		if err != nil {
			return nil, err
		}
		out[i], _, _ = CompareAnswers(ref, ref, c.Stop)
	}
	return out, nil
}

// evaluate is one request's outcome at depth d with deep source src
// (cached: a resumed or earlier result is reused).
func (c *Calibrator) evaluate(ctx context.Context, q Request, src string, d int) (outcome, error) {
	key := trialKey{q.ID, src, d}
	if o, ok := c.results[key]; ok {
		return o, nil
	}
	ref, err := c.reference(ctx, q)
	if err != nil {
		return outcome{}, err
	}
	tab, err := lut.Build(c.Run.Model, 1, []float64{0, 1}, []lut.Sample{{Ratio: 0.5, Depth: d}})
	if err != nil {
		return outcome{}, err
	}
	meth, err := cache.New("bicache", cache.Options{Store: c.store, Table: tab, Stat: lut.Mean, BiCache: cache.BiCacheOptions{Refresh: c.Run.Refresh},
		DeepSource: cache.DeepSource(src), Fingerprint: c.Run.Model.Fingerprint})
	if err != nil {
		return outcome{}, err
	}
	g, err := cache.Run(ctx, c.Model, meth, cache.Request{Prompt: q.Prompt, PrefixLen: q.PrefixLen}, c.Gen)
	if err != nil {
		return outcome{}, fmt.Errorf("request %s, depth %d, %s source: %w", q.ID, d, src, err)
	}
	o := compareAnswers(ref, g.Answer, c.Stop)
	if err := appendLine(c.log, calibLine{ID: q.ID, Source: src, Depth: d, Tokens: o.tokens, Agree: o.agree, AnswerEqual: o.equal}); err != nil {
		return outcome{}, err
	}
	c.results[key] = o
	return o, nil
}

// reference is the request's uncached greedy answer.
func (c *Calibrator) reference(ctx context.Context, q Request) ([]int32, error) {
	if a, ok := c.refs[q.ID]; ok {
		return a, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	g, err := sample.Generate(ctx, c.Model, q.Prompt, q.PrefixLen, c.Gen, nil)
	if err != nil {
		return nil, fmt.Errorf("request %s: %w", q.ID, err)
	}
	a := slices.Clone(g.Answer)
	if err := appendLine(c.log, calibLine{Ref: q.ID, Answer: a}); err != nil {
		return nil, err
	}
	c.refs[q.ID] = a
	return a, nil
}

// CompareAnswers compares got with the reference answer through the
// reference's first end token (included; stop gives its index): the tokens
// a reader of the answer sees. equal means the whole answer is unchanged.
func CompareAnswers(ref, got []int32, stop func([]int32) int) (tokens, agree int, equal bool) {
	tokens = min(stop(ref)+1, len(ref))
	for i := 0; i < tokens && i < len(got); i++ {
		if got[i] == ref[i] {
			agree++
		}
	}
	return tokens, agree, agree == tokens
}

func compareAnswers(ref, got []int32, stop func([]int32) int) outcome {
	n, k, eq := CompareAnswers(ref, got, stop)
	return outcome{tokens: n, agree: k, equal: eq}
}

// binRequests groups requests by ratio bin (requests outside the edges
// are dropped).
func binRequests(reqs []Request, edges []float64, genLength int) [][]Request {
	bins := make([][]Request, len(edges)-1)
	for _, q := range reqs {
		r := q.Ratio(genLength)
		i := sort.SearchFloat64s(edges, r)
		if i < len(edges) && edges[i] == r {
			i++
		}
		i--
		if i >= 0 && i < len(bins) {
			bins[i] = append(bins[i], q)
		}
	}
	return bins
}

// load reads an earlier run's results (resume). A torn last line is cut.
func (c *Calibrator) load(path string) error {
	refs, results, run, err := readCalibration(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := run.same(c.Run); err != nil {
		return fmt.Errorf("--resume: %s was started with other settings: %w", path, err)
	}
	c.refs, c.results = refs, results
	return nil
}

// readCalibration reads a calibration.jsonl. A torn last line (the process
// died mid-write) is cut off the file.
func readCalibration(path string) (map[string][]int32, map[trialKey]outcome, CalibrationRun, error) {
	var run CalibrationRun
	refs, results := map[string][]int32{}, map[trialKey]outcome{}
	err := readLog(path, "calibration", &run, func(ln []byte) error {
		var l calibLine
		if err := json.Unmarshal(ln, &l); err != nil {
			return err
		}
		if l.Ref != "" {
			refs[l.Ref] = l.Answer
		} else {
			results[trialKey{l.ID, l.Source, l.Depth}] = outcome{tokens: l.Tokens, agree: l.Agree, equal: l.AnswerEqual}
		}
		return nil
	})
	if err != nil {
		return nil, nil, run, err
	}
	return refs, results, run, nil
}

// Merge searches the merged results of shard directories (each
// an exhaustive calibration of disjoint requests) and returns the table one
// run over all their requests would have written. reqs are all requests
// (every shard's), start and the gate as for a Calibrator.
func (c *Calibrator) Merge(dirs []string, reqs []Request) (*lut.Table, error) {
	start := time.Now()
	c.refs, c.results = map[string][]int32{}, map[trialKey]outcome{}
	for _, d := range dirs {
		refs, results, run, err := readCalibration(filepath.Join(d, CalibrationFile))
		if err != nil {
			return nil, err
		}
		run.Shard = c.Run.Shard
		if err := run.same(c.Run); err != nil {
			return nil, fmt.Errorf("%s is from another calibration: %w", d, err)
		}
		maps.Copy(c.refs, refs) // a request in two shards has identical results by construction
		maps.Copy(c.results, results)
	}
	L := len(c.Model.Blocks)
	eval := func(q Request, src string, d int) (outcome, error) {
		o, ok := c.results[trialKey{q.ID, src, d}]
		if !ok {
			return outcome{}, fmt.Errorf("request %s has no result at depth %d (%s source): a shard is missing or unfinished", q.ID, d, src)
		}
		return o, nil
	}
	var cal []map[string]*lut.BinCalibration
	for bi, b := range binRequests(reqs, c.Run.Edges, c.Gen.GenLength) {
		row := map[string]*lut.BinCalibration{}
		for _, src := range c.Run.Sources {
			if len(b) == 0 {
				continue
			}
			rt := make([]int, len(b))
			for i, q := range b {
				ref, ok := c.refs[q.ID]
				if !ok {
					return nil, fmt.Errorf("request %s has no reference answer: a shard is missing or unfinished", q.ID)
				}
				rt[i], _, _ = CompareAnswers(ref, ref, c.Stop)
			}
			bc, err := search(b, rt, src, c.startDepth(bi, L), L, c.Gate, c.Target, c.Z, eval)
			if err != nil {
				return nil, err
			}
			row[src] = bc
		}
		cal = append(cal, row)
	}
	t := c.table(cal, len(reqs), time.Since(start))
	return t, nil
}

// normalCDF is Φ(z): the one-sided confidence of a bound at quantile z.
func normalCDF(z float64) float64 { return math.Round(0.5*math.Erfc(-z/math.Sqrt2)*1000) / 1000 }
