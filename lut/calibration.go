package lut

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/dlmcache/dlmcache/regime"
)

// A calibrated table (format v2) carries, per bin and per deep source, the
// deepest depth whose cross- or in-request reuse kept the model's own
// uncached greedy answers (dlmcache calibrate), with the evidence: the
// depths tried, their agreement and sample counts. Serving prefers a
// bin's calibrated depth for the deep source it serves with over the
// cosine statistic.

// Calibration records how a table's calibrated depths were chosen.
type Calibration struct {
	Method     string   `json:"method"`     // the method calibrated (bicache)
	Refresh    int      `json:"refresh"`    // its refresh period R
	Sources    []string `json:"sources"`    // deep sources calibrated: store, request
	Gate       string   `json:"gate"`       // the agreement gated: token or answer
	Target     float64  `json:"target"`     // the lower confidence bound a depth must reach
	Confidence float64  `json:"confidence"` // one-sided confidence of the Wilson bound
	Requests   int      `json:"requests"`   // requests calibrated on
	Seconds    float64  `json:"seconds"`    // wall time
	Data       []string `json:"data"`       // where the requests came from
	StartFrom  string   `json:"start_from"` // the cosine table the search started from ("" : depth 1)
	Seed       int64    `json:"seed"`       //
	Version    string   `json:"dlmcache_version,omitempty"`
	// MaxLoss is the accuracy (in points against none) a user may lose,
	// the target the method search was stated in (v3): a setting must
	// also lose at most this much accuracy on the bin's requests that
	// carry reference answers.
	MaxLoss float64 `json:"max_loss,omitempty"`
	// Settings are the method-space settings searched (v3), as
	// Setting.String writes them.
	Settings []string `json:"settings,omitempty"`
	// The method search's changed-answer test (v3): a setting is served
	// only where a rate ChangeRisk of answers changed from the uncached
	// ones was ruled out at Confidence. ChangeTest names the test:
	// ChangeTestClopperPearson (the exact one-sided bound on each bin's
	// requests, up to Cap a bin and class, stopped early once a setting
	// cannot pass); empty in tables of the earlier sequential probability
	// ratio test, under which a setting changing ChangeOK of them passed
	// with probability Power (read, not written).
	ChangeRisk float64 `json:"change_risk,omitempty"`
	ChangeTest string  `json:"change_test,omitempty"`
	Cap        int     `json:"cap,omitempty"`
	ChangeOK   float64 `json:"change_ok,omitempty"`
	Power      float64 `json:"power,omitempty"`
	// MinGain: a setting adding approximation replaced a simpler one only
	// when its paired speed-up over it was at least 1 + MinGain at the
	// lower end of its confidence interval.
	MinGain float64 `json:"min_gain,omitempty"`
}

// ChangeTestClopperPearson is Calibration.ChangeTest of the method
// search's exact bound.
const ChangeTestClopperPearson = "clopper-pearson"

// TargetText states the target for people.
func (c *Calibration) TargetText() string {
	if c.ChangeRisk > 0 && c.ChangeTest == ChangeTestClopperPearson {
		s := fmt.Sprintf("changed answers below %g%% at %.0f%% confidence (one-sided Clopper–Pearson bound on up to %d requests a bin and class, stopped early once a setting cannot pass)",
			100*c.ChangeRisk, 100*c.Confidence, c.Cap)
		if c.MaxLoss > 0 {
			s += fmt.Sprintf(", at most %g points of accuracy lost against none", c.MaxLoss)
		}
		return s + fmt.Sprintf(", an approximation taken only when ≥ %g× as fast as the simpler setting at the interval's low end", 1+c.MinGain)
	}
	if c.ChangeRisk > 0 {
		s := fmt.Sprintf("%g%% of answers changed ruled out at %.0f%% confidence (sequential test; %g%% changed passes with probability %.0f%%)",
			100*c.ChangeRisk, 100*c.Confidence, 100*c.ChangeOK, 100*c.Power)
		if c.MaxLoss > 0 {
			s += fmt.Sprintf(", at most %g points of accuracy lost against none", c.MaxLoss)
		}
		return s + fmt.Sprintf(", an approximation taken only when ≥ %g× as fast as the simpler setting at the interval's low end", 1+c.MinGain)
	}
	s := fmt.Sprintf("whole-answer agreement's %.0f%% Wilson bound ≥ %g", 100*c.Confidence, c.Target)
	if c.MaxLoss > 0 {
		s = fmt.Sprintf("at most %g points of accuracy lost against none, and %s", c.MaxLoss, s)
	}
	return s
}

// BinCalibration is one bin's calibrated depth for one deep source.
type BinCalibration struct {
	Depth int `json:"depth"` // deepest depth that met the target (0: no reuse)
	// Agreement at Depth (at depth 0, trivially 1).
	TokenAgreement  float64 `json:"token_agreement"`
	AnswerAgreement float64 `json:"answer_agreement"`
	LowerBound      float64 `json:"lower_bound"` // Wilson bound of the gated agreement
	Samples         int     `json:"samples"`     // requests in the bin
	Tried           []Trial `json:"tried"`       // every depth evaluated, in search order
}

