package plots

import (
	"bytes"
	"encoding/xml"
	"flag"
	"fmt"
	"image"
	imgdraw "image/draw"
	"image/png"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/dlmcache/dlmcache/lut"
)

var update = flag.Bool("update", false, "rewrite the golden images in testdata")

// Fixed data for the figures. Plain arithmetic only, so that the values
// (and the images) do not depend on the platform's math library.

// heatData is 8 layers × 24 steps: 1 in layer 1, falling with depth, and
// drifting slightly over the steps.
func heatData() [][]float64 {
	s := make([][]float64, 8)
	for l := range s {
		s[l] = make([]float64, 24)
		for t := range s[l] {
			d := float64(l) / 7
			s[l][t] = 1 - 0.2*d*d - 0.002*float64(l)*float64(t%6)
		}
	}
	return s
}

func depthTable() *lut.Table {
	t := &lut.Table{Format: lut.Format, Model: lut.ModelID{Name: "toy", NLayers: 32}, Tau: 0.97}
	means := []float64{0, 3.5, 6.2, 9.9, 0, 15.4, 19.0, 24.3, 0, 30.2}
	for i, m := range means {
		b := lut.Bin{Lo: float64(i) / 10, Hi: float64(i+1) / 10}
		if m > 0 {
			b.MeanDepth, b.Std, b.Min, b.Count = m, 0.8+float64(i%3)*0.5, int(m)-1-i%3, 16
		}
		t.Bins = append(t.Bins, b)
	}
	return t
}

func unfilledTable() *lut.Table {
	t := depthTable()
	for i := range t.Bins {
		t.Bins[i] = lut.Bin{Lo: t.Bins[i].Lo, Hi: t.Bins[i].Hi}
	}
	return t
}

func refreshData() ([]int, map[string][]float64) {
	layers := []int{17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32}
	series := map[string][]float64{}
	var cross, stale, fresh []float64
	for i := range layers {
		f := float64(i) / 15
		cross = append(cross, 0.93-0.35*f)
		stale = append(stale, 0.975-0.12*f)
		fresh = append(fresh, 0.995-0.02*f)
	}
	series["cross-request"] = cross
	series["stale within request"] = stale
	series["refreshed every R=16"] = fresh
	return layers, series
}

type figureCase struct {
	name   string
	make   func() (Figure, error)
	w, h   vg.Length
	titles []string // must appear in the SVG
}

func figureCases() []figureCase {
	return []figureCase{
		{"heatmap", func() (Figure, error) { return Heatmap(heatData(), "Prefix K/V similarity (toy)") }, Width, Height, []string{"Prefix K/V similarity (toy)"}},
		{"heatmap_nan", func() (Figure, error) {
			s := heatData()
			s[5][3], s[6][10], s[7][20] = math.NaN(), math.NaN(), math.NaN()
			return Heatmap(s, "with unmeasured cells")
		}, Width, Height, []string{"with unmeasured cells"}},
		{"heatmap_const", func() (Figure, error) {
			return Heatmap([][]float64{{1, 1, 1}, {1, 1, 1}}, "constant")
		}, Width, Height, []string{"constant"}},
		{"depth", func() (Figure, error) { return Depth(depthTable(), "Safe depth vs ratio (τ = 0.97)") }, Width, Height, []string{"Safe depth vs ratio (τ = 0.97)"}},
		{"depth_unfilled", func() (Figure, error) { return Depth(unfilledTable(), "no filled bin") }, Width, Height, []string{"no filled bin"}},
		{"convergence", func() (Figure, error) {
			return Convergence([]int{4, 8, 16, 32, 64, 128}, []float64{3.1, 1.4, 0.6, math.NaN(), 0.12, 0.1}, "Table convergence")
		}, Width, Height, []string{"Table convergence"}},
		{"sweep_tau", func() (Figure, error) {
			x := []float64{0.91, 0.92, 0.93, 0.94, 0.95, 0.96, 0.97, 0.98, 0.99}
			acc := []float64{61, 66, 70, 73, 75, 76, 76.5, 76.8, 77}
			tps := []float64{95, 90, 84, 77, 69, 60, 52, 41, 30}
			return Sweep(x, "τ", acc, tps, "Sweep over τ & <R>")
		}, Width, StackHeight, []string{"Sweep over τ &amp; &lt;R&gt;", "throughput (tokens/s)"}},
		{"sweep_refresh", func() (Figure, error) {
			x := []float64{8, 16, 32, 64}
			return Sweep(x, "refresh period R (steps)", []float64{77, 76.5, math.NaN(), 71}, []float64{40, 52, 58, 61}, "Sweep over R")
		}, Width, StackHeight, []string{"Sweep over R", "refresh period R (steps)"}},
		{"refresh", func() (Figure, error) {
			layers, series := refreshData()
			return Refresh(layers, series, "Deep-layer prefix K/V similarity")
		}, Width, Height, []string{"Deep-layer prefix K/V similarity", "cross-request", "refreshed every R=16"}},
	}
}

