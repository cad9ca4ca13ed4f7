package plots

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/dlmcache/dlmcache/internal/atomicfile"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Default figure sizes: small enough for a PNG in a markdown page (480×336
// pixels at vgimg's 96 dpi), large enough for the labels to read.
const (
	Width       = 5 * vg.Inch
	Height      = 3.5 * vg.Inch
	StackHeight = 5 * vg.Inch // two panels stacked (Sweep)
)

// Figure is something Save can draw: a *plot.Plot or a *Stack.
type Figure interface {
	Draw(c draw.Canvas)
}

// Stack is several plots drawn top to bottom in equal rows, their data
// areas aligned (plot.Align) so that panels sharing an x range line up.
type Stack struct {
	Plots []*plot.Plot // top to bottom
}

// Draw implements Figure.
func (s *Stack) Draw(c draw.Canvas) {
	if len(s.Plots) == 0 {
		return
	}
	rows := make([][]*plot.Plot, len(s.Plots))
	for i, p := range s.Plots {
		rows[i] = []*plot.Plot{p}
	}
	t := draw.Tiles{Rows: len(rows), Cols: 1, PadY: vg.Millimeter}
	cs := plot.Align(rows, t, c)
	for i, p := range s.Plots {
		if p != nil {
			p.Draw(cs[i][0])
		}
	}
}

// formatOf maps a file name to the vg format name, refusing anything but
// PNG and SVG.
func formatOf(path string) (string, error) {
	switch ext := strings.ToLower(filepath.Ext(path)); ext {
	case ".png":
		return "png", nil
	case ".svg":
		return "svg", nil
	case "":
		return "", fmt.Errorf("plots: %s: no file extension; want .png or .svg", path)
	default:
		return "", fmt.Errorf("plots: %s: unsupported extension %q; want .png or .svg", path, ext)
	}
}

// Render draws f on a w×h canvas and returns the encoded image; format is
// "png" or "svg".
func Render(f Figure, format string, w, h vg.Length) (_ []byte, err error) {
	if f == nil {
		return nil, errors.New("plots: nil figure")
	}
	if !(w > 0 && h > 0) {
		return nil, fmt.Errorf("plots: figure size %v×%v must be positive", w, h)
	}
	if format != "png" && format != "svg" {
		return nil, fmt.Errorf("plots: unsupported format %q; want png or svg", format)
	}
	c, err := draw.NewFormattedCanvas(w, h, format)
	if err != nil {
		return nil, err
	}
	// gonum/plot reports some bad inputs (e.g. an empty palette) by
	// panicking; a figure that cannot be drawn is an error here.
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("plots: drawing the figure: %v", r)
		}
	}()
	f.Draw(draw.New(c))
	var buf bytes.Buffer
	if _, err := c.WriteTo(&buf); err != nil {
		return nil, fmt.Errorf("plots: encoding %s: %w", format, err)
	}
	return buf.Bytes(), nil
}

// Save writes f to path as PNG or SVG (chosen by the extension, case
// insensitive), w×h in size. The file appears complete or not at all: the
// image is written to a temporary file in the same directory and renamed.
func Save(f Figure, path string, w, h vg.Length) error {
	format, err := formatOf(path)
	if err != nil {
		return err
	}
	raw, err := Render(f, format, w, h)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := atomicfile.WriteFile(path, raw, 0o644); err != nil {
		return fmt.Errorf("plots: writing %s: %w", path, err)
	}
	return nil
}

// SaveStack writes plots stacked top to bottom (see Stack) to path.
func SaveStack(plots []*plot.Plot, path string, w, h vg.Length) error {
	if len(plots) == 0 {
		return fmt.Errorf("plots: %s: no plots to stack", path)
	}
	return Save(&Stack{Plots: plots}, path, w, h)
}

// intTicks marks integers with a 1-2-5 step chosen so that at most about
// eight carry labels: multiples of the step, and 1 when the range starts
// there (layers and steps count from 1) and the step is 5 or more.
type intTicks struct{}

func (intTicks) Ticks(lo, hi float64) []plot.Tick {
	first, last := int(math.Ceil(lo-1e-9)), int(math.Floor(hi+1e-9))
	if last < first {
		return nil
	}
	step := 1
	for _, s := range []int{1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000, 2000, 5000, 10000} {
		step = s
		if (last-first)/s+1 <= 8 {
			break
		}
	}
	var ts []plot.Tick
	for v := first; v <= last; v++ {
		switch {
		case v%step == 0:
			ts = append(ts, plot.Tick{Value: float64(v), Label: strconv.Itoa(v)})
		case v == 1 && first == 1 && step >= 5:
			ts = append(ts, plot.Tick{Value: 1, Label: "1"})
		case step <= 10:
			ts = append(ts, plot.Tick{Value: float64(v)}) // minor
		}
	}
	return ts
}

// niceTicks labels a 1-2-2.5-5 multiple of a power of ten, the smallest
// step that leaves at most seven labels; labels carry as many decimals as
// the step needs (gonum's DefaultTicks often labels only two or three
// values, and repeats a label when the range is narrow).
type niceTicks struct{}

func (niceTicks) Ticks(lo, hi float64) []plot.Tick {
	if !(hi > lo) || !finite(lo) || !finite(hi) {
		return nil
	}
	e := math.Floor(math.Log10(hi-lo)) - 2
	for ; e < 400; e++ {
		for _, m := range []float64{1, 2, 2.5, 5} {
			step := m * math.Pow(10, e)
			first, last := math.Ceil(lo/step-1e-9), math.Floor(hi/step+1e-9)
			if last-first+1 > 7 {
				continue
			}
			prec := 0
			if e < 0 {
				prec = int(-e)
			}
			if m == 2.5 {
				prec++
			}
			var ts []plot.Tick
			for i := first; i <= last; i++ {
				v := i * step
				if v == 0 {
					v = 0 // not -0
				}
				ts = append(ts, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', prec, 64)})
			}
			return ts
		}
	}
	return nil
}

// finite reports whether v is neither NaN nor ±Inf.
func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// newPlot is a plot with the title and axis labels set.
func newPlot(title, xlabel, ylabel string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xlabel
	p.Y.Label.Text = ylabel
	return p
}
