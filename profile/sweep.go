package profile

import (
	"context"
	"fmt"
	"sort"

	"github.com/dlmcache/dlmcache/lut"
	"github.com/dlmcache/dlmcache/model"
	"github.com/dlmcache/dlmcache/model/sample"
)

// ConvergencePoint is the L1 distance between the table built from the
// first N requests of every bin and the one built from the first N-step.
type ConvergencePoint struct {
	N  int     `json:"n"`
	L1 float64 `json:"l1"`
}

// Convergence rebuilds the table from the first N requests per bin for
// N = step, 2·step, … and measures how far each table moved from the one
// before (the paper's analysis of how many requests a bin needs). stable is
// the first N after which the distance stays ≤ eps, or 0 if it never does.
func Convergence(recs []Record, info RunInfo, tau float64, sim Similarity, stat lut.Statistic, step int, eps float64) (pts []ConvergencePoint, stable int, err error) {
	if step <= 0 {
		return nil, 0, fmt.Errorf("step must be positive, got %d", step)
	}
	if err := lut.CheckTau(tau); err != nil {
		return nil, 0, err
	}
	// Requests in file order (the order they were sampled in), per bin.
	order := map[string]int{}
	for _, r := range recs {
		if _, ok := order[r.RequestID]; !ok {
			order[r.RequestID] = len(order)
		}
	}
	if err := sim.Available(recs); err != nil {
		return nil, 0, err
	}
	ds := Depths(recs, tau, sim)
	sort.Slice(ds, func(a, b int) bool { return order[ds[a].ID] < order[ds[b].ID] })
	edges := info.Edges
	perBin := make([][]lut.Sample, len(edges)-1)
	for _, d := range ds {
		for i := 0; i+1 < len(edges); i++ {
			if d.Ratio >= edges[i] && (d.Ratio < edges[i+1] || i+2 == len(edges) && d.Ratio == edges[i+1]) {
				perBin[i] = append(perBin[i], lut.Sample{Ratio: d.Ratio, Depth: d.Depth})
				break
			}
		}
	}
	maxN := 0
	for _, b := range perBin {
		maxN = max(maxN, len(b))
	}
	build := func(n int) (*lut.Table, error) {
		var s []lut.Sample
		for _, b := range perBin {
			s = append(s, b[:min(n, len(b))]...)
		}
		return lut.Build(info.Model, tau, edges, s)
	}
	prev, err := build(step)
	if err != nil {
		return nil, 0, err
	}
	for n := 2 * step; n <= maxN; n += step {
		cur, err := build(n)
		if err != nil {
			return nil, 0, err
		}
		d, err := lut.L1(prev, cur, stat)
		if err != nil {
			return nil, 0, err
		}
		pts = append(pts, ConvergencePoint{N: n, L1: d})
		prev = cur
	}
	for i := range pts {
		ok := true
		for _, p := range pts[i:] {
			ok = ok && p.L1 <= eps
		}
		if ok {
			stable = pts[i].N
			break
		}
	}
	if len(pts) == 0 {
		return nil, 0, fmt.Errorf("bins hold at most %d requests: need at least %d for one comparison at step %d", maxN, 2*step, step)
	}
	return pts, stable, nil
}

// RefreshPicture is, per layer, the mean similarity of the prefix's K/V to
// the ones the full request has at each step, when they are
//
//	Cross:     taken from the prefix run alone (reuse across requests),
//	Stale:     computed at the request's first step and reused after,
//	Refreshed: recomputed every R steps and reused in between.
type RefreshPicture struct {
	Layers    []int     `json:"layers"` // 1-based
	Cross     []float64 `json:"cross_request"`
	Stale     []float64 `json:"stale"`
	Refreshed []float64 `json:"refreshed"`
	// The same, by the worst prefix row's cosine (mean over steps of the
	// per-step minimum).
	CrossRowMin     []float64 `json:"cross_request_row_min"`
	StaleRowMin     []float64 `json:"stale_row_min"`
	RefreshedRowMin []float64 `json:"refreshed_row_min"`
	R               int       `json:"refresh"`
}

// MeasureRefresh runs one request with no caching, keeps the prefix K/V of
// every layer at every step, and scores the three reuse strategies.
func MeasureRefresh(ctx context.Context, m *model.Network, prompt []int32, prefixLen int, o sample.GenOptions, R int) (*RefreshPicture, error) {
	if R <= 0 {
		return nil, fmt.Errorf("refresh period must be positive, got %d", R)
	}
	cached := &kvCapture{b: m.Backend, m: prefixLen}
	if _, err := m.Forward(model.Input{Tokens: prompt[:prefixLen]}, cached); err != nil {
		return nil, err
	}
	var steps []*kvCapture
	p := &stepCapture{b: m.Backend, m: prefixLen, each: func(_ int, c *kvCapture) { steps = append(steps, c) }}
	if _, err := sample.Generate(ctx, m, prompt, prefixLen, o, p); err != nil {
		return nil, err
	}
	L := len(m.Blocks)
	pic := &RefreshPicture{R: R}
	for _, s := range pic.series() {
		*s = make([]float64, L)
	}
	n := float64(len(steps))
	for l := 0; l < L; l++ {
		pic.Layers = append(pic.Layers, l+1)
		for t, ref := range steps {
			last := steps[t-t%R]
			c := similarity(l+1, t+1, prefixLen, cached.k[l], cached.v[l], ref.k[l], ref.v[l])
			s := similarity(l+1, t+1, prefixLen, steps[0].k[l], steps[0].v[l], ref.k[l], ref.v[l])
			r := similarity(l+1, t+1, prefixLen, last.k[l], last.v[l], ref.k[l], ref.v[l])
			pic.Cross[l] += c.KV / n
			pic.Stale[l] += s.KV / n
			pic.Refreshed[l] += r.KV / n
			pic.CrossRowMin[l] += c.KVRowMin / n
			pic.StaleRowMin[l] += s.KVRowMin / n
			pic.RefreshedRowMin[l] += r.KVRowMin / n
		}
	}
	return pic, nil
}

// series lists the picture's per-layer series.
func (a *RefreshPicture) series() []*[]float64 {
	return []*[]float64{&a.Cross, &a.Stale, &a.Refreshed, &a.CrossRowMin, &a.StaleRowMin, &a.RefreshedRowMin}
}

// Add accumulates b into a (for averaging over requests).
func (a *RefreshPicture) Add(b *RefreshPicture) {
	if a.Layers == nil {
		*a = RefreshPicture{Layers: b.Layers, R: b.R}
		for _, s := range a.series() {
			*s = make([]float64, len(b.Layers))
		}
	}
	bs := b.series()
	for j, s := range a.series() {
		for i := range *s {
			(*s)[i] += (*bs[j])[i]
		}
	}
}

// Scale divides every series by n.
func (a *RefreshPicture) Scale(n float64) {
	for _, s := range a.series() {
		for i := range *s {
			(*s)[i] /= n
		}
	}
}
