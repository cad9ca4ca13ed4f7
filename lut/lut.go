package lut

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/dlmcache/dlmcache/internal/atomicfile"
	"github.com/dlmcache/dlmcache/regime"
)

// Format is the value of a table's "format" field: v3 adds, per bin and
// answer-length class, the method calibration chose.
const Format = "dlmcache.lut/v3"

// FormatV2 (calibrated depths, no method choices) and FormatV1 (no block
// length, no calibration) are still read.
const (
	FormatV2 = "dlmcache.lut/v2"
	FormatV1 = "dlmcache.lut/v1"
)

// ModelID identifies the model a table was profiled on.
type ModelID struct {
	Name        string `json:"name"`
	NLayers     int    `json:"n_layers"`
	Fingerprint string `json:"fingerprint"`
	// Arch is the model's architecture ("llada", "dream", "llada-moe",
	// "llada2"; model.Config.ArchName); empty in files written before it
	// was recorded.
	Arch string `json:"arch,omitempty"`
}

// Bin is one shared-prefix-ratio interval [Lo, Hi) and the safe depths of
// the requests profiled in it.
type Bin struct {
	Lo        float64 `json:"lo"`
	Hi        float64 `json:"hi"`
	MeanDepth float64 `json:"mean_depth"`
	Std       float64 `json:"std"`
	Min       int     `json:"min"`
	Count     int     `json:"count"`
	// Calibrated holds, per deep source ("store", "request"), the depth
	// calibration chose against the model's uncached answers (v2).
	Calibrated map[string]*BinCalibration `json:"calibrated,omitempty"`
	// Choices holds, per answer-length class, the method calibration chose
	// (v3).
	Choices []*Choice `json:"choices,omitempty"`
}

// Table maps a shared-prefix ratio r to a safe depth d_r (the number of
// leading layers whose prefix K/V may come from the cross-request store).
type Table struct {
	Format string  `json:"format"`
	Model  ModelID `json:"model"`
	Tau    float64 `json:"tau"`
	// Similarity is the statistic depths were computed from ("kv": the
	// whole prefix's K⊕V cosine, the design's; "kv-row-min": the worst
	// prefix row's). Empty in tables written before it was recorded: "kv".
	Similarity string `json:"similarity,omitempty"`
	// Regime is what the table was profiled and calibrated in: gen
	// length, steps and block length (v2; 0 in v1 tables: unknown, and
	// its key left out).
	regime.Regime
	// Classes are the answer-length classes the bins' choices are for (v3).
	Classes []Class `json:"classes,omitempty"`
	Bins    []Bin   `json:"bins"`
	// Guide, in a v3 table calibrated with a guide (calibrate --guide),
	// is the guided decoder's guide the guided settings were measured
	// with: a table whose choices decode guided must name it, and is
	// served only with that guide (CheckGuide). Tables without it read
	// as before.
	Guide *ModelID `json:"guide,omitempty"`
	// Calibration, when present, says how the bins' calibrated depths were
	// chosen (dlmcache calibrate).
	Calibration *Calibration   `json:"calibration,omitempty"`
	Created     time.Time      `json:"created"`
	Source      map[string]any `json:"source,omitempty"`
}

// Statistic chooses how a bin's depths become the served depth.
type Statistic string

const (
	Mean    Statistic = "mean"     // floor(mean): the paper's choice
	MeanStd Statistic = "mean-std" // floor(mean − std): more conservative
	MinStat Statistic = "min"      // the smallest depth seen: most conservative
)

// Sample is one profiled request's outcome.
type Sample struct {
	Ratio float64
	Depth int
}

