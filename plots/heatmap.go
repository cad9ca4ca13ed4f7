package plots

import (
	"errors"
	"fmt"
	"image/color"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/palette"
	"gonum.org/v1/plot/palette/moreland"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// NaNColor fills heatmap cells whose similarity was not measured.
var NaNColor color.Color = color.Gray{Y: 0xb0}

// paletteColors is the number of colours in the heatmap palette.
const paletteColors = 64

// Heatmap draws s, the mean prefix K/V cosine similarity, s[l][t] for layer
// l+1 and denoising step t+1 (shape [layers][steps]), as a layers × steps
// heatmap: steps on the x axis, layers on the y axis, both numbered from 1,
// with a colour bar on the right spanning the finite values' range.
// NaN cells are drawn in NaNColor and the bar gets a "n/a" swatch.
func Heatmap(s [][]float64, title string) (*plot.Plot, error) {
	if len(s) == 0 || len(s[0]) == 0 {
		return nil, errors.New("plots: heatmap: no similarity data (need [layers][steps], got an empty grid)")
	}
	steps := len(s[0])
	lo, hi := math.Inf(1), math.Inf(-1)
	nan := false
	for l, row := range s {
		if len(row) != steps {
			return nil, fmt.Errorf("plots: heatmap: layer %d has %d steps, layer 1 has %d", l+1, len(row), steps)
		}
		for t, v := range row {
			switch {
			case math.IsNaN(v):
				nan = true
			case math.IsInf(v, 0):
				return nil, fmt.Errorf("plots: heatmap: similarity at layer %d step %d is %v", l+1, t+1, v)
			default:
				lo, hi = math.Min(lo, v), math.Max(hi, v)
			}
		}
	}
	if lo > hi {
		return nil, errors.New("plots: heatmap: every similarity is NaN")
	}
	if lo == hi { // a constant grid still needs a colour range
		lo, hi = lo-0.005, hi+0.005
	}

	pal, err := heatPalette(paletteColors)
	if err != nil {
		return nil, err
	}
	h := &cells{Z: s, Palette: pal.Colors(), Min: lo, Max: hi}

	p := newPlot(title, "denoising step", "layer")
	p.Add(h)
	p.Add(&colorBar{Palette: pal, Min: lo, Max: hi, Label: "cosine similarity", NaN: nan})
	p.X.Padding, p.Y.Padding = 0, 0
	p.X.Tick.Marker, p.Y.Tick.Marker = intTicks{}, intTicks{}
	return p, nil
}

// heatPalette is n colours of Kindlmann's luminance map (black → purple →
// blue → green → yellow → white), cut short of both ends so that no cell
// vanishes into the black axes or the white page.
func heatPalette(n int) (palette.Palette, error) {
	const from, to = 0.08, 0.9
	cm := moreland.Kindlmann()
	cm.SetMin(0)
	cm.SetMax(1)
	cols := make([]color.Color, n)
	for i := range cols {
		c, err := cm.At(from + (to-from)*float64(i)/float64(n-1))
		if err != nil {
			return nil, fmt.Errorf("plots: heatmap palette: %w", err)
		}
		cols[i] = c
	}
	return colors(cols), nil
}

type colors []color.Color

func (c colors) Colors() []color.Color { return c }

// cells draws Z[row][col] as unit squares centred on (col+1, row+1).
// It does what plotter.HeatMap does, with one difference that matters at
// 128 steps: every cell but the last in its row and column overlaps its
// neighbour by a hair, so anti-aliasing leaves no light seams between
// cells (HeatMap's cells abut exactly and a grid of seams shows through).
// Colour index i stands for values within half a step of Min + i·Δ,
// Δ = (Max−Min)/(len(Palette)−1), as in HeatMap; NaN cells get NaNColor.
type cells struct {
	Z        [][]float64 // [row][col]
	Palette  []color.Color
	Min, Max float64
}

const seamOverlap = vg.Length(0.4) // points

// DataRange implements plot.DataRanger.
func (h *cells) DataRange() (xmin, xmax, ymin, ymax float64) {
	return 0.5, float64(len(h.Z[0])) + 0.5, 0.5, float64(len(h.Z)) + 0.5
}

// Plot implements plot.Plotter.
func (h *cells) Plot(c draw.Canvas, plt *plot.Plot) {
	trX, trY := plt.Transforms(&c)
	scale := float64(len(h.Palette)-1) / (h.Max - h.Min)
	rows, cols := len(h.Z), len(h.Z[0])
	colorOf := func(v float64) color.Color {
		if math.IsNaN(v) {
			return NaNColor
		}
		i := int((v-h.Min)*scale + 0.5)
		return h.Palette[max(0, min(i, len(h.Palette)-1))]
	}
	for r, row := range h.Z {
		y0, y1 := trY(float64(r)+0.5), trY(float64(r)+1.5)
		if r < rows-1 {
			y1 += seamOverlap
		}
		// One rectangle per run of equal colours keeps SVGs small.
		for k := 0; k < cols; {
			col := colorOf(row[k])
			e := k + 1
			for e < cols && colorOf(row[e]) == col {
				e++
			}
			x0, x1 := trX(float64(k)+0.5), trX(float64(e)+0.5)
			if e < cols {
				x1 += seamOverlap
			}
			c.FillPolygon(col, rect(x0, y0, x1, y1)[:4])
			k = e
		}
	}
}

// colorBar is a plot.Plotter that draws a vertical colour scale to the
// right of the data area. Its GlyphBoxes reserve the room for it, so the
// plot's data area (and the x axis under it) shrinks to make space.
type colorBar struct {
	Palette  palette.Palette
	Min, Max float64
	Label    string
	NaN      bool // add a swatch for NaNColor
}

const (
	barGap   = 4 * vg.Millimeter // between data area and bar
	barWidth = 4 * vg.Millimeter
)

func (b *colorBar) ticks() []plot.Tick {
	return (niceTicks{}).Ticks(b.Min, b.Max)
}

// extent is the width the bar, its tick labels and its label take.
func (b *colorBar) extent(plt *plot.Plot) vg.Length {
	sty := plt.Y.Tick.Label
	var wmax vg.Length
	for _, t := range b.ticks() {
		wmax = max(wmax, sty.Width(t.Label))
	}
	if b.NaN {
		wmax = max(wmax, sty.Width("n/a"))
	}
	w := barGap + barWidth + plt.Y.Tick.Length + vg.Millimeter + wmax
	if b.Label != "" {
		w += vg.Millimeter + b.labelStyle(plt).Height(b.Label)
	}
	return w
}

func (b *colorBar) labelStyle(plt *plot.Plot) text.Style {
	sty := plt.Y.Label.TextStyle
	// Reads bottom to top like the y axis label; after the quarter turn
	// the text's top faces left, so YTop anchors its left edge.
	sty.Rotation = math.Pi / 2
	sty.XAlign, sty.YAlign = draw.XCenter, draw.YTop
	return sty
}

// GlyphBoxes implements plot.GlyphBoxer.
func (b *colorBar) GlyphBoxes(plt *plot.Plot) []plot.GlyphBox {
	return []plot.GlyphBox{{
		X: 1, Y: 0.5,
		Rectangle: vg.Rectangle{Max: vg.Point{X: b.extent(plt)}},
	}}
}

// Plot implements plot.Plotter; c is the data area, the bar goes to its right.
func (b *colorBar) Plot(c draw.Canvas, plt *plot.Plot) {
	x0 := c.Max.X + barGap
	x1 := x0 + barWidth
	y0, y1 := c.Min.Y, c.Max.Y
	if b.NaN {
		// A swatch at the bottom, one bar width high, then the scale.
		sw := barWidth
		c.FillPolygon(NaNColor, rect(x0, y0, x1, y0+sw))
		c.StrokeLines(plt.Y.LineStyle, rect(x0, y0, x1, y0+sw))
		sty := plt.Y.Tick.Label
		sty.XAlign, sty.YAlign = draw.XLeft, draw.YCenter
		c.FillText(sty, vg.Point{X: x1 + plt.Y.Tick.Length + vg.Millimeter, Y: y0 + sw/2}, "n/a")
		y0 += sw + 2*vg.Millimeter
	}
	cols := b.Palette.Colors()
	n := len(cols)
	// Colour i covers the values that cells rounds to it:
	// [min + (i-½)·Δ, min + (i+½)·Δ] with Δ = (max−min)/(n−1), clipped.
	yOf := func(v float64) vg.Length {
		return y0 + vg.Length((v-b.Min)/(b.Max-b.Min))*(y1-y0)
	}
	d := (b.Max - b.Min) / float64(n-1)
	for i, col := range cols {
		lo := math.Max(b.Min, b.Min+(float64(i)-0.5)*d)
		hi := math.Min(b.Max, b.Min+(float64(i)+0.5)*d)
		top := yOf(hi)
		if i < n-1 {
			top += seamOverlap
		}
		c.FillPolygon(col, rect(x0, yOf(lo), x1, top)[:4])
	}
	c.StrokeLines(plt.Y.LineStyle, rect(x0, y0, x1, y1))

	sty := plt.Y.Tick.Label
	sty.XAlign, sty.YAlign = draw.XLeft, draw.YCenter
	var wmax vg.Length
	for _, t := range b.ticks() {
		y := yOf(t.Value)
		c.StrokeLine2(plt.Y.Tick.LineStyle, x1, y, x1+plt.Y.Tick.Length, y)
		c.FillText(sty, vg.Point{X: x1 + plt.Y.Tick.Length + vg.Millimeter, Y: y}, t.Label)
		wmax = max(wmax, sty.Width(t.Label))
	}
	if b.Label != "" {
		x := x1 + plt.Y.Tick.Length + vg.Millimeter + wmax + vg.Millimeter
		c.FillText(b.labelStyle(plt), vg.Point{X: x, Y: (y0 + y1) / 2}, b.Label)
	}
}

// rect is the closed outline of the rectangle (x0,y0)–(x1,y1).
func rect(x0, y0, x1, y1 vg.Length) []vg.Point {
	return []vg.Point{{X: x0, Y: y0}, {X: x1, Y: y0}, {X: x1, Y: y1}, {X: x0, Y: y1}, {X: x0, Y: y0}}
}