// TestFiguresMatchGoldenImages renders every figure to PNG and compares it with
// testdata/NAME.png; -update rewrites the goldens.
func TestFiguresMatchGoldenImages(t *testing.T) {
	forEachRendered(t, "png", func(t *testing.T, tc figureCase, got []byte) {
		golden := filepath.Join("testdata", tc.name+".png")
		if *update {
			if err := os.WriteFile(golden, got, 0o644); err != nil {
				t.Fatal(err)
			}
			return
		}
		want, err := os.ReadFile(golden)
		if err != nil {
			t.Fatalf("%v (run go test ./plots -update to create it)", err)
		}
		if n, total, err := diffPNG(got, want); err != nil || n*1000 > total {
			out := filepath.Join(t.TempDir(), tc.name+".png")
			if werr := os.WriteFile(out, got, 0o644); werr != nil {
				t.Log(werr)
			}
			if err != nil {
				t.Fatalf("%s: %v; got image written to %s", golden, err, out)
			}
			t.Fatalf("%s: %d of %d pixels differ (more than 0.1%%); got image written to %s", golden, n, total, out)
		}
	})
}

// forEachRendered renders each of figureCases in format, in a subtest of
// its name, and hands the bytes to check.
func forEachRendered(t *testing.T, format string, check func(t *testing.T, tc figureCase, raw []byte)) {
	for _, tc := range figureCases() {
		t.Run(tc.name, func(t *testing.T) {
			f, err := tc.make()
			if err != nil {
				t.Fatal(err)
			}
			raw, err := Render(f, format, tc.w, tc.h)
			if err != nil {
				t.Fatal(err)
			}
			check(t, tc, raw)
		})
	}
}

// diffPNG counts the pixels of two PNGs that differ by more than a few
// levels in some channel (font rasterisation may move by a level or so
// across platforms; a changed figure moves far more pixels).
func diffPNG(a, b []byte) (n, total int, err error) {
	ia, err := png.Decode(bytes.NewReader(a))
	if err != nil {
		return 0, 0, err
	}
	ib, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		return 0, 0, err
	}
	if ia.Bounds() != ib.Bounds() {
		return 0, 0, fmt.Errorf("size %v, golden %v", ia.Bounds(), ib.Bounds())
	}
	pa, pb := rgba(ia), rgba(ib)
	const tol = 8
	for i := 0; i < len(pa.Pix); i += 4 {
		for k := range 4 {
			if d := int(pa.Pix[i+k]) - int(pb.Pix[i+k]); d > tol || d < -tol {
				n++
				break
			}
		}
	}
	return n, len(pa.Pix) / 4, nil
}

func rgba(img image.Image) *image.RGBA {
	if m, ok := img.(*image.RGBA); ok {
		return m
	}
	m := image.NewRGBA(img.Bounds())
	imgdraw.Draw(m, m.Bounds(), img, img.Bounds().Min, imgdraw.Src)
	return m
}

// TestGoldenDetectsChange makes sure the comparison is not vacuous: a
// figure with other data must not match the golden image.
func TestGoldenDetectsChange(t *testing.T) {
	s := heatData()
	s[0][0] = 0.5 // one cell far off: recolours the whole map
	p, err := Heatmap(s, "Prefix K/V similarity (toy)")
	if err != nil {
		t.Fatal(err)
	}
	got, err := Render(p, "png", Width, Height)
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join("testdata", "heatmap.png"))
	if err != nil {
		t.Skip("no golden yet:", err)
	}
	n, total, err := diffPNG(got, want)
	if err != nil {
		t.Fatal(err)
	}
	if n*1000 <= total {
		t.Fatalf("changed heatmap differs in only %d of %d pixels", n, total)
	}
}

// TestSVG checks that every figure renders as well-formed XML that names
// the figure's title (escaped where needed).
func TestSVG(t *testing.T) {
	forEachRendered(t, "svg", func(t *testing.T, tc figureCase, raw []byte) {
		dec := xml.NewDecoder(bytes.NewReader(raw))
		root := ""
		for {
			tok, err := dec.Token()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("not well-formed XML: %v", err)
			}
			if se, ok := tok.(xml.StartElement); ok && root == "" {
				root = se.Name.Local
			}
		}
		if root != "svg" {
			t.Errorf("root element %q, want svg", root)
		}
		for _, s := range tc.titles {
			if !bytes.Contains(raw, []byte(s)) {
				t.Errorf("SVG does not contain %q", s)
			}
		}
	})
}

