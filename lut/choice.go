package lut

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// A v3 table carries, per ratio bin and answer-length class, the caching
// method calibration chose (dlmcache calibrate): the fastest setting of
// the method space — a registered method with its knobs, under a decoder
// — whose whole-answer agreement with the model's own uncached answers met
// the target on the bin's calibration requests, with the measured agreement
// and speed-up, every setting tried and the Pareto front of speed-up
// against agreement. serve --lut applies each request's bin's choice.

// Setting is one point of the method space.
type Setting struct {
	Method  string `json:"method"`  // registered method name (none, bicache, d2cache, …)
	Decoder string `json:"decoder"` // schedule or threshold:T
	// Knobs are the method's settings by name (bicache: depth, refresh;
	// d2cache: d2-k, d2-p; …); a knob left out is the method's default.
	Knobs map[string]float64 `json:"knobs,omitempty"`
	// Source is the bicache family's deep source (store, request).
	Source string `json:"source,omitempty"`
}

// String is the setting as a method spec and its knobs:
// "bicache@threshold:0.9 depth=1 source=…".
func (s Setting) String() string {
	var b strings.Builder
	b.WriteString(s.Method)
	if s.Decoder != "" {
		b.WriteString("@" + s.Decoder)
	}
	for _, k := range slices.Sorted(maps.Keys(s.Knobs)) {
		fmt.Fprintf(&b, " %s=%s", k, strconv.FormatFloat(s.Knobs[k], 'g', -1, 64))
	}
	if s.Source != "" {
		b.WriteString(" source=" + s.Source)
	}
	return b.String()
}

// Guided reports whether the setting decodes with the guided decoder
// (guided, guided:TAU[:K], either with +threshold:T): it needs the
// table's guide.
func (s Setting) Guided() bool {
	return s.Decoder == "guided" || strings.HasPrefix(s.Decoder, "guided:") || strings.HasPrefix(s.Decoder, "guided+")
}

// GuidedChoices reports whether any of the table's choices decodes with
// the guided decoder.
func (t *Table) GuidedChoices() bool {
	for _, b := range t.Bins {
		for _, c := range b.Choices {
			if c != nil && c.Setting.Guided() {
				return true
			}
		}
	}
	return false
}

// CheckGuide refuses to serve the table with guide g (nil: none loaded):
// a table whose choices decode guided needs its own guide, and a guide
// other than the one the table was calibrated with is refused whatever
// the choices (its guided settings were measured with the table's).
func (t *Table) CheckGuide(g *ModelID) error {
	switch {
	case t.Guide == nil || (g == nil && !t.GuidedChoices()):
		return nil
	case g == nil:
		return fmt.Errorf("the table's choices decode with the guided decoder, calibrated with guide %s (fingerprint %s): give --guide %s",
			t.Guide.Name, t.Guide.Fingerprint, t.Guide.Name)
	case g.Fingerprint != t.Guide.Fingerprint || g.NLayers != t.Guide.NLayers:
		return fmt.Errorf("the table was calibrated with guide %s (%d layers, fingerprint %s), but the guide loaded is %s (%d layers, fingerprint %s): calibrate with this guide",
			t.Guide.Name, t.Guide.NLayers, t.Guide.Fingerprint, g.Name, g.NLayers, g.Fingerprint)
	}
	return nil
}

// Spec is the method spec ("NAME@DECODER") the setting runs.
func (s Setting) Spec() string {
	if s.Decoder == "" {
		return s.Method
	}
	return s.Method + "@" + s.Decoder
}

// Knob is the setting's knob k and whether it has it.
func (s Setting) Knob(k string) (float64, bool) {
	v, ok := s.Knobs[k]
	return v, ok
}

// Class is an answer-length class: the requests whose gen length is at
// most MaxGen (0: any longer one). The server knows a request's class
// from its max_tokens (the gen length it rounds up to).
type Class struct {
	Name   string `json:"name"`
	MaxGen int    `json:"max_gen"`
}

// Point is one setting evaluated on a bin's calibration requests of one
// class.
type Point struct {
	Setting  Setting `json:"setting"`
	Requests int     `json:"requests"`         // requests it ran on (fewer than the bin's when stopped early)
	Answers  int     `json:"answers_agreeing"` // whole answers unchanged from the uncached ones
	// LowerBound is the Wilson bound of the whole-answer agreement.
	LowerBound float64 `json:"lower_bound"`
	// SpeedUp is none's generation time over the setting's on the same
	// requests, measured in the same run, the settings taking turns.
	SpeedUp float64 `json:"speedup"`
	// FLOPsSpeedUp is the predicted speed-up: none's matrix-product FLOPs
	// over the setting's.
	FLOPsSpeedUp float64 `json:"flops_speedup"`
	Passed       bool    `json:"passed"`
	// Stopped says why the setting was not run on every request:
	// "changes" (the changed-answer test rejected it), "bound" (it could
	// no longer be accepted on the requests left), "dominated" (a faster
	// accepted setting was found first), "budget".
	Stopped string `json:"stopped,omitempty"`
	// Decision is the changed-answer test's verdict (accepted, rejected,
	// undecided) and DecidedAt the request count it was reached at.
	Decision  string `json:"decision,omitempty"`
	DecidedAt int    `json:"decided_at,omitempty"`
	// ChangeBound is the one-sided upper confidence bound of its rate of
	// changed answers on the requests it ran (Clopper–Pearson at the
	// calibration's confidence; absent in tables before it).
	ChangeBound float64 `json:"change_bound,omitempty"`
}

