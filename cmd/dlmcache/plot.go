package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"

	"github.com/dlmcache/dlmcache/lut"
	"github.com/dlmcache/dlmcache/plots"
	"github.com/dlmcache/dlmcache/profile"
	"github.com/dlmcache/dlmcache/regime"
)

// plotOptions are shared by every plot subcommand: one input, one output
// (.png or .svg by extension).
type plotOptions struct {
	f          *factory
	kind       string
	In         string
	Out        string
	Title      string
	Similarity string // heatmap, refresh: which statistic
}

func readJSONFile(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

func (opts *plotOptions) run(context.Context) error {
	title := func(def string) string {
		if opts.Title != "" {
			return opts.Title
		}
		return def
	}
	var fig plots.Figure
	h := plots.Height
	sim, err := parseSimilarity(opts.Similarity)
	if err != nil {
		return err
	}
	worst := sim == profile.SimRowMin
	switch opts.kind {
	case "heatmap":
		fig, err = opts.heatmap(sim, title)
	case "depth":
		t, err := lut.Read(opts.In)
		if err != nil {
			return err
		}
		stat := ""
		if s := t.SimilarityName(); s != string(profile.SimPrefix) {
			stat = " (" + s + ")"
		}
		p, err := plots.Depth(t, title(fmt.Sprintf("safe depth vs ratio, %s, τ=%g%s", t.Model.Name, t.Tau, stat)))
		if err != nil {
			return err
		}
		fig = p
	case "convergence":
		var c struct {
			Tau    float64                    `json:"tau"`
			Points []profile.ConvergencePoint `json:"points"`
		}
		if err := readJSONFile(opts.In, &c); err != nil {
			return err
		}
		var ns []int
		var l1 []float64
		for _, p := range c.Points {
			ns, l1 = append(ns, p.N), append(l1, p.L1)
		}
		p, err := plots.Convergence(ns, l1, title(fmt.Sprintf("table convergence, τ=%g", c.Tau)))
		if err != nil {
			return err
		}
		fig = p
	case "pareto":
		if fig, err = opts.pareto(title); fig == nil && err == nil {
			return nil // a table's panels, written
		}
	case "sweep", "refresh":
		fig, h, err = opts.sweep(worst, title)
	}
	if err != nil {
		return err
	}
	if err := plots.Save(fig, opts.Out, plots.Width, h); err != nil {
		return err
	}
	fmt.Fprintln(opts.f.ErrOut, "wrote", opts.Out)
	return nil
}

// heatmap is the per-layer, per-step mean prefix similarity of a
// profile.
func (opts *plotOptions) heatmap(sim profile.Similarity, title func(string) string) (plots.Figure, error) {
	recs, info, err := profile.ReadAll([]string{opts.In})
	if err != nil {
		return nil, err
	}
	if err := sim.Available(recs); err != nil {
		return nil, fmt.Errorf("%s: %w", opts.In, err)
	}
	s, err := meanSimilarity(recs, info.Model.NLayers, sim)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", opts.In, err)
	}
	what := "prefix K/V similarity"
	if sim == profile.SimRowMin {
		what = "worst prefix row's K/V similarity"
	}
	p, err := plots.Heatmap(s, title(fmt.Sprintf("%s, %s (%d requests)", what, info.Model.Name, info.Requests)))
	if err != nil {
		return nil, err
	}
	return p, nil
}

