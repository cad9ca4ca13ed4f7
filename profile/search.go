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
	"strings"
	"time"

	"github.com/dlmcache/dlmcache/cache"
	"github.com/dlmcache/dlmcache/lut"
	"github.com/dlmcache/dlmcache/model"
	"github.com/dlmcache/dlmcache/model/sample"
	"github.com/dlmcache/dlmcache/regime"
)

// The method search fills a v3 table. Per answer-length class and ratio
// bin it answers each calibration request with no caching on the
// schedule (the model's own answer: the reference, and none's time), then
// with every setting of the grid still in the race, the settings taking
// turns request by request (the order rotating) so that a slow spell on a
// shared machine slows them alike. A setting passes when the
// changed-answer test accepts it (ChangeTest: a Clopper–Pearson upper
// bound on its rate of whole answers changed from the references, below
// the risk at the cap, the bin's requests) and, on the requests that
// carry a reference answer, it loses at most MaxLoss points of accuracy
// against none (searchCell: how the choice is made among the passing
// settings). The search is budgeted: a setting stops as soon as it can no
// longer pass ("changes"; "bound" when it missed requests), or, past
// DominanceAfter requests or a quarter of them (and three), when a setting on course to pass
// is DominanceMargin times faster beyond the noise ("dominated":
// successive halving), or when the time budget is spent ("budget"); a bin
// whose settings have all stopped runs no more references.
//
// Every outcome is appended to search.jsonl before it is used: --resume
// replays them (timings included) and the search picks what it picked. A
// shard runs every setting on its requests with no stopping; a merge
// replays the shards' outcomes through the same search.

// SearchFile is the method search's log.
const SearchFile = "search.jsonl"

// DominanceMargin: a setting is dropped as dominated when one accepted or
// on course to be (no answer changed so far) is faster by at least this
// factor at the lower end of the paired speed-up's confidence interval.
const DominanceMargin = 1.25

// DominanceAfter: a setting may be left behind as dominated after this
// many requests of a bin, or a quarter of them if fewer (the pairs the
// interval needs: twenty pairs; at ten, σ 0.3 timing noise left the
// simpler of two equal settings behind now and then,
// TestSearchChoiceStableOnRecordedOutcomes; the settings on
// the schedule are 5–15× slower than the decoder's on the bundled model,
// each as slow as a reference, and running each of them on a quarter of a
// 150-request bin would cost a quarter of the references again).
const DominanceAfter = 20

// SearchRun is the header of search.jsonl: what must match for a resume
// or a merge.
type SearchRun struct {
	Model lut.ModelID `json:"model"`
	regime.Regime
	Classes  []lut.Class `json:"classes"`
	Edges    []float64   `json:"edges"`
	Settings []string    `json:"settings"`
	Seed     int64       `json:"seed"`
	Data     []string    `json:"data,omitempty"`
	Shard    string      `json:"shard,omitempty"`
	// Guide is the guided decoder's guide (calibrate --guide; nil
	// without): the table records it.
	Guide *lut.ModelID `json:"guide,omitempty"`
}

func (a SearchRun) same(b SearchRun) error {
	if err := sameModelRegime(a.Model, b.Model, a.Regime, b.Regime); err != nil {
		return err
	}
	switch {
	case !slices.Equal(a.Settings, b.Settings):
		return fmt.Errorf("settings differ")
	case !slices.Equal(a.Edges, b.Edges) || a.Seed != b.Seed || !slices.Equal(a.Classes, b.Classes):
		return fmt.Errorf("bins, classes or seed differ")
	case guideFingerprint(a.Guide) != guideFingerprint(b.Guide):
		return fmt.Errorf("guide %q vs %q", guideFingerprint(a.Guide), guideFingerprint(b.Guide))
	}
	return nil
}

// guideFingerprint is a run's guide's fingerprint ("" without a guide).
func guideFingerprint(g *lut.ModelID) string {
	if g == nil {
		return ""
	}
	return g.Fingerprint
}

