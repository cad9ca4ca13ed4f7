package engine

import (
	"fmt"
	"strings"

	"github.com/dlmcache/dlmcache/cache"
	"github.com/dlmcache/dlmcache/lut"
	"github.com/dlmcache/dlmcache/profile"
)

// ReadTable loads --lut and refuses a table made for another model.
func ReadTable(path string, m *Model) (*lut.Table, error) {
	t, err := lut.Read(path)
	if err != nil {
		return nil, err
	}
	if err := t.Check(m.Name, len(m.Blocks), m.Fingerprint); err != nil {
		return nil, fmt.Errorf("--lut %s: %w (profile this model with `dlmcache profile --model %s`)", path, err, m.Name)
	}
	return t, nil
}

// openTable reads --lut for e's model and guide and checks it once: the
// model and the guide it was made for, a calibration where the config
// asks for one, and the deep source it is served from (resolved here,
// once: e.source, e.sourceWhy). Warnings go to the log.
func (e *Engine) openTable() error {
	c := &e.cfg
	t, err := ReadTable(c.LUT, e.Model)
	if err != nil {
		return err
	}
	var gid *lut.ModelID
	if e.Guide != nil {
		id := e.Guide.ID()
		gid = &id
	}
	if err := t.CheckGuide(gid); err != nil {
		return fmt.Errorf("--lut %s: %w", c.LUT, err)
	}
	e.Table = t
	e.source, e.sourceWhy = cache.ResolveDeepSource(c.Options.DeepSource, t)
	if w := crossRequestWarning(string(e.source), t); w != "" {
		e.logf("warning: %s\n", w)
	}
	if err := t.CheckRegime(e.Gen.Regime); err != nil {
		e.logf("warning: --lut %s: %v: its depths were measured in another regime (profile or calibrate in this one)\n", c.LUT, err)
	}
	if c.RequireCalibrated {
		return checkCalibrated(t, c.LUT)
	}
	return nil
}

// crossRequestWarning warns when the bicache methods would reuse the store's
// shallow K/V across requests at depths from the whole-prefix cosine: on the
// bundled model those depths (6–7) lost 23 points or more, while a table from
// the worst prefix row's cosine (depth 2) kept every answer
// (docs/results.md, section 4).
func crossRequestWarning(source string, t *lut.Table) string {
	if t == nil || source == "request" || t.SimilarityName() == string(profile.SimRowMin) || t.CalibratedFor(source) {
		return ""
	}
	return fmt.Sprintf("--deep-source %s reuses the store's prefix K/V across requests at this table's depths, which come from the whole-prefix cosine (similarity %q); "+
		"that overstates the safe depth when questions rewrite a few prefix rows. Serve the %s that dlmcache profile writes next to table.json "+
		"(or build one with `dlmcache lut build --similarity %s`), or use --deep-source request.",
		source, t.SimilarityName(), profile.CrossTableFile, profile.SimRowMin)
}

// checkCalibrated refuses a table no calibration checked (serve, unless
// --allow-uncalibrated).
func checkCalibrated(t *lut.Table, path string) error {
	if t.Calibrated() {
		return nil
	}
	return fmt.Errorf("--lut %s is a cosine estimate (%s similarity), not a table calibrated against the model's answers: "+
		"such tables lost 10 points on held-out requests (docs/results.md). Run `dlmcache calibrate` and serve the table.json it writes, "+
		"or pass --allow-uncalibrated to serve this one anyway", path, t.SimilarityName())
}

// TableMethod is the method a table is served with when no method is
// named: the table's choices for a calibrated v3 table, bicache for
// another table, none without one.
func TableMethod(t *lut.Table) string {
	switch {
	case t != nil && t.Chooses():
		return "table"
	case t != nil:
		return "bicache"
	}
	return "none"
}

// TableNote says how the served method uses the table, for the start-up
// line.
func (e *Engine) TableNote() string {
	t := e.Table
	note := "no table"
	switch {
	case t != nil && e.MethodName == "table":
		note = fmt.Sprintf("table %s: per request, its bin's choice: %s", e.cfg.LUT, choicesNote(t))
	case t != nil:
		note = fmt.Sprintf("table %s, deep source %s: %s", e.cfg.LUT, cache.SourceOf(e.Method), e.sourceWhy)
	}
	if t != nil && !t.Calibrated() {
		note += "; UNCALIBRATED (a cosine estimate, served because of --allow-uncalibrated)"
	}
	return note
}

// choicesNote lists a v3 table's choices for the start-up line.
func choicesNote(t *lut.Table) string {
	var parts []string
	for _, b := range t.Bins {
		for _, c := range b.Choices {
			parts = append(parts, fmt.Sprintf("[%.2f, %.2f) %s: %s (%.1f× none)", b.Lo, b.Hi, c.Class, c.Setting, c.SpeedUp))
		}
	}
	return strings.Join(parts, "; ")
}