// Build makes a table from per-request safe depths. edges are the bin
// boundaries (len(bins)+1, increasing); a sample outside [edges[0],
// edges[last]) is dropped. Empty bins are kept with Count 0 so that callers
// can report them.
func Build(model ModelID, tau float64, edges []float64, samples []Sample) (*Table, error) {
	if err := CheckTau(tau); err != nil {
		return nil, err
	}
	if len(edges) < 2 {
		return nil, fmt.Errorf("lut: need at least two bin edges, got %d", len(edges))
	}
	for i := 1; i < len(edges); i++ {
		if !(edges[i] > edges[i-1]) {
			return nil, fmt.Errorf("lut: bin edges must increase: %v", edges)
		}
	}
	t := &Table{Format: Format, Model: model, Tau: tau, Created: time.Now().UTC().Truncate(time.Second)}
	depths := make([][]int, len(edges)-1)
	for _, s := range samples {
		i := sort.SearchFloat64s(edges, s.Ratio)
		// edges[i-1] <= r < edges[i], or r == edges[i] → belongs to bin i.
		if i < len(edges) && edges[i] == s.Ratio {
			i++
		}
		i--
		if i < 0 || i >= len(depths) {
			continue
		}
		depths[i] = append(depths[i], s.Depth)
	}
	for i, ds := range depths {
		b := Bin{Lo: edges[i], Hi: edges[i+1], Count: len(ds)}
		if len(ds) > 0 {
			var sum float64
			b.Min = ds[0]
			for _, d := range ds {
				sum += float64(d)
				b.Min = min(b.Min, d)
			}
			b.MeanDepth = sum / float64(len(ds))
			var ss float64
			for _, d := range ds {
				ss += (float64(d) - b.MeanDepth) * (float64(d) - b.MeanDepth)
			}
			b.Std = math.Sqrt(ss / float64(len(ds)))
		}
		t.Bins = append(t.Bins, b)
	}
	return t, nil
}

// CheckTau accepts τ in (0, 1].
func CheckTau(tau float64) error {
	if !(tau > 0 && tau <= 1) {
		return fmt.Errorf("τ must be in (0, 1], got %v", tau)
	}
	return nil
}

// Lookup is the depth served for ratio r, and whether r was clamped to the
// nearest filled bin because it lies outside the profiled range (or in an
// empty bin).
func (t *Table) Lookup(r float64, stat Statistic) (depth int, clamped bool) {
	best, bestDist := t.nearest(r)
	if best < 0 {
		return 1, true
	}
	return t.Bins[best].Depth(stat, t.Model.NLayers), bestDist > 0
}

// nearest is the filled bin closest to r and its distance (0 inside it);
// -1 when no bin is filled.
func (t *Table) nearest(r float64) (int, float64) { return t.nearestWhere(r, Bin.Filled) }

// nearestWhere is the bin closest to r among those ok accepts, and its
// distance (0 inside it); -1 when ok accepts none. The last bin holds its
// upper edge.
func (t *Table) nearestWhere(r float64, ok func(Bin) bool) (int, float64) {
	best, bestDist := -1, math.Inf(1)
	for i, b := range t.Bins {
		if !ok(b) {
			continue
		}
		var dist float64
		switch {
		case r < b.Lo:
			dist = b.Lo - r
		case r >= b.Hi && !(i == len(t.Bins)-1 && r == b.Hi):
			dist = r - b.Hi
		}
		if dist < bestDist {
			best, bestDist = i, dist
		}
	}
	return best, bestDist
}

// Depth is the bin's served depth under stat, in [1, nLayers] (layer 1's
// K/V are projections of the embeddings, so depth ≥ 1 always holds).
func (b Bin) Depth(stat Statistic, nLayers int) int {
	var d float64
	switch stat {
	case MeanStd:
		d = b.MeanDepth - b.Std
	case MinStat:
		d = float64(b.Min)
	default:
		d = b.MeanDepth
	}
	v := int(math.Floor(d + 1e-9))
	if nLayers > 0 {
		v = min(v, nLayers)
	}
	return max(v, 1)
}

// L1 is the mean absolute difference of the two tables' depths over the
// bins both have filled (same edges required).
func L1(a, b *Table, stat Statistic) (float64, error) {
	if len(a.Bins) != len(b.Bins) {
		return 0, fmt.Errorf("lut: tables have %d and %d bins", len(a.Bins), len(b.Bins))
	}
	var sum float64
	n := 0
	for i := range a.Bins {
		x, y := a.Bins[i], b.Bins[i]
		if math.Abs(x.Lo-y.Lo) > 1e-9 || math.Abs(x.Hi-y.Hi) > 1e-9 {
			return 0, fmt.Errorf("lut: bin %d is [%g,%g) in one table and [%g,%g) in the other", i, x.Lo, x.Hi, y.Lo, y.Hi)
		}
		if x.Count == 0 || y.Count == 0 {
			continue
		}
		sum += math.Abs(float64(x.Depth(stat, a.Model.NLayers) - y.Depth(stat, b.Model.NLayers)))
		n++
	}
	if n == 0 {
		return 0, errors.New("lut: the tables share no filled bin")
	}
	return sum / float64(n), nil
}

// Check refuses a table that was profiled on another model.
func (t *Table) Check(name string, nLayers int, fingerprint string) error {
	if t.Model.NLayers != nLayers || t.Model.Fingerprint != fingerprint {
		return fmt.Errorf("table is for model %s (%d layers, fingerprint %s), but the model is %s (%d layers, fingerprint %s)",
			t.Model.Name, t.Model.NLayers, t.Model.Fingerprint, name, nLayers, fingerprint)
	}
	return nil
}