// Trial is one depth evaluated on a bin's requests.
type Trial struct {
	Depth       int     `json:"depth"`
	Requests    int     `json:"requests"`
	Answers     int     `json:"answers_agreeing"` // whole answer unchanged
	Tokens      int     `json:"tokens"`           // reference answer tokens compared
	TokensAgree int     `json:"tokens_agreeing"`
	LowerBound  float64 `json:"lower_bound"`
	Passed      bool    `json:"passed"`
}

// Wilson is the lower bound of the Wilson score interval of k successes in
// n trials at one-sided normal quantile z (1.2816 for 90%, 1.6449 for 95%).
func Wilson(k, n int, z float64) float64 {
	if n == 0 {
		return 0
	}
	p := float64(k) / float64(n)
	nn := float64(n)
	den := 1 + z*z/nn
	centre := p + z*z/(2*nn)
	half := z * math.Sqrt(p*(1-p)/nn+z*z/(4*nn*nn))
	return max(0, (centre-half)/den)
}

// CalibratedDepth is the bin's calibrated depth for deep source src, and
// whether it has one.
func (b Bin) CalibratedDepth(src string) (int, bool) {
	c, ok := b.Calibrated[src]
	if !ok || c == nil {
		return 0, false
	}
	return c.Depth, true
}

// LookupSource is the depth served for ratio r with deep source src: the
// nearest filled bin's calibrated depth for src when the table has one
// (0 means no reuse), else its cosine depth under stat (Lookup).
func (t *Table) LookupSource(r float64, stat Statistic, src string) (depth int, clamped bool) {
	i, dist := t.nearest(r)
	if i < 0 {
		return 1, true
	}
	if d, ok := t.Bins[i].CalibratedDepth(src); ok {
		return min(d, t.Model.NLayers), dist > 0
	}
	return t.Bins[i].Depth(stat, t.Model.NLayers), dist > 0
}

// CalibratedFor reports whether every filled bin has a calibrated depth for
// deep source src.
func (t *Table) CalibratedFor(src string) bool {
	if t.Calibration == nil || !slices.Contains(t.Calibration.Sources, src) {
		return false
	}
	for _, b := range t.Bins {
		if b.Filled() {
			if _, ok := b.CalibratedDepth(src); !ok {
				return false
			}
		}
	}
	return true
}

// Filled reports whether the bin holds a cosine statistic or a calibration.
func (b Bin) Filled() bool { return b.Count > 0 || len(b.Calibrated) > 0 || len(b.Choices) > 0 }

// CheckRegime refuses a table profiled in another regime (a zero field of
// the table, from a v1 table, is not compared).
func (t *Table) CheckRegime(g regime.Regime) error {
	tr := t.Regime
	if (tr.GenLength != 0 && tr.GenLength != g.GenLength) || (tr.Steps != 0 && tr.Steps != g.Steps) ||
		(tr.BlockLength != 0 && tr.BlockLength != g.BlockLength) {
		return fmt.Errorf("table was profiled at %s, not %s", tr.Text(), g.Text())
	}
	return nil
}

// writeCalibration prints the calibrated depths with their evidence.
func (t *Table) writeCalibration(sb *strings.Builder) {
	c := t.Calibration
	if c == nil || !slices.ContainsFunc(t.Bins, func(b Bin) bool { return len(b.Calibrated) > 0 }) {
		return
	}
	fmt.Fprintf(sb, "calibrated (%s, R=%d) against uncached greedy answers: %s agreement's %.0f%% Wilson bound ≥ %g, %d requests\n",
		c.Method, c.Refresh, c.Gate, 100*c.Confidence, c.Target, c.Requests)
	fmt.Fprintf(sb, "%-13s %-8s %5s %8s %8s %7s %8s  %s\n", "ratio", "source", "depth", "tokens", "answers", "bound", "samples", "tried (depth: answers agreeing/requests, bound)")
	for _, b := range t.Bins {
		for _, src := range c.Sources {
			bc, ok := b.Calibrated[src]
			if !ok || bc == nil {
				continue
			}
			var tried []string
			for _, tr := range bc.Tried {
				mark := "✗"
				if tr.Passed {
					mark = "✓"
				}
				tried = append(tried, fmt.Sprintf("%d: %d/%d %.3f%s", tr.Depth, tr.Answers, tr.Requests, tr.LowerBound, mark))
			}
			fmt.Fprintf(sb, "[%.2f, %.2f) %-8s %5d %8.4f %8.4f %7.4f %8d  %s\n", b.Lo, b.Hi, src, bc.Depth,
				bc.TokenAgreement, bc.AnswerAgreement, bc.LowerBound, bc.Samples, strings.Join(tried, "; "))
		}
	}
}