// pareto is bench's accuracy against speed-up; for a calibrated table it
// writes one panel per bin and class itself and returns no figure.
func (opts *plotOptions) pareto(title func(string) string) (plots.Figure, error) {
	if t, ok, err := choosingTable(opts.In); err != nil {
		return nil, err
	} else if ok {
		ps, err := tablePareto(t, opts.Title)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", opts.In, err)
		}
		if err := plots.SaveStack(ps, opts.Out, 7*vg.Inch, vg.Length(len(ps))*3*vg.Inch); err != nil {
			return nil, err
		}
		fmt.Fprintln(opts.f.ErrOut, "wrote", opts.Out)
		return nil, nil
	}
	var b struct {
		Model string `json:"model"`
		regime.Regime
		Results []profile.SuiteResult `json:"results"`
	}
	if err := readJSONFile(opts.In, &b); err != nil {
		return nil, err
	}
	ms, err := benchPoints(b.Results)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", opts.In, err)
	}
	p, err := plots.Pareto(ms, title(fmt.Sprintf("caching methods, %s, gen %d / %d steps", b.Model, b.GenLength, b.Steps)))
	if err != nil {
		return nil, err
	}
	return p, nil
}

// sweep is a sweep's accuracy and tokens/s against its parameter, or
// (kind refresh) its deep-layer picture; with its height.
func (opts *plotOptions) sweep(worst bool, title func(string) string) (plots.Figure, vg.Length, error) {
	var r sweepResult
	var pic profile.RefreshPicture
	r.Refresh = &pic
	if err := readJSONFile(opts.In, &r); err != nil {
		return nil, 0, err
	}
	if opts.kind == "refresh" {
		if pic.Layers == nil {
			return nil, 0, fmt.Errorf("%s has no deep-layer picture (write it with dlmcache sweep refresh)", opts.In)
		}
		series, what := map[string][]float64{
			"cross-request": pic.Cross, "stale (first step)": pic.Stale, fmt.Sprintf("refreshed every %d", pic.R): pic.Refreshed,
		}, "prefix K/V similarity to the request's own, per layer"
		if worst {
			if pic.CrossRowMin == nil {
				return nil, 0, fmt.Errorf("%s has no worst-row series (rerun dlmcache sweep refresh)", opts.In)
			}
			series = map[string][]float64{
				"cross-request": pic.CrossRowMin, "stale (first step)": pic.StaleRowMin, fmt.Sprintf("refreshed every %d", pic.R): pic.RefreshedRowMin,
			}
			what = "worst prefix row's K/V similarity, per layer"
		}
		p, err := plots.Refresh(pic.Layers, series, title(what))
		if err != nil {
			return nil, 0, err
		}
		return p, plots.Height, nil
	}
	var x, acc, tps []float64
	for _, p := range r.Points {
		x, acc, tps = append(x, p.X), append(acc, p.Accuracy), append(tps, p.TokensPerSec)
	}
	label := map[string]string{"tau": "τ", "refresh": "refresh period R (steps)"}[r.Param]
	s, err := plots.Sweep(x, label, acc, tps, title("BiCache vs "+label))
	if err != nil {
		return nil, 0, err
	}
	return s, plots.StackHeight, nil
}

func (opts *plotOptions) setArgs(args []string) { opts.In = args[0] }

func (opts *plotOptions) flags(fl *pflag.FlagSet) {
	fl.StringVarP(&opts.Out, "out", "o", opts.kind+".png", "output file (.png or .svg)")
	fl.StringVar(&opts.Title, "title", "", "figure title")
	if opts.kind == "heatmap" || opts.kind == "refresh" {
		addSimilarityFlag(fl, &opts.Similarity)
	}
}

// meanSimilarity averages the statistic sim over requests into [layer][step].
func meanSimilarity(recs []profile.Record, nLayers int, sim profile.Similarity) ([][]float64, error) {
	steps := 0
	for _, r := range recs {
		steps = max(steps, int(r.Step))
	}
	if steps == 0 || nLayers == 0 {
		return nil, fmt.Errorf("no similarity records")
	}
	sum := make([][]float64, nLayers)
	cnt := make([][]int, nLayers)
	for l := range sum {
		sum[l], cnt[l] = make([]float64, steps), make([]int, steps)
	}
	for _, r := range recs {
		l, t := int(r.Layer)-1, int(r.Step)-1
		if l < 0 || l >= nLayers || t < 0 {
			return nil, fmt.Errorf("record with layer %d step %d outside the run's %d layers", r.Layer, r.Step, nLayers)
		}
		sum[l][t] += sim.Of(r)
		cnt[l][t]++
	}
	for l := range sum {
		for t := range sum[l] {
			if cnt[l][t] == 0 {
				sum[l][t] = math.NaN()
			} else {
				sum[l][t] /= float64(cnt[l][t])
			}
		}
	}
	return sum, nil
}