// Read loads and validates a table.
func Read(path string) (*Table, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	t, err := Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// Parse decodes and validates table JSON.
func Parse(raw []byte) (*Table, error) {
	var t Table
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&t); err != nil {
		return nil, fmt.Errorf("not a table: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("data after the table's JSON object")
	}
	if t.GenLength < 0 || t.Steps < 0 || t.BlockLength < 0 {
		return nil, fmt.Errorf("regime gen_length %d, steps %d, block_length %d: want positive values (or 0: not compared)", t.GenLength, t.Steps, t.BlockLength)
	}
	if t.Format != Format && t.Format != FormatV2 && t.Format != FormatV1 {
		return nil, fmt.Errorf("format %q, want %q (or %q, %q)", t.Format, Format, FormatV2, FormatV1)
	}
	if err := CheckTau(t.Tau); err != nil {
		return nil, err
	}
	if t.Model.NLayers <= 0 {
		return nil, fmt.Errorf("model.n_layers must be positive")
	}
	if len(t.Bins) == 0 {
		return nil, fmt.Errorf("no bins")
	}
	for i, b := range t.Bins {
		if !(b.Hi > b.Lo) || (i > 0 && b.Lo < t.Bins[i-1].Hi-1e-9) {
			return nil, fmt.Errorf("bin %d [%g,%g) is empty or overlaps the one before", i, b.Lo, b.Hi)
		}
		if b.Count < 0 || b.MeanDepth < 0 || b.MeanDepth > float64(t.Model.NLayers) {
			return nil, fmt.Errorf("bin %d: mean depth %g outside [0, %d]", i, b.MeanDepth, t.Model.NLayers)
		}
		for src, c := range b.Calibrated {
			if c == nil || c.Depth < 0 || c.Depth > t.Model.NLayers {
				return nil, fmt.Errorf("bin %d: calibrated depth for %s outside [0, %d]", i, src, t.Model.NLayers)
			}
		}
	}
	if err := t.checkChoices(); err != nil {
		return nil, err
	}
	return &t, nil
}

// Write stores the table atomically (temp file + rename), in the current
// format.
func (t *Table) Write(path string) error {
	t.Format = Format
	raw, err := json.MarshalIndent(t, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(path, append(raw, '\n'), 0o644)
}

// SimilarityName is the statistic the depths came from, "kv" for tables
// written before it was recorded.
func (t *Table) SimilarityName() string {
	if t.Similarity == "" {
		return "kv"
	}
	return t.Similarity
}

// String renders the table for people.
func (t *Table) String() string {
	var sb strings.Builder
	arch := ""
	if t.Model.Arch != "" {
		arch = t.Model.Arch + ", "
	}
	fmt.Fprintf(&sb, "model %s (%s%d layers, fingerprint %s)  τ=%g (%s)  gen_length=%d steps=%d block_length=%d\n",
		t.Model.Name, arch, t.Model.NLayers, t.Model.Fingerprint, t.Tau, t.SimilarityName(), t.GenLength, t.Steps, t.BlockLength)
	cosine := !t.Chooses() || slices.ContainsFunc(t.Bins, func(b Bin) bool { return b.Count > 0 })
	if cosine {
		fmt.Fprintf(&sb, "%-13s %6s %6s %5s %5s %7s\n", "ratio", "depth", "mean", "std", "min", "count")
	}
	for _, b := range t.Bins {
		if !cosine {
			break
		}
		if b.Count == 0 {
			fmt.Fprintf(&sb, "[%.2f, %.2f) %6s %6s %5s %5s %7d  (no cosine samples)\n", b.Lo, b.Hi, "-", "-", "-", "-", 0)
			continue
		}
		fmt.Fprintf(&sb, "[%.2f, %.2f) %6d %6.2f %5.2f %5d %7d\n", b.Lo, b.Hi, b.Depth(Mean, t.Model.NLayers), b.MeanDepth, b.Std, b.Min, b.Count)
	}
	if g := t.Guide; g != nil {
		fmt.Fprintf(&sb, "guide %s (%s, %d layers, fingerprint %s): the guided settings' answers and speeds were measured with it, and serving them needs it\n",
			g.Name, cmp.Or(g.Arch, "autoregressive"), g.NLayers, g.Fingerprint)
	}
	t.writeCalibration(&sb)
	t.writeChoices(&sb)
	return sb.String()
}