// ClassRequest is a calibration request of one answer-length class.
type ClassRequest struct {
	Request
	Class string
}

// searchLine is one line of search.jsonl after the header: one request's
// run under one setting ("" : the reference, none on the schedule).
type searchLine struct {
	ID      string  `json:"id"`
	Class   string  `json:"class"`
	Setting string  `json:"setting,omitempty"`
	Answer  []int32 `json:"answer,omitempty"` // the reference's
	Equal   bool    `json:"equal,omitempty"`
	Correct *bool   `json:"correct,omitempty"` // against the reference answer, when the request has one
	Seconds float64 `json:"seconds"`
	FLOPs   float64 `json:"flops"`
}

type searchKey struct{ id, class, setting string }

// Searcher runs the method search.
type Searcher struct {
	Model *model.Network
	Gen   sample.GenOptions // the regime (the longest class)
	Run   SearchRun
	Grid  []lut.Setting
	Base  cache.Options // fingerprint, refresh: what every setting's method is built on
	// NewStore gives each setting its own prefix store, shared across the
	// requests it serves (as behind serve); nil: Base's.
	NewStore func() cache.PrefixStore
	// Test is the changed-answer test a setting must pass (zero:
	// DefaultChangeTest).
	Test ChangeTest
	// MinGain is the speed-up over the simpler setting, at the lower end
	// of its confidence interval, beyond 1, that a setting adding
	// approximation must show to replace it (0.1: 10% faster).
	MinGain float64
	// Cap is the calibration requests asked per bin and class (calibrate
	// --per-ratio), recorded in the table: the test's cap is each bin's
	// requests.
	Cap      int
	Z        float64 // one-sided normal quantile of the bounds reported and of the speed intervals
	MaxLoss  float64 // accuracy points a setting may lose against none (on requests with answers)
	Stop     func(answer []int32) int
	Check    func(suite, answer, want string) bool // scores an answer against a reference answer
	Text     func(answer []int32) string
	Budget   time.Duration // 0: none
	Shard    bool          // run every setting on every request (no stopping)
	OutDir   string
	Resume   bool
	Progress func(done, total int)
	Log      func(string)

	lines   map[searchKey]searchLine
	methods map[string]cache.Method
	log     *os.File
	start   time.Time
}

// ClassGen is the generation options of class c: the regime cut to
// c.MaxGen slots (whole blocks, the steps per block kept).
func ClassGen(g sample.GenOptions, c lut.Class) sample.GenOptions {
	if c.MaxGen <= 0 || c.MaxGen >= g.GenLength {
		return g
	}
	bl := g.BlockLength
	if bl == 0 {
		bl = g.GenLength
	}
	spb := g.Steps / max(1, g.Blocks())
	o := g
	o.GenLength = c.MaxGen
	o.BlockLength = min(bl, c.MaxGen)
	o.Steps = spb * o.Blocks()
	return o
}

// DefaultClasses are the answer-length classes of regime g: one block or
// fewer, and longer (one class when the regime has one block).
func DefaultClasses(g sample.GenOptions) []lut.Class {
	if g.BlockLength > 0 && g.BlockLength < g.GenLength {
		return []lut.Class{{Name: "short", MaxGen: g.BlockLength}, {Name: "long", MaxGen: 0}}
	}
	return []lut.Class{{Name: "all", MaxGen: 0}}
}

// Search runs (or resumes) the search over reqs and returns the v3 table
// (nil for a shard). start, if not nil, lends its bins' cosine statistics.
func (s *Searcher) Search(ctx context.Context, reqs []ClassRequest) (*lut.Table, error) {
	s.start = time.Now()
	if err := s.defaults(); err != nil {
		return nil, err
	}
	if len(reqs) == 0 {
		return nil, errors.New("calibrate: no requests")
	}
	path, err := logPath(s.OutDir, SearchFile, s.Resume)
	if err != nil {
		return nil, err
	}
	s.lines = map[searchKey]searchLine{}
	if s.Resume {
		lines, run, err := readSearch(path)
		switch {
		case errors.Is(err, os.ErrNotExist):
		case err != nil:
			return nil, err
		default:
			if err := run.same(s.Run); err != nil {
				return nil, fmt.Errorf("--resume: %s was started with other settings: %w", path, err)
			}
			s.lines = lines
		}
	}
	f, err := openLog(path, s.Run)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	s.log = f
	return s.search(ctx, reqs, s.runOne)
}