// AnswerAgreement is the share of whole answers unchanged.
func (p Point) AnswerAgreement() float64 {
	return float64(p.Answers) / float64(max(1, p.Requests))
}

// Choice is what calibration chose for one bin and class.
type Choice struct {
	Class   string  `json:"class"`
	Setting Setting `json:"setting"`
	// The chosen point's evidence.
	Samples      int     `json:"samples"` // the bin's calibration requests of the class
	Agreement    float64 `json:"answer_agreement"`
	LowerBound   float64 `json:"lower_bound"`
	SpeedUp      float64 `json:"speedup"`
	FLOPsSpeedUp float64 `json:"flops_speedup"`
	// SpeedUpLow and SpeedUpHigh are the ends of the speed-up's
	// confidence interval over none on the schedule (geometric mean of
	// per-request ratios, paired by request, the calibration's one-sided
	// confidence at each end; SpeedUpHigh absent in tables before it).
	SpeedUpLow  float64 `json:"speedup_low,omitempty"`
	SpeedUpHigh float64 `json:"speedup_high,omitempty"`
	// ChangeBound is the one-sided upper confidence bound of the chosen
	// setting's rate of answers changed from the uncached ones on the
	// bin's requests (Clopper–Pearson at the calibration's confidence;
	// below the table's change_risk; 0 for none on the schedule, the
	// reference itself). Nil in tables before it.
	ChangeBound *float64 `json:"change_bound,omitempty"`
	// Over is the simpler setting the chosen one had to beat, and GainLow
	// and GainHigh the ends of its speed-up over it (GainLow at least 1 +
	// the table's min_gain), paired by request.
	Over     string  `json:"over,omitempty"`
	GainLow  float64 `json:"gain_low,omitempty"`
	GainHigh float64 `json:"gain_high,omitempty"`
	// Front is the Pareto front of the settings run on every request:
	// none faster with a higher agreement bound.
	Front []Point `json:"front"`
	Tried []Point `json:"tried"` // every setting evaluated, in search order
}

// Front returns the points of ps run on every one of n requests that no
// other such point beats in both speed-up and agreement bound, fastest
// first.
func Front(ps []Point, n int) []Point {
	var full []Point
	for _, p := range ps {
		if p.Requests == n && p.Stopped == "" {
			full = append(full, p)
		}
	}
	var out []Point
	for i, p := range full {
		dominated := false
		for j, q := range full {
			if i != j && q.SpeedUp >= p.SpeedUp && q.LowerBound >= p.LowerBound &&
				(q.SpeedUp > p.SpeedUp || q.LowerBound > p.LowerBound || j < i) {
				dominated = true
				break
			}
		}
		if !dominated {
			out = append(out, p)
		}
	}
	slices.SortStableFunc(out, func(a, b Point) int {
		switch {
		case a.SpeedUp > b.SpeedUp:
			return -1
		case a.SpeedUp < b.SpeedUp:
			return 1
		}
		return 0
	})
	return out
}

// ClassOf is the class a request of gen length g falls in: the first
// whose MaxGen holds it, else the last. ok is false for a table without
// classes.
func (t *Table) ClassOf(g int) (Class, bool) {
	for _, c := range t.Classes {
		if c.MaxGen == 0 || g <= c.MaxGen {
			return c, true
		}
	}
	if len(t.Classes) == 0 {
		return Class{}, false
	}
	return t.Classes[len(t.Classes)-1], true
}

// Chosen is the bin's choice for class, and whether it has one.
func (b Bin) Chosen(class string) (*Choice, bool) {
	for _, c := range b.Choices {
		if c != nil && c.Class == class {
			return c, true
		}
	}
	return nil, false
}

// Choose is the choice serving a request of shared-prefix ratio r and gen
// length g: the class g falls in, in the nearest bin that has a choice for
// it; clamped is true when r lies outside that bin. ok is false when the
// table has no choices (a v1/v2 table).
func (t *Table) Choose(r float64, g int) (c *Choice, clamped, ok bool) {
	cl, ok := t.ClassOf(g)
	if !ok {
		return nil, false, false
	}
	best, bestDist := t.nearestWhere(r, func(b Bin) bool { _, has := b.Chosen(cl.Name); return has })
	if best < 0 {
		return nil, false, false
	}
	c, _ = t.Bins[best].Chosen(cl.Name)
	return c, bestDist > 0, true
}