func TestSaveWritesPNGOrSVGByExtension(t *testing.T) {
	dir := t.TempDir()
	p, err := Convergence([]int{1, 2, 4}, []float64{2, 1, 0.5}, "convergence")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a.png", "b.SVG"} {
		path := filepath.Join(dir, name)
		if err := Save(p, path, Width, Height); err != nil {
			t.Fatal(err)
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(name, ".png") {
			if _, err := png.Decode(bytes.NewReader(raw)); err != nil {
				t.Errorf("%s: %v", name, err)
			}
		} else if !bytes.Contains(raw, []byte("<svg")) {
			t.Errorf("%s is not SVG", name)
		}
	}
	st, err := Sweep([]float64{8, 16, 32}, "R", []float64{1, 2, 3}, []float64{3, 2, 1}, "sweep")
	if err != nil {
		t.Fatal(err)
	}
	if err := SaveStack(st.Plots, filepath.Join(dir, "c.png"), Width, StackHeight); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct{ path, want string }{
		{filepath.Join(dir, "x.pdf"), `unsupported extension ".pdf"`},
		{filepath.Join(dir, "x.jpg"), `unsupported extension ".jpg"`},
		{filepath.Join(dir, "x"), "no file extension"},
		{filepath.Join(dir, "missing", "x.png"), "no such file or directory"},
	} {
		err := Save(p, tc.path, Width, Height)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Save(%s) = %v, want an error containing %q", tc.path, err, tc.want)
		}
	}
	if err := Save(p, filepath.Join(dir, "zero.png"), 0, Height); err == nil || !strings.Contains(err.Error(), "size") {
		t.Errorf("zero width: %v", err)
	}
	if err := SaveStack(nil, filepath.Join(dir, "e.png"), Width, Height); err == nil {
		t.Error("SaveStack with no plots succeeded")
	}

	// Atomic: only the finished files are left, no temporaries.
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if got := strings.Join(names, " "); got != "a.png b.SVG c.png" {
		t.Errorf("directory holds %q, want only the three figures", got)
	}
}

// TestSaveKeepsOldFileOnError: a failed render leaves an existing file alone.
func TestSaveKeepsOldFileOnError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fig.png")
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Save(panicky{}, path, Width, Height); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("Save of a panicking figure = %v, want an error naming the panic", err)
	}
	if raw, _ := os.ReadFile(path); string(raw) != "old" {
		t.Errorf("file now holds %q", raw)
	}
}

type panicky struct{}

func (panicky) Draw(draw.Canvas) { panic("boom") }

func TestFiguresRefuseBadInput(t *testing.T) {
	nan := math.NaN()
	noBins := &lut.Table{Model: lut.ModelID{NLayers: 4}}
	badLayers := depthTable()
	badLayers.Model.NLayers = 0
	for _, tc := range []struct {
		name string
		err  func() error
		want string
	}{
		{"heatmap empty", func() error { _, err := Heatmap(nil, ""); return err }, "no similarity data"},
		{"heatmap no steps", func() error { _, err := Heatmap([][]float64{{}}, ""); return err }, "no similarity data"},
		{"heatmap ragged", func() error { _, err := Heatmap([][]float64{{1, 1}, {1}}, ""); return err }, "layer 2 has 1 steps, layer 1 has 2"},
		{"heatmap all NaN", func() error { _, err := Heatmap([][]float64{{nan}, {nan}}, ""); return err }, "every similarity is NaN"},
		{"heatmap Inf", func() error { _, err := Heatmap([][]float64{{1, math.Inf(1)}}, ""); return err }, "layer 1 step 2 is +Inf"},
		{"depth nil", func() error { _, err := Depth(nil, ""); return err }, "no bins"},
		{"depth no bins", func() error { _, err := Depth(noBins, ""); return err }, "no bins"},
		{"depth no layers", func() error { _, err := Depth(badLayers, ""); return err }, "has 0 layers"},
		{"convergence empty", func() error { _, err := Convergence(nil, nil, ""); return err }, "no points"},
		{"convergence lengths", func() error { _, err := Convergence([]int{1, 2}, []float64{1}, ""); return err }, "2 values of N but 1 L1"},
		{"convergence N", func() error { _, err := Convergence([]int{0}, []float64{1}, ""); return err }, "N[0] = 0"},
		{"convergence negative", func() error { _, err := Convergence([]int{1}, []float64{-1}, ""); return err }, "L1[0] = -1"},
		{"convergence all NaN", func() error { _, err := Convergence([]int{1, 2}, []float64{nan, nan}, ""); return err }, "every value is NaN"},
		{"sweep empty", func() error { _, err := Sweep(nil, "τ", nil, nil, ""); return err }, "no points"},
		{"sweep lengths", func() error { _, err := Sweep([]float64{1, 2}, "τ", []float64{1}, []float64{1, 2}, ""); return err }, "2 parameter values, 1 accuracies and 2 throughputs"},
		{"sweep NaN x", func() error { _, err := Sweep([]float64{nan}, "R", []float64{1}, []float64{1}, ""); return err }, "R[0] = NaN"},
		{"refresh no layers", func() error { _, err := Refresh(nil, map[string][]float64{"a": {}}, ""); return err }, "no x values"},
		{"refresh no series", func() error { _, err := Refresh([]int{1}, nil, ""); return err }, "no series"},
		{"refresh lengths", func() error { _, err := Refresh([]int{1, 2}, map[string][]float64{"a": {1}}, ""); return err }, `series "a" has 1 values for 2 x values`},
		{"refresh all NaN", func() error { _, err := Refresh([]int{1}, map[string][]float64{"a": {nan}}, ""); return err }, "every value of every series is NaN"},
		{"render nil", func() error { _, err := Render(nil, "png", Width, Height); return err }, "nil figure"},
		{"render format", func() error { _, err := Render(&Stack{}, "eps", Width, Height); return err }, `unsupported format "eps"`},
	} {
		err := tc.err()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.want)
		}
	}
}