// Merge replays shard directories' outcomes through the search.
func (s *Searcher) Merge(dirs []string, reqs []ClassRequest) (*lut.Table, error) {
	s.start = time.Now()
	if err := s.defaults(); err != nil {
		return nil, err
	}
	s.lines = map[searchKey]searchLine{}
	for _, d := range dirs {
		lines, run, err := readSearch(filepath.Join(d, SearchFile))
		if err != nil {
			return nil, err
		}
		run.Shard = s.Run.Shard
		if err := run.same(s.Run); err != nil {
			return nil, fmt.Errorf("%s is from another calibration: %w", d, err)
		}
		maps.Copy(s.lines, lines)
	}
	s.Shard = false
	return s.search(context.Background(), reqs, func(_ context.Context, q ClassRequest, setting string) (searchLine, error) {
		l, ok := s.lines[searchKey{q.ID, q.Class, setting}]
		if !ok {
			return l, fmt.Errorf("request %s (%s) has no outcome for %q: a shard is missing or unfinished", q.ID, q.Class, setting)
		}
		return l, nil
	})
}

// defaults fills the test's zero fields and checks them.
func (s *Searcher) defaults() error {
	if s.Test == (ChangeTest{}) {
		s.Test = DefaultChangeTest
	}
	if s.MinGain < 0 {
		return fmt.Errorf("calibrate: minimum gain %g: want ≥ 0", s.MinGain)
	}
	return s.Test.Check()
}

// race is one setting's outcomes on one bin so far.
type race struct {
	setting          lut.Setting
	key              string
	n, equal         int
	secNone, secMeth float64
	flNone, flMeth   float64
	checked          int
	lost, gained     int
	stopped          string
	// secs are its seconds by request index (the bin's order): the pairs
	// its speed is compared on.
	secs map[int]float64
	// decision is the changed-answer test's verdict, reached after
	// decidedAt requests.
	decision  Decision
	decidedAt int
}

// times is t's seconds on the bin's first k requests, 0 where it did not
// run.
func (t *race) times(k int) []float64 {
	out := make([]float64, k)
	for i := range out {
		out[i] = t.secs[i]
	}
	return out
}

// approximation ranks a setting by what it approximates: one for a decoder
// other than the schedule, one for a caching method, one more for K/V
// from the store (computed for other requests). A setting of higher rank
// replaces a simpler one only when it is faster beyond the noise.
func approximation(g lut.Setting) int {
	r := 0
	if g.Decoder != "" && g.Decoder != string(sample.DecodeSchedule) {
		r++
	}
	if g.Method != "none" {
		r++
	}
	if g.Source == "store" {
		r++
	}
	return r
}

func (t *race) speedUp() float64 {
	if t.secMeth <= 0 {
		return 1
	}
	return t.secNone / t.secMeth
}

// flopsUp is the predicted speed-up: none's FLOPs over the setting's on
// the requests it ran.
func (t *race) flopsUp() float64 {
	if t.flMeth <= 0 {
		return 1
	}
	return t.flNone / t.flMeth
}

func (t *race) loss() float64 {
	if t.checked == 0 {
		return 0
	}
	return 100 * float64(t.lost-t.gained) / float64(t.checked)
}