// Chooses reports whether the table chooses methods (format v3, with
// choices): what serve --lut applies per request.
func (t *Table) Chooses() bool {
	for _, b := range t.Bins {
		if len(b.Choices) > 0 {
			return true
		}
	}
	return false
}

// Calibrated reports whether anything in the table was checked against
// the model's answers (a v2 calibrated depth or a v3 choice), as opposed to
// a cosine estimate.
func (t *Table) Calibrated() bool {
	if t.Calibration == nil {
		return false
	}
	for _, b := range t.Bins {
		if len(b.Choices) > 0 || len(b.Calibrated) > 0 {
			return true
		}
	}
	return false
}

// checkChoices validates the choices of a parsed table.
func (t *Table) checkChoices() error {
	names := map[string]bool{}
	for i, c := range t.Classes {
		if c.Name == "" || names[c.Name] {
			return fmt.Errorf("class %d: empty or repeated name %q", i, c.Name)
		}
		if c.MaxGen < 0 || (c.MaxGen == 0 && i != len(t.Classes)-1) {
			return fmt.Errorf("class %s: max_gen %d (0, any length, only for the last class)", c.Name, c.MaxGen)
		}
		names[c.Name] = true
	}
	for i, b := range t.Bins {
		for _, c := range b.Choices {
			if c == nil || !names[c.Class] {
				return fmt.Errorf("bin %d: a choice for a class the table does not define", i)
			}
			if c.Setting.Method == "" {
				return fmt.Errorf("bin %d, class %s: a choice without a method", i, c.Class)
			}
			if c.Setting.Guided() && t.Guide == nil {
				return fmt.Errorf("bin %d, class %s: %s decodes with the guided decoder, but the table names no guide (calibrate --guide records it)", i, c.Class, c.Setting)
			}
		}
	}
	return nil
}

// writeChoices prints the chosen settings with their evidence: the
// changed-answer bound, the speed-up over none with its interval, the
// simpler setting beaten with the gain's interval.
func (t *Table) writeChoices(sb *strings.Builder) {
	if !t.Chooses() {
		return
	}
	if c := t.Calibration; c != nil {
		fmt.Fprintf(sb, "chosen per bin and answer-length class against uncached answers: %s; %d requests, %.0f s\n",
			c.TargetText(), c.Requests, c.Seconds)
	}
	var cls []string
	for _, c := range t.Classes {
		if c.MaxGen > 0 {
			cls = append(cls, fmt.Sprintf("%s: gen length ≤ %d", c.Name, c.MaxGen))
		} else {
			cls = append(cls, fmt.Sprintf("%s: longer", c.Name))
		}
	}
	fmt.Fprintf(sb, "classes: %s\n", strings.Join(cls, "; "))
	fmt.Fprintf(sb, "%-13s %-6s %-44s %8s %7s %8s %8s %-17s %8s %7s  %s\n", "ratio", "class", "chosen", "answers", "bound", "changed≤", "speed-up", "(interval)", "FLOPs", "samples", "over (gain's interval); front (setting: speed-up, bound)")
	for _, b := range t.Bins {
		for _, c := range b.Choices {
			var front []string
			for _, p := range c.Front {
				front = append(front, fmt.Sprintf("%s: %.2f×, %.3f", p.Setting, p.SpeedUp, p.LowerBound))
			}
			over := "-"
			if c.Over != "" {
				over = fmt.Sprintf("%s (%s)", c.Over, interval(c.GainLow, c.GainHigh))
			}
			changed := "-"
			if c.ChangeBound != nil {
				changed = fmt.Sprintf("%.2f%%", 100**c.ChangeBound)
			}
			fmt.Fprintf(sb, "[%.2f, %.2f) %-6s %-44s %8.3f %7.3f %8s %7.2f× %-17s %7.2f× %7d  %s; %s\n", b.Lo, b.Hi, c.Class, c.Setting,
				c.Agreement, c.LowerBound, changed, c.SpeedUp, interval(c.SpeedUpLow, c.SpeedUpHigh), c.FLOPsSpeedUp, c.Samples, over, strings.Join(front, "; "))
			var rej []string
			for _, p := range c.Tried {
				if p.Stopped == "changes" {
					rej = append(rej, fmt.Sprintf("%s (%d of %d changed)", p.Setting, p.Requests-p.Answers, p.Requests))
				}
			}
			if len(rej) > 0 {
				fmt.Fprintf(sb, "%13s rejected for changed answers: %s\n", "", strings.Join(rej, "; "))
			}
		}
	}
}

// interval prints a speed interval's ends ("[1.12×, 1.30×]"), or its lower
// end alone ("≥ 1.12×") where a table before the upper end has none.
func interval(lo, hi float64) string {
	switch {
	case lo <= 0 && hi <= 0:
		return "-"
	case hi <= 0:
		return fmt.Sprintf("≥ %.2f×", lo)
	}
	return fmt.Sprintf("[%.2f×, %.2f×]", lo, hi)
}
