package plots

import (
	"errors"
	"fmt"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Method is one caching method's point: its speed-up over no caching and
// its accuracy.
type Method struct {
	Name     string
	SpeedUp  float64 // tokens/s over none's, same run
	Accuracy float64 // 0…1
}

// Pareto draws accuracy against speed-up, one labelled point per method,
// and joins the methods no other beats on both (the Pareto front). The
// speed-up axis is logarithmic when it spans a factor of 8 or more.
func Pareto(ms []Method, title string) (*plot.Plot, error) {
	return pareto(ms, title, "accuracy (%)")
}

// ParetoAgreement is Pareto with the share of answers unchanged from the
// uncached ones on the y axis (a calibrated table's settings: Accuracy
// holds that share).
func ParetoAgreement(ms []Method, title string) (*plot.Plot, error) {
	return pareto(ms, title, "answers unchanged from none's (%)")
}

func pareto(ms []Method, title, ylabel string) (*plot.Plot, error) {
	if len(ms) == 0 {
		return nil, errors.New("plots: pareto: no methods")
	}
	pts := make(plotter.XYs, len(ms))
	lo, hi := ms[0].SpeedUp, ms[0].SpeedUp
	for i, m := range ms {
		if !finite(m.SpeedUp) || m.SpeedUp <= 0 || !finite(m.Accuracy) {
			return nil, fmt.Errorf("plots: pareto: %s: speed-up %v, accuracy %v", m.Name, m.SpeedUp, m.Accuracy)
		}
		pts[i] = plotter.XY{X: m.SpeedUp, Y: 100 * m.Accuracy}
		lo, hi = min(lo, m.SpeedUp), max(hi, m.SpeedUp)
	}
	p := newPlot(title, "speed-up over none (tokens/s, same run)", ylabel)
	p.Add(plotter.NewGrid())
	leg := plot.NewLegend()
	leg.TextStyle.Font.Size = vg.Points(8)
	leg.Left, leg.Top = true, true
	if front := paretoFront(pts); len(front) > 1 {
		l, err := plotter.NewLine(front)
		if err != nil {
			return nil, err
		}
		l.LineStyle = draw.LineStyle{Color: grey, Width: vg.Points(1), Dashes: []vg.Length{vg.Points(4), vg.Points(2)}}
		p.Add(l)
		leg.Add("Pareto front", l)
	}
	// One glyph and colour per method, named in the legend to the right.
	for i, m := range ms {
		sc, err := plotter.NewScatter(plotter.XYs{pts[i]})
		if err != nil {
			return nil, err
		}
		st := style(i)
		sc.GlyphStyle = st.glyphStyle()
		sc.GlyphStyle.Radius = vg.Points(3.5)
		p.Add(sc)
		leg.Add(m.Name, sc)
	}
	p.Add(&sideLegend{Legend: leg})
	if hi >= 8*lo {
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	p.X.Padding, p.Y.Padding = vg.Points(12), vg.Points(8)
	return p, nil
}

// paretoFront returns the points no other point beats on both x and y
// (higher is better), sorted by x.
func paretoFront(pts plotter.XYs) plotter.XYs {
	s := slices.Clone(pts)
	slices.SortFunc(s, func(a, b plotter.XY) int {
		switch {
		case a.X != b.X:
			if a.X > b.X {
				return -1
			}
			return 1
		case a.Y > b.Y:
			return -1
		case a.Y < b.Y:
			return 1
		}
		return 0
	})
	var front plotter.XYs
	best := -1.0
	for _, q := range s { // fastest first: keep each that is more accurate than every faster one
		if q.Y > best {
			front = append(front, q)
			best = q.Y
		}
	}
	slices.Reverse(front)
	return front
}
