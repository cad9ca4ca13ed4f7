package plots

import (
	"errors"
	"fmt"
	"image/color"
	"math"
	"slices"
	"sort"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Convergence draws the L1 distance between consecutive tables, l1[i] for
// the table built from n[i] requests per bin, against n (line + points).
// NaN distances (no shared filled bin) leave a gap.
func Convergence(n []int, l1 []float64, title string) (*plot.Plot, error) {
	if len(n) == 0 {
		return nil, errors.New("plots: convergence: no points")
	}
	if len(l1) != len(n) {
		return nil, fmt.Errorf("plots: convergence: %d values of N but %d L1 distances", len(n), len(l1))
	}
	x := make([]float64, len(n))
	for i, v := range n {
		if v <= 0 {
			return nil, fmt.Errorf("plots: convergence: N[%d] = %d, want > 0", i, v)
		}
		x[i] = float64(v)
	}
	for i, v := range l1 {
		if math.IsInf(v, 0) || v < 0 {
			return nil, fmt.Errorf("plots: convergence: L1[%d] = %v, want a finite distance ≥ 0", i, v)
		}
	}
	p := newPlot(title, "requests per bin N", "L1 to previous table (layers)")
	p.Add(plotter.NewGrid())
	if err := addSeries(p, x, l1, style(0)); err != nil {
		return nil, fmt.Errorf("plots: convergence: %w", err)
	}
	p.Y.Min = 0
	p.Y.Tick.Marker = niceTicks{}
	p.X.Tick.Marker = niceTicks{}
	if lo, hi := minmax(x); hi >= 8*lo {
		// N usually doubles: a log axis spaces the points evenly, marked
		// at the N that were measured.
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = valueTicks(x)
	}
	return p, nil
}

// Sweep draws accuracy (top panel) and throughput in tokens/s (bottom
// panel) against a swept parameter x — τ or the refresh period R — named by
// xlabel. The panels share the x range and are aligned; title goes on top.
// A positive x spanning a factor of 8 or more (R = 8…64) gets a log axis
// marked at the swept values. NaN values leave gaps.
func Sweep(x []float64, xlabel string, accuracy, tps []float64, title string) (*Stack, error) {
	if len(x) == 0 {
		return nil, errors.New("plots: sweep: no points")
	}
	if len(accuracy) != len(x) || len(tps) != len(x) {
		return nil, fmt.Errorf("plots: sweep: %d parameter values, %d accuracies and %d throughputs; want equal lengths",
			len(x), len(accuracy), len(tps))
	}
	xmin, xmax := math.Inf(1), math.Inf(-1)
	for i, v := range x {
		if !finite(v) {
			return nil, fmt.Errorf("plots: sweep: %s[%d] = %v", xlabel, i, v)
		}
		xmin, xmax = math.Min(xmin, v), math.Max(xmax, v)
	}
	for i := range x {
		if math.IsInf(accuracy[i], 0) || math.IsInf(tps[i], 0) {
			return nil, fmt.Errorf("plots: sweep: point %d (%s = %g) has accuracy %v, throughput %v", i, xlabel, x[i], accuracy[i], tps[i])
		}
	}

	top := newPlot(title, "", "accuracy")
	bot := newPlot("", xlabel, "throughput (tokens/s)")
	for i, pp := range []*plot.Plot{top, bot} {
		pp.Add(plotter.NewGrid())
		ys := accuracy
		if i == 1 {
			ys = tps
		}
		if err := addSeries(pp, x, ys, style(i)); err != nil {
			return nil, fmt.Errorf("plots: sweep: %s: %w", pp.Y.Label.Text, err)
		}
		pp.X.Min, pp.X.Max = xmin, xmax
		pp.X.Tick.Marker, pp.Y.Tick.Marker = niceTicks{}, niceTicks{}
		if xmin > 0 && xmax >= 8*xmin {
			// A doubling parameter (R = 8, 16, 32, 64): log axis,
			// marked at the values swept.
			pp.X.Scale = plot.LogScale{}
			pp.X.Tick.Marker = valueTicks(x)
		}
		pp.X.Padding = vg.Points(8)
	}
	return &Stack{Plots: []*plot.Plot{top, bot}}, nil
}

// Refresh draws the similarity of the prefix K/V in the given (deep)
// layers under several conditions, series[name][i] for layers[i] — e.g.
// "cross-request", "stale within request", "refreshed every R" — as lines
// with points, one style per condition, the legend to the right of the
// plot (sorted by name so the figure does not depend on map order).
func Refresh(layers []int, series map[string][]float64, title string) (*plot.Plot, error) {
	x := make([]float64, len(layers))
	for i, l := range layers {
		x[i] = float64(l)
	}
	return Lines(x, "layer", "cosine similarity", series, title)
}

// Lines draws series[name][i] over x[i] as lines with points, one style per
// series, the legend to the right (sorted by name); integer x ticks.
func Lines(x []float64, xlabel, ylabel string, series map[string][]float64, title string) (*plot.Plot, error) {
	if len(x) == 0 {
		return nil, errors.New("plots: lines: no x values")
	}
	if len(series) == 0 {
		return nil, errors.New("plots: lines: no series")
	}
	names := make([]string, 0, len(series))
	for name, ys := range series {
		if len(ys) != len(x) {
			return nil, fmt.Errorf("plots: lines: series %q has %d values for %d x values", name, len(ys), len(x))
		}
		names = append(names, name)
	}
	sort.Strings(names)

	p := newPlot(title, xlabel, ylabel)
	p.Add(plotter.NewGrid())
	p.X.Tick.Marker, p.Y.Tick.Marker = intTicks{}, niceTicks{}
	p.X.Padding = vg.Points(8)
	leg := plot.NewLegend()
	leg.TextStyle.Font.Size = vg.Points(9)
	leg.Left = true
	leg.Top = true
	drawn := 0
	for i, name := range names {
		ys := series[name]
		var ok bool
		for j, v := range ys {
			if math.IsInf(v, 0) {
				return nil, fmt.Errorf("plots: lines: series %q at %s %g is %v", name, xlabel, x[j], v)
			}
			ok = ok || !math.IsNaN(v)
		}
		if !ok {
			continue // nothing measured; still listed in the legend below
		}
		if err := addSeries(p, x, ys, style(i)); err != nil {
			return nil, fmt.Errorf("plots: lines: series %q: %w", name, err)
		}
		drawn++
	}
	if drawn == 0 {
		return nil, errors.New("plots: lines: every value of every series is NaN")
	}
	for i, name := range names {
		l, s := thumbs(style(i))
		if allNaN(series[name]) {
			name += " (n/a)"
		}
		leg.Add(name, l, s)
	}
	p.Add(&sideLegend{Legend: leg})
	return p, nil
}

func minmax(v []float64) (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, x := range v {
		lo, hi = math.Min(lo, x), math.Max(hi, x)
	}
	return lo, hi
}

// valueTicks marks the given values, labelling at most about eight of them.
func valueTicks(v []float64) plot.ConstantTicks {
	u := append([]float64(nil), v...)
	sort.Float64s(u)
	u = slices.Compact(u)
	every := (len(u) + 7) / 8
	ts := make(plot.ConstantTicks, len(u))
	for i, x := range u {
		ts[i].Value = x
		if i%every == 0 {
			ts[i].Label = strconv.FormatFloat(x, 'g', -1, 64)
		}
	}
	return ts
}

func allNaN(v []float64) bool {
	for _, x := range v {
		if !math.IsNaN(x) {
			return false
		}
	}
	return true
}

// seriesStyle is a colour, dash pattern and glyph for one series.
type seriesStyle struct {
	color  color.Color
	dashes []vg.Length
	glyph  draw.GlyphDrawer
}

// style is the i-th series style; colours, dashes and glyphs all differ so
// that the figure also reads in grey.
func style(i int) seriesStyle {
	colors := []color.Color{blue, orange, green, red, purple, grey}
	dashes := [][]vg.Length{nil, {vg.Points(5), vg.Points(2)}, {vg.Points(1.5), vg.Points(1.5)}, {vg.Points(6), vg.Points(2), vg.Points(1.5), vg.Points(2)}}
	glyphs := []draw.GlyphDrawer{draw.CircleGlyph{}, draw.SquareGlyph{}, draw.TriangleGlyph{}, draw.PyramidGlyph{}, draw.RingGlyph{}, draw.CrossGlyph{}}
	// Past six series the colours shift by one per round, so that no two of
	// the first 36 share both colour and glyph.
	return seriesStyle{colors[(i+i/len(glyphs))%len(colors)], dashes[i%len(dashes)], glyphs[i%len(glyphs)]}
}

func (s seriesStyle) line() draw.LineStyle {
	return draw.LineStyle{Color: s.color, Width: vg.Points(1.25), Dashes: s.dashes}
}

func (s seriesStyle) glyphStyle() draw.GlyphStyle {
	return draw.GlyphStyle{Color: s.color, Radius: vg.Points(2.5), Shape: s.glyph}
}

// thumbs are legend thumbnails for a series drawn in style s.
func thumbs(s seriesStyle) (*plotter.Line, *plotter.Scatter) {
	l := &plotter.Line{LineStyle: s.line()}
	sc := &plotter.Scatter{GlyphStyle: s.glyphStyle()}
	return l, sc
}

// addSeries adds ys against xs to p as lines with points, in style s;
// NaN values split the line.
func addSeries(p *plot.Plot, xs, ys []float64, s seriesStyle) error {
	var pts, run plotter.XYs
	flush := func() error {
		if len(run) > 1 {
			l, err := plotter.NewLine(run)
			if err != nil {
				return err
			}
			l.LineStyle = s.line()
			p.Add(l)
		}
		run = nil
		return nil
	}
	for i := range xs {
		if math.IsNaN(ys[i]) {
			if err := flush(); err != nil {
				return err
			}
			continue
		}
		pt := plotter.XY{X: xs[i], Y: ys[i]}
		run = append(run, pt)
		pts = append(pts, pt)
	}
	if err := flush(); err != nil {
		return err
	}
	if len(pts) == 0 {
		return errors.New("every value is NaN")
	}
	sc, err := plotter.NewScatter(pts)
	if err != nil {
		return err
	}
	sc.GlyphStyle = s.glyphStyle()
	p.Add(sc)
	return nil
}

// sideLegend draws a legend to the right of the data area, top aligned;
// its GlyphBoxes reserve the room (the data area shrinks), so the legend
// never covers data.
type sideLegend struct {
	plot.Legend
}

const legendGap = 3 * vg.Millimeter

func (s *sideLegend) width() vg.Length {
	r := s.Legend.Rectangle(draw.Canvas{})
	return r.Max.X - r.Min.X
}

// GlyphBoxes implements plot.GlyphBoxer.
func (s *sideLegend) GlyphBoxes(*plot.Plot) []plot.GlyphBox {
	return []plot.GlyphBox{{X: 1, Y: 0.5, Rectangle: vg.Rectangle{Max: vg.Point{X: legendGap + s.width()}}}}
}

// Plot implements plot.Plotter.
func (s *sideLegend) Plot(c draw.Canvas, _ *plot.Plot) {
	x0 := c.Max.X + legendGap
	lc := draw.Canvas{Canvas: c.Canvas, Rectangle: vg.Rectangle{
		Min: vg.Point{X: x0, Y: c.Min.Y},
		Max: vg.Point{X: x0 + s.width(), Y: c.Max.Y},
	}}
	s.Legend.Draw(lc)
}