// TestRefreshOrder: the figure does not depend on map iteration order.
func TestRefreshOrder(t *testing.T) {
	layers, series := refreshData()
	var first []byte
	for i := range 5 {
		p, err := Refresh(layers, series, "order")
		if err != nil {
			t.Fatal(err)
		}
		raw, err := Render(p, "svg", Width, Height)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = raw
		} else if !bytes.Equal(raw, first) {
			t.Fatal("two renderings of the same data differ")
		}
	}
}

// tickCase is a ticker's range and the labels it should put on it,
// comma-separated.
type tickCase struct {
	lo, hi float64
	want   string
}

// checkTicks checks tk's labels on each case's range; with majorOnly the
// ticks without a label (minor ticks) are left out of the list.
func checkTicks(t *testing.T, tk plot.Ticker, majorOnly bool, cases []tickCase) {
	t.Helper()
	for _, tc := range cases {
		var s []string
		for _, k := range tk.Ticks(tc.lo, tc.hi) {
			if !majorOnly || k.Label != "" {
				s = append(s, k.Label)
			}
		}
		if got := strings.Join(s, ","); got != tc.want {
			t.Errorf("ticks on [%g, %g]: %s, want %s", tc.lo, tc.hi, got, tc.want)
		}
	}
}

func TestIntTicks(t *testing.T) {
	checkTicks(t, intTicks{}, true, []tickCase{
		{0.5, 8.5, "1,2,3,4,5,6,7,8"},
		{0.5, 32.5, "1,5,10,15,20,25,30"},
		{0, 32, "0,5,10,15,20,25,30"},
		{0.5, 128.5, "1,20,40,60,80,100,120"},
		{16.5, 32.5, "18,20,22,24,26,28,30,32"},
		{0.2, 0.8, ""},
	})
}

func TestNiceTicks(t *testing.T) {
	checkTicks(t, niceTicks{}, false, []tickCase{
		{0.73, 1, "0.75,0.80,0.85,0.90,0.95,1.00"},
		{0, 1, "0.0,0.2,0.4,0.6,0.8,1.0"},
		{0.91, 0.99, "0.92,0.94,0.96,0.98"},
		{0.995, 1.005, "0.996,0.998,1.000,1.002,1.004"},
		{30, 95, "30,40,50,60,70,80,90"},
		{0, 2.5, "0.0,0.5,1.0,1.5,2.0,2.5"},
		{0, 3000, "0,500,1000,1500,2000,2500,3000"},
		{1, 1, ""},
	})
}

var _ Figure = (*plot.Plot)(nil)

func TestParetoFront(t *testing.T) {
	pts := plotter.XYs{{X: 1, Y: 60}, {X: 2.5, Y: 60}, {X: 2.5, Y: 5}, {X: 3.3, Y: 60}, {X: 29, Y: 45}, {X: 38, Y: 45}, {X: 0.8, Y: 61}}
	got := paretoFront(pts)
	want := plotter.XYs{{X: 0.8, Y: 61}, {X: 3.3, Y: 60}, {X: 38, Y: 45}}
	if !slices.Equal(got, want) {
		t.Errorf("front %v, want %v", got, want)
	}
	p, err := Pareto([]Method{{"none", 1, 0.6}, {"block", 29, 0.45}, {"bicache", 2.5, 0.6}}, "t")
	if err != nil {
		t.Fatal(err)
	}
	if err := Save(p, filepath.Join(t.TempDir(), "p.png"), Width, Height); err != nil {
		t.Fatal(err)
	}
	if _, err := Pareto([]Method{{"none", 0, 0.6}}, "t"); err == nil {
		t.Error("a zero speed-up: no error")
	}
}
