package plots

import (
	"errors"
	"fmt"
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/dlmcache/dlmcache/lut"
)

// Colours shared by the figures.
var (
	blue   = color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}
	orange = color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}
	green  = color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}
	red    = color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}
	purple = color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff}
	grey   = color.RGBA{R: 0x55, G: 0x55, B: 0x55, A: 0xff}
)

// Depth draws the table's safe depth against the shared-prefix ratio r:
// for every filled bin, at the bin's centre, the mean depth with ±std error
// bars and the minimum depth as a triangle; the depth served for each ratio
// (floor of the mean, lut.Mean) as a step line across each bin; unfilled
// bins as red crosses on the x axis. The y axis spans 0..n_layers, the x
// axis the table's bins. A table with no filled bin still draws (every bin
// crossed out); a nil table or one without bins is an error.
func Depth(t *lut.Table, title string) (*plot.Plot, error) {
	if t == nil || len(t.Bins) == 0 {
		return nil, errors.New("plots: depth: the table has no bins")
	}
	n := t.Model.NLayers
	if n <= 0 {
		return nil, fmt.Errorf("plots: depth: the table's model has %d layers", n)
	}
	for i, b := range t.Bins {
		if !(b.Hi > b.Lo) || !finite(b.Lo) || !finite(b.Hi) {
			return nil, fmt.Errorf("plots: depth: bin %d is [%g, %g)", i, b.Lo, b.Hi)
		}
		if b.Count > 0 && !(finite(b.MeanDepth) && finite(b.Std)) {
			return nil, fmt.Errorf("plots: depth: bin %d [%g, %g) has mean %v, std %v", i, b.Lo, b.Hi, b.MeanDepth, b.Std)
		}
	}

	p := newPlot(title, "shared-prefix ratio r", "safe depth (layers)")
	p.Y.Min, p.Y.Max = 0, float64(n)
	p.Y.Tick.Marker = intTicks{}
	p.X.Tick.Marker = niceTicks{}
	p.X.Min, p.X.Max = t.Bins[0].Lo, t.Bins[len(t.Bins)-1].Hi
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.TextStyle.Font.Size = vg.Points(9)
	p.Add(plotter.NewGrid())

	var (
		means  errPoints
		mins   plotter.XYs
		unfill plotter.XYs
		runs   []plotter.XYs // served depth, one polyline per run of filled bins
		run    plotter.XYs
	)
	for _, b := range t.Bins {
		if b.Count == 0 {
			unfill = append(unfill, plotter.XY{X: (b.Lo + b.Hi) / 2, Y: 0})
			if len(run) > 0 {
				runs, run = append(runs, run), nil
			}
			continue
		}
		x := (b.Lo + b.Hi) / 2
		means = append(means, errPoint{x: x, y: b.MeanDepth, e: b.Std})
		mins = append(mins, plotter.XY{X: x, Y: float64(b.Min)})
		d := float64(b.Depth(lut.Mean, n))
		run = append(run, plotter.XY{X: b.Lo, Y: d}, plotter.XY{X: b.Hi, Y: d})
	}
	if len(run) > 0 {
		runs = append(runs, run)
	}

	for i, r := range runs {
		l, err := plotter.NewLine(r)
		if err != nil {
			return nil, fmt.Errorf("plots: depth: %w", err)
		}
		l.Color, l.Width = green, vg.Points(1.5)
		p.Add(l)
		if i == 0 {
			p.Legend.Add("served depth floor(mean)", l)
		}
	}
	if len(means) > 0 {
		eb, err := plotter.NewYErrorBars(means)
		if err != nil {
			return nil, fmt.Errorf("plots: depth: %w", err)
		}
		eb.Color = blue
		sc, err := plotter.NewScatter(means)
		if err != nil {
			return nil, fmt.Errorf("plots: depth: %w", err)
		}
		sc.GlyphStyle = draw.GlyphStyle{Color: blue, Radius: vg.Points(2.5), Shape: draw.CircleGlyph{}}
		ms, err := plotter.NewScatter(mins)
		if err != nil {
			return nil, fmt.Errorf("plots: depth: %w", err)
		}
		ms.GlyphStyle = draw.GlyphStyle{Color: orange, Radius: vg.Points(2.5), Shape: draw.TriangleGlyph{}}
		p.Add(eb, sc, ms)
		p.Legend.Add("mean ± std", sc)
		p.Legend.Add("min", ms)
	}
	if len(unfill) > 0 {
		sc, err := plotter.NewScatter(unfill)
		if err != nil {
			return nil, fmt.Errorf("plots: depth: %w", err)
		}
		sc.GlyphStyle = draw.GlyphStyle{Color: red, Radius: vg.Points(3.5), Shape: draw.CrossGlyph{}}
		p.Add(sc)
		p.Legend.Add("unfilled bin", sc)
	}
	return p, nil
}

// errPoint is a bin's mean depth with its std as a symmetric error.
type errPoint struct{ x, y, e float64 }

type errPoints []errPoint

func (e errPoints) Len() int                    { return len(e) }
func (e errPoints) XY(i int) (float64, float64) { return e[i].x, e[i].y }
func (e errPoints) YError(i int) (float64, float64) {
	return e[i].e, e[i].e
}