func (t *race) point(z float64, test ChangeTest) lut.Point {
	p := lut.Point{Setting: t.setting, Requests: t.n, Answers: t.equal, LowerBound: lut.Wilson(t.equal, t.n, z),
		SpeedUp: round3(t.speedUp()), Stopped: t.stopped, DecidedAt: t.decidedAt}
	if t.n > 0 {
		p.ChangeBound = round4(test.Upper(t.n-t.equal, t.n))
	}
	if t.n > 0 {
		p.Decision = t.decision.String()
	}
	if t.flMeth > 0 {
		p.FLOPsSpeedUp = round3(t.flNone / t.flMeth)
	}
	p.LowerBound = round3(p.LowerBound)
	return p
}

func round3(x float64) float64 { return math.Round(x*1000) / 1000 }

func round4(x float64) float64 { return math.Round(x*1e4) / 1e4 }

// search is the decision procedure over one outcome source: live runs, a
// resumed log or merged shards.
func (s *Searcher) search(ctx context.Context, reqs []ClassRequest,
	run func(context.Context, ClassRequest, string) (searchLine, error)) (*lut.Table, error) {
	type cell struct {
		class string
		bin   int
		reqs  []ClassRequest
	}
	var cells []cell
	total := 0
	for _, cl := range s.Run.Classes {
		g := ClassGen(s.Gen, cl)
		bins := make([][]ClassRequest, len(s.Run.Edges)-1)
		for _, q := range reqs {
			if q.Class != cl.Name {
				continue
			}
			if i := binOf(s.Run.Edges, q.Ratio(g.GenLength)); i >= 0 {
				bins[i] = append(bins[i], q)
			}
		}
		for i, b := range bins {
			if len(b) > 0 {
				cells = append(cells, cell{cl.Name, i, b})
				total += len(b)
			}
		}
	}
	choices := map[int][]*lut.Choice{}
	done := 0
	for _, c := range cells {
		ch, err := s.searchCell(ctx, c.reqs, run, func() {
			done++
			if s.Progress != nil {
				s.Progress(done, total)
			}
		})
		if err != nil {
			return nil, err
		}
		ch.Class = c.class
		choices[c.bin] = append(choices[c.bin], ch)
		if s.Log != nil {
			bound := 0.0
			if ch.ChangeBound != nil {
				bound = *ch.ChangeBound
			}
			s.Log(fmt.Sprintf("[%.2f, %.2f) %s: %s (%d/%d answers unchanged, changed ≤ %.2f%% at %.0f%%; %.2f× none, interval [%.2f×, %.2f×])", s.Run.Edges[c.bin], s.Run.Edges[c.bin+1],
				c.class, ch.Setting, int(math.Round(ch.Agreement*float64(ch.Samples))), ch.Samples, 100*bound, 100*(1-s.Test.Alpha), ch.SpeedUp, ch.SpeedUpLow, ch.SpeedUpHigh))
		}
	}
	if s.Shard {
		return nil, nil
	}
	t := &lut.Table{Model: s.Run.Model, Tau: 1, Regime: s.Run.Regime,
		Classes: s.Run.Classes, Guide: s.Run.Guide, Created: time.Now().UTC().Truncate(time.Second)}
	for i := 1; i < len(s.Run.Edges); i++ {
		t.Bins = append(t.Bins, lut.Bin{Lo: s.Run.Edges[i-1], Hi: s.Run.Edges[i], Choices: choices[i-1]})
	}
	var settings []string
	for _, g := range s.Grid {
		settings = append(settings, g.String())
	}
	t.Calibration = &lut.Calibration{Method: "search", Gate: GateAnswer, Confidence: 1 - s.Test.Alpha, MaxLoss: s.MaxLoss,
		ChangeRisk: s.Test.Risk, ChangeTest: lut.ChangeTestClopperPearson, Cap: s.Cap, MinGain: s.MinGain,
		Requests: len(reqs), Seconds: math.Round(time.Since(s.start).Seconds()*10) / 10, Data: s.Run.Data, Seed: s.Run.Seed, Settings: settings}
	return t, nil
}