// choosingTable reads path as a table when it is one (its "format" names
// a dlmcache table): a table that chooses methods (v3), or an error for one
// that does not.
func choosingTable(path string) (*lut.Table, bool, error) {
	var head struct {
		Format string `json:"format"`
	}
	if err := readJSONFile(path, &head); err != nil {
		return nil, false, err
	}
	if !strings.HasPrefix(head.Format, "dlmcache.lut/") {
		return nil, false, nil
	}
	t, err := lut.Read(path)
	if err != nil {
		return nil, false, err
	}
	if !t.Chooses() {
		return nil, false, fmt.Errorf("%s is a table without method choices (format %s): plot pareto draws a calibrated table (dlmcache calibrate) or bench.json; plot depth draws this one", path, t.Format)
	}
	return t, true, nil
}

// tablePareto is one panel per ratio bin and answer-length class of a
// calibrated table: every setting the search tried, at its measured
// speed-up over none and the share of answers it kept unchanged (on the
// requests it ran before it stopped), with the bin's front and choice.
func tablePareto(t *lut.Table, title string) ([]*plot.Plot, error) {
	var ps []*plot.Plot
	for _, b := range t.Bins {
		for _, c := range b.Choices {
			ms := []plots.Method{{Name: "none@schedule (the reference)", SpeedUp: 1, Accuracy: 1}}
			for _, p := range c.Tried {
				if p.Requests == 0 || p.SpeedUp <= 0 {
					continue
				}
				name := p.Setting.String()
				switch {
				case p.Setting.String() == c.Setting.String():
					name += " (chosen)"
				case p.Stopped != "":
					name += fmt.Sprintf(" (%s, %d/%d)", p.Stopped, p.Requests, c.Samples)
				}
				ms = append(ms, plots.Method{Name: name, SpeedUp: p.SpeedUp, Accuracy: p.AnswerAgreement()})
			}
			tt := fmt.Sprintf("%s, ratio [%.2f, %.2f), %s answers: %s", t.Model.Name, b.Lo, b.Hi, c.Class, c.Setting)
			if title != "" {
				tt = title + ": " + tt
			}
			p, err := plots.ParetoAgreement(ms, tt)
			if err != nil {
				return nil, err
			}
			ps = append(ps, p)
		}
	}
	if len(ps) == 0 {
		return nil, fmt.Errorf("no bin has a choice")
	}
	return ps, nil
}

// benchPoints are the methods' average rows as speed-up over none and
// accuracy.
func benchPoints(rows []profile.SuiteResult) ([]plots.Method, error) {
	var none *profile.SuiteResult
	for i, r := range rows {
		if r.Method == "none" && r.Suite == "average" {
			none = &rows[i]
		}
	}
	if none == nil || none.TokensPerSec <= 0 {
		return nil, fmt.Errorf("no average row for none (bench --methods none,...)")
	}
	var ms []plots.Method
	for _, r := range rows {
		if r.Suite == "average" {
			ms = append(ms, plots.Method{Name: r.Method, SpeedUp: r.TokensPerSec / none.TokensPerSec, Accuracy: r.Accuracy})
		}
	}
	return ms, nil
}

func newCmdPlotKind(f *factory, kind, in, short string, runF func(*plotOptions) error) *cobra.Command {
	return newCommand(&plotOptions{f: f, kind: kind}, runF, &cobra.Command{
		Use:   kind + " " + in + " -o FILE.png|FILE.svg",
		Short: short,
		Args:  cobra.ExactArgs(1),
	})
}
