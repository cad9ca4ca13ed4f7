package profile

import (
	"context"
	"fmt"
	"math"

	"github.com/dlmcache/dlmcache/model"
	"github.com/dlmcache/dlmcache/model/backend"
	"github.com/dlmcache/dlmcache/model/sample"
)

// Sim is the similarity of one layer's prefix K/V at one denoising step.
type Sim struct {
	Layer int // 1-based, as in the design's definitions
	Step  int // 1-based denoising step
	K, V  float64
	KV    float64 // cosine of concat(K, V): the design's S(l, t)
	// KVRowMin is the smallest per-row cosine of concat(K, V) over the
	// prefix's rows: the row that moved most. A whole-prefix cosine
	// averages a few rows that a question rewrites into hundreds that stay
	// put; this one does not.
	KVRowMin float64
}

// Measure runs the paper's measurement for one request: the prefix alone
// (cached K/V) and the full input string with no caching (reference K/V), and
// returns S(l, t) for every layer at step 1, or at every step when allSteps
// is set (the full generation is then run with no caching). prompt is the
// templated prompt, its first prefixLen tokens the shared prefix.
func Measure(ctx context.Context, m *model.Network, prompt []int32, prefixLen int, o sample.GenOptions, allSteps bool) ([]Sim, error) {
	if prefixLen <= 0 || prefixLen > len(prompt) {
		return nil, fmt.Errorf("profile: prefix length %d outside (0, %d]", prefixLen, len(prompt))
	}
	// Cached K/V: the prefix alone, same position ids.
	cached := &kvCapture{b: m.Backend, m: prefixLen}
	if _, err := m.Forward(model.Input{Tokens: prompt[:prefixLen]}, cached); err != nil {
		return nil, err
	}
	var sims []Sim
	compare := func(step int, ref *kvCapture) {
		for l := range ref.k {
			sims = append(sims, similarity(l+1, step, prefixLen, cached.k[l], cached.v[l], ref.k[l], ref.v[l]))
		}
	}
	if !allSteps {
		canvas := make([]int32, len(prompt)+o.GenLength)
		copy(canvas, prompt)
		for i := len(prompt); i < len(canvas); i++ {
			canvas[i] = int32(m.Config.MaskTokenID)
		}
		ref := &kvCapture{b: m.Backend, m: prefixLen}
		if _, err := m.Forward(model.Input{Tokens: canvas}, ref); err != nil {
			return nil, err
		}
		compare(1, ref)
		return sims, nil
	}
	p := &stepCapture{b: m.Backend, m: prefixLen, each: compare}
	if _, err := sample.Generate(ctx, m, prompt, prefixLen, o, p); err != nil {
		return nil, err
	}
	return sims, nil
}

// ReusablePrefix is the part of a shared prefix of m tokens that a cache
// can reuse exactly, and so the part the profiler measures: on a
// block-causal model its full blocks (the rows of a partial last block
// attend to what follows them in the block), else all of it.
func ReusablePrefix(c *model.Config, m int) int {
	if B := c.CausalBlock(); B > 0 {
		return m / B * B
	}
	return m
}

// SafeDepth is the largest l such that S(l', 1) ≥ τ for every l' ≤ l, from
// the step-1 similarities (layers in order); at least 1.
func SafeDepth(step1 []float64, tau float64) int {
	d := 0
	for _, s := range step1 {
		if s < tau {
			break
		}
		d++
	}
	return max(d, 1)
}

// similarity compares cached and reference K/V of m rows ([m, kv] each,
// row-major): one pass of per-row dot products, summed for the whole
// prefix.
func similarity(layer, step, m int, kc, vc, k, v []float32) Sim {
	var dk, nkc, nk, dv, nvc, nv float64
	rowMin := 1.0
	w := len(k) / m
	for i := 0; i < m; i++ {
		r := func(x []float32) []float32 { return x[i*w : (i+1)*w] }
		rdk, rnkc, rnk := dots(r(kc), r(k))
		rdv, rnvc, rnv := dots(r(vc), r(v))
		rowMin = min(rowMin, cos(rdk+rdv, rnkc+rnvc, rnk+rnv))
		dk, nkc, nk = dk+rdk, nkc+rnkc, nk+rnk
		dv, nvc, nv = dv+rdv, nvc+rnvc, nv+rnv
	}
	return Sim{Layer: layer, Step: step,
		K:        cos(dk, nkc, nk),
		V:        cos(dv, nvc, nv),
		KV:       cos(dk+dv, nkc+nvc, nk+nv),
		KVRowMin: rowMin,
	}
}

func dots(a, b []float32) (ab, aa, bb float64) {
	for i := range a {
		x, y := float64(a[i]), float64(b[i])
		ab += x * y
		aa += x * x
		bb += y * y
	}
	return
}

func cos(ab, aa, bb float64) float64 {
	if aa == 0 || bb == 0 {
		if aa == bb {
			return 1
		}
		return 0
	}
	return ab / math.Sqrt(aa*bb)
}

// kvCapture is a Plan that computes everything and copies the K/V of the
// first m positions of every layer to the host.
type kvCapture struct {
	model.EveryRow
	b    backend.Backend
	m    int
	k, v [][]float32 // per layer, [m, kv]
}

func (c *kvCapture) Observe(l int, _ []int32, _, k, v backend.Tensor) {
	n := c.m * k.Cols()
	c.k = append(c.k, c.b.ToHost(k, nil)[:n:n])
	c.v = append(c.v, c.b.ToHost(v, nil)[:n:n])
}

// stepCapture is a Planner that computes everything and hands each step's
// prefix K/V to each.
type stepCapture struct {
	b    backend.Backend
	m    int
	cur  *kvCapture
	each func(step int, c *kvCapture)
}

func (s *stepCapture) Begin(*sample.Request) error { return nil }
func (s *stepCapture) Plan(*sample.Step) model.Plan {
	s.cur = &kvCapture{b: s.b, m: s.m}
	return s.cur
}
func (s *stepCapture) After(st *sample.Step, _ []int32) { s.each(st.Index+1, s.cur) }
func (s *stepCapture) End()                             {}