// binOf is the bin of ratio r over edges (-1: outside).
func binOf(edges []float64, r float64) int {
	for i := 1; i < len(edges); i++ {
		if r >= edges[i-1] && (r < edges[i] || (i == len(edges)-1 && r == edges[i])) {
			return i - 1
		}
	}
	return -1
}

// searchCell races the grid over one bin's requests of one class. Each
// setting runs request by request (the order rotating) until the
// changed-answer test (s.Test, its cap the bin's requests) rejects it
// ("changes": it can no longer pass), it can no longer be accepted on the
// requests left ("bound": it missed some), a setting on course to pass
// leaves it behind beyond the noise ("dominated"), or the budget is spent
// ("budget"); once every setting has stopped, the bin runs no more
// references. A setting passes when the test accepted it at the cap and
// it lost at most MaxLoss points of accuracy. The choice starts from none
// on the schedule and walks the passing settings from the least
// approximation to the most (approximation; ties by predicted FLOPs
// speed-up): each replaces the choice so far only if its speed-up over
// it, paired by request, is at least 1 + MinGain at the lower end of its
// confidence interval (normal quantile s.Z) and its predicted FLOPs
// speed-up is at least the replaced one's (timings never overrule the
// prediction on their own). Differences inside the timing noise keep the
// simpler setting, so the choice does not flip from run to run on noise.
func (s *Searcher) searchCell(ctx context.Context, bin []ClassRequest,
	run func(context.Context, ClassRequest, string) (searchLine, error), tick func()) (*lut.Choice, error) {
	ts := make([]*race, len(s.Grid))
	for i, g := range s.Grid {
		ts[i] = &race{setting: g, key: g.String(), secs: map[int]float64{}}
	}
	n := len(bin)
	limit := n // the test's cap: a setting is accepted on the bin's every request
	refTimes := make([]float64, n)
	for i, q := range bin {
		ref, err := run(ctx, q, "")
		if err != nil {
			return nil, err
		}
		refTimes[i] = ref.Seconds
		for k := range ts {
			t := ts[(k+i)%len(ts)] // the order rotates request by request
			if t.stopped != "" {
				continue
			}
			if !s.Shard && s.Budget > 0 && time.Since(s.start) > s.Budget {
				if _, logged := s.lines[searchKey{q.ID, q.Class, t.key}]; !logged {
					t.stopped = "budget"
					continue
				}
			}
			o, err := run(ctx, q, t.key)
			if err != nil {
				return nil, err
			}
			t.record(i, ref, o, s.Test, limit)
		}
		tick()
		if s.Shard {
			continue
		}
		rest := n - i - 1
		var lead *race // the fastest setting accepted or on course to be (no answer changed yet)
		for _, t := range ts {
			if t.stopped != "" {
				continue
			}
			onCourse := t.decision == Accepted || t.equal == t.n
			switch {
			case t.decision == Rejected && t.equal == t.n:
				t.stopped = "bound" // a bin too small for the test: nothing can pass it
			case t.decision == Rejected:
				t.stopped = "changes"
			case t.decision == Undecided && s.Test.Decide(t.n+rest, t.n-t.equal, limit) != Accepted:
				t.stopped = "bound" // not accepted even if every request left agrees
			case onCourse && t.loss() <= s.MaxLoss && (lead == nil || t.speedUp() > lead.speedUp()):
				lead = t
			}
		}
		if lead != nil && i+1 >= min(DominanceAfter, (n+3)/4) && i >= 2 {
			for _, t := range ts {
				if t.stopped != "" || t == lead {
					continue
				}
				// Paired by request, beyond the noise: a setting is left
				// behind only where the choice could never come back to it.
				// (Nor where the FLOPs prediction would keep it over the lead.)
				if lo, _, _, ok := pairedGain(t.times(i+1), lead.times(i+1), s.Z); ok && lo >= DominanceMargin && lead.flopsUp() >= t.flopsUp() {
					t.stopped = "dominated"
				}
			}
		}
		if !slices.ContainsFunc(ts, func(t *race) bool { return t.stopped == "" }) {
			for range bin[i+1:] { // every setting has stopped: none on the schedule stays
				tick()
			}
			n = i + 1
			break
		}
	}
	return s.choose(ts, refTimes[:n], n), nil
}

// record counts the setting's run o of request i against the reference
// ref, and the test's decision once it has one (limit: the test's cap).
func (t *race) record(i int, ref, o searchLine, test ChangeTest, limit int) {
	t.n++
	if o.Equal {
		t.equal++
	}
	t.secs[i] = o.Seconds
	t.secNone += ref.Seconds
	t.secMeth += o.Seconds
	t.flNone += ref.FLOPs
	t.flMeth += o.FLOPs
	if ref.Correct != nil && o.Correct != nil {
		t.checked++
		switch {
		case *ref.Correct && !*o.Correct:
			t.lost++
		case !*ref.Correct && *o.Correct:
			t.gained++
		}
	}
	if t.decision == Undecided {
		if d := test.Decide(t.n, t.n-t.equal, limit); d != Undecided {
			t.decision, t.decidedAt = d, t.n
		}
	}
}

// choose is the cell's choice over n requests (refTimes the reference's
// times): among the settings that passed, simplest first, each taken over
// the incumbent only when it is faster beyond the noise by MinGain and
// not predicted to do more work; none on the schedule when none is.
func (s *Searcher) choose(ts []*race, refTimes []float64, n int) *lut.Choice {
	zero := 0.0
	ch := &lut.Choice{Samples: n, Setting: lut.Setting{Method: "none", Decoder: string(sample.DecodeSchedule)}, Agreement: 1, LowerBound: 1, SpeedUp: 1, FLOPsSpeedUp: 1, SpeedUpLow: 1,
		SpeedUpHigh: 1, ChangeBound: &zero}
	var passed []*race
	for _, t := range ts {
		p := t.point(s.Z, s.Test)
		p.Passed = t.decision == Accepted && (t.stopped == "" || t.stopped == "budget") && t.loss() <= s.MaxLoss
		ch.Tried = append(ch.Tried, p)
		if p.Passed {
			passed = append(passed, t)
		}
	}
	flopsUp := (*race).flopsUp
	slices.SortStableFunc(passed, func(a, b *race) int {
		if d := approximation(a.setting) - approximation(b.setting); d != 0 {
			return d
		}
		switch fa, fb := flopsUp(a), flopsUp(b); {
		case fa > fb:
			return -1
		case fa < fb:
			return 1
		}
		return strings.Compare(a.key, b.key)
	})
	incTimes, incName, incFLOPs := refTimes, ch.Setting.String(), 1.0
	for _, t := range passed {
		lo, _, hi, ok := pairedGain(incTimes, t.times(n), s.Z)
		// Beyond the noise, and not against the FLOPs prediction: a
		// setting predicted to do more work than the one it would replace
		// is not taken on timings alone.
		if !ok || lo < 1+s.MinGain || flopsUp(t) < incFLOPs {
			continue
		}
		p := t.point(s.Z, s.Test)
		ch.Setting, ch.Agreement, ch.LowerBound, ch.SpeedUp, ch.FLOPsSpeedUp = p.Setting, round3(p.AnswerAgreement()), p.LowerBound, p.SpeedUp, p.FLOPsSpeedUp
		bound := p.ChangeBound
		ch.ChangeBound = &bound
		ch.Over, ch.GainLow, ch.GainHigh = incName, round3(lo), round3(hi)
		ch.SpeedUpLow, _, ch.SpeedUpHigh, _ = pairedGain(refTimes, t.times(n), s.Z)
		ch.SpeedUpLow, ch.SpeedUpHigh = round3(ch.SpeedUpLow), round3(ch.SpeedUpHigh)
		incTimes, incName, incFLOPs = t.times(n), t.key, flopsUp(t)
	}
	ch.Front = lut.Front(append([]lut.Point{{Setting: lut.Setting{Method: "none", Decoder: string(sample.DecodeSchedule)}, Requests: n, Answers: n, LowerBound: round3(lut.Wilson(n, n, s.Z)), SpeedUp: 1, FLOPsSpeedUp: 1}}, ch.Tried...), n)
	if ch.Setting.Method == "none" && ch.Setting.Decoder == string(sample.DecodeSchedule) {
		ch.LowerBound = round3(lut.Wilson(n, n, s.Z))
	}
	return ch
}

// runOne is one request's run under a setting ("": the reference), from
// the log when it holds it.
func (s *Searcher) runOne(ctx context.Context, q ClassRequest, setting string) (searchLine, error) {
	key := searchKey{q.ID, q.Class, setting}
	if l, ok := s.lines[key]; ok {
		return l, nil
	}
	if err := ctx.Err(); err != nil {
		return searchLine{}, err
	}
	var cl lut.Class
	for _, c := range s.Run.Classes {
		if c.Name == q.Class {
			cl = c
		}
	}
	gen := ClassGen(s.Gen, cl)
	l := searchLine{ID: q.ID, Class: q.Class, Setting: setting}
	var answer []int32
	if setting == "" {
		g, err := sample.Generate(ctx, s.Model, q.Prompt, q.PrefixLen, gen, nil)
		if err != nil {
			return l, fmt.Errorf("request %s: %w", q.ID, err)
		}
		answer, l.Seconds, l.FLOPs = slices.Clone(g.Answer), g.Duration.Seconds(), g.FLOPs
		l.Answer = answer
	} else {
		ref, ok := s.lines[searchKey{q.ID, q.Class, ""}]
		if !ok {
			return l, fmt.Errorf("request %s: no reference answer", q.ID)
		}
		meth, err := s.method(setting)
		if err != nil {
			return l, err
		}
		res, err := cache.Run(ctx, s.Model, meth, cache.Request{Prompt: q.Prompt, PrefixLen: q.PrefixLen}, gen)
		if err != nil {
			return l, fmt.Errorf("request %s, %s: %w", q.ID, setting, err)
		}
		answer = res.Answer
		l.Seconds, l.FLOPs = res.Duration.Seconds(), res.FLOPs+res.Info.PrefixFLOPs
		_, _, l.Equal = CompareAnswers(ref.Answer, answer, s.Stop)
	}
	if q.Answer != "" && s.Check != nil && s.Text != nil {
		ok := s.Check(q.Suite, s.Text(answer), q.Answer)
		l.Correct = &ok
	}
	l.Seconds = math.Round(l.Seconds*1e5) / 1e5
	if err := appendLine(s.log, l); err != nil {
		return l, err
	}
	s.lines[key] = l
	return l, nil
}

// method is the setting's method, built once, on its own store.
func (s *Searcher) method(setting string) (cache.Method, error) {
	if m, ok := s.methods[setting]; ok {
		return m, nil
	}
	i := slices.IndexFunc(s.Grid, func(g lut.Setting) bool { return g.String() == setting })
	if i < 0 {
		return nil, fmt.Errorf("setting %q is not in the grid", setting)
	}
	o := s.Base
	if s.NewStore != nil {
		o.Store = s.NewStore()
	}
	m, err := cache.FromSetting(s.Grid[i], o)
	if err != nil {
		return nil, err
	}
	if s.methods == nil {
		s.methods = map[string]cache.Method{}
	}
	s.methods[setting] = m
	return m, nil
}

// readSearch reads a search.jsonl (a torn last line is cut off).
func readSearch(path string) (map[searchKey]searchLine, SearchRun, error) {
	var run SearchRun
	lines := map[searchKey]searchLine{}
	err := readLog(path, "search", &run, func(ln []byte) error {
		var l searchLine
		if err := json.Unmarshal(ln, &l); err != nil {
			return err
		}
		lines[searchKey{l.ID, l.Class, l.Setting}] = l
		return nil
	})
	if err != nil {
		return nil, run, err
	}
	return lines, run, nil
}
