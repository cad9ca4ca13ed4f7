package cache

import (
	"fmt"
	"slices"
	"sort"

	"github.com/spf13/pflag"

	"github.com/dlmcache/dlmcache/model"
	"github.com/dlmcache/dlmcache/model/sample"
)

// D2Options are d2Cache's settings (the paper's defaults: K 32, P 0.1,
// Sigma 10).
type D2Options struct {
	K     int     // masked slots recomputed per step, by certainty prior
	P     float64 // rollout importance mass of the other rows recomputed
	Sigma float64 // certainty density's Gaussian width, in tokens
	// Prior decodes by certainty prior (confidence × density) instead of
	// the schedule's decoder: a quasi left-to-right order.
	Prior bool
}

// d2Flags are d2Cache's flags.
func d2Flags(fl *pflag.FlagSet, o *Options) {
	d := DefaultOptions().D2
	fl.IntVar(&o.D2.K, "d2-k", d.K, "d2cache: masked slots recomputed per step, by certainty prior")
	fl.Float64Var(&o.D2.P, "d2-p", d.P, "d2cache: attention-rollout importance share of the other rows recomputed per step (1: every row)")
	fl.Float64Var(&o.D2.Sigma, "d2-sigma", d.Sigma, "d2cache: certainty density's Gaussian width in tokens")
	fl.BoolVar(&o.D2.Prior, "d2-prior-order", false, "d2cache: decode by certainty prior (confidence × density of decoded neighbours) instead of confidence alone")
}

// d2Knobs are d2Cache's knobs.
var d2Knobs = []Knob{
	intKnob("d2-k", "masked slots recomputed per step", 1, func(o *Options, k int) { o.D2.K = k }),
	floatKnob("d2-p", "rollout importance share of the other rows recomputed", 0, 1, func(o *Options, p float64) { o.D2.P = p }),
}

// d2Grid: the paper's defaults, on the schedule and under threshold
// decoding.
var d2Grid = []GridPoint{{Decoders: []string{"schedule", "threshold:0.9"}}}

// d2Cache is d2Cache's token-selective update: a full first step, then
// each step recomputes, at every layer, only (1) the k masked slots of
// highest certainty prior — the slot's last confidence times the Gaussian
// density of decoded tokens around it (σ), searched from the current block
// up to the block boundary that holds k masked slots, the current block
// first —, (2) the tokens the last step decoded, whose K/V were computed as
// masks, and (3) the remaining rows of highest attention-rollout
// importance (the column sums of the last step's rollout through every
// layer) while their cumulative share of the rest's stays at or below p,
// and at least the first; every other row's K/V are the last ones
// computed. The decoder chooses among the current block's slots of (1),
// the only masked slots whose logits the step computes (all of the
// block's under guided decoding, which commits left to right). As in
// d2Cache's code (src/cache/d2cache.py, nucleus_select). P = 1 (or K ≥ the
// answer) recomputes every row, as none.
type d2Cache struct{ base }

func newD2Cache(o Options) (Method, error) {
	d := o.D2
	if d.K <= 0 || d.P < 0 || d.P > 1 || d.Sigma <= 0 {
		return nil, fmt.Errorf("needs K > 0 (--d2-k), P in [0, 1] (--d2-p) and Sigma > 0 (--d2-sigma), got K %d, P %g, Sigma %g", d.K, d.P, d.Sigma)
	}
	return &d2Cache{base{"d2cache", o}}, nil
}

// Gen installs the certainty-prior decoder when asked.
func (m *d2Cache) Gen(o sample.GenOptions) sample.GenOptions {
	if m.o.D2.Prior {
		o.Decoder = sample.CertaintyPrior{Sigma: m.o.D2.Sigma}
	}
	return o
}

func (m *d2Cache) Planner(lm *model.Network, _ string, _ *Info) sample.Planner {
	return &d2Planner{tokenPlan: tokenPlan{lm: lm}, o: m.o.D2, mask: int32(lm.Config.MaskTokenID), L: len(lm.Blocks)}
}

type d2Planner struct {
	tokenPlan
	o    D2Options
	mask int32
	L    int

	n, P       int
	conf       []float64   // last confidence of each answer slot (0: never scored)
	importance []float64   // rollout column sums of the last step
	layers     []attnLayer // this step's attention, layer by layer
	decoded    []int32     // the last step's commits
	cand       []int32     // this step's candidates: the current block's slots of (1)
}

func (p *d2Planner) Begin(r *sample.Request) error {
	p.n, p.P = len(r.Canvas), len(r.Prompt)
	p.begin(r)
	p.conf = make([]float64, p.n)
	p.importance = make([]float64, p.n)
	return nil
}

func (p *d2Planner) Candidates(_ *sample.Step, c *sample.Candidates) {
	for i, pos := range c.Pos {
		p.conf[pos] = c.Conf[i]
	}
}

func (p *d2Planner) After(_ *sample.Step, committed []int32) {
	p.decoded = slices.Clone(committed)
}

func (p *d2Planner) Plan(s *sample.Step) model.Plan {
	p.all = s.Index == 0
	if !p.all {
		p.compute(s, p.selectRows(s))
		p.all = len(p.rows) == p.n
	}
	return p
}

// selectRows is the step's row set (sorted).
func (p *d2Planner) selectRows(s *sample.Step) []int32 {
	P, G := p.P, p.n-p.P
	known := make([]bool, G)
	var masked []int
	for i := range G {
		known[i] = s.Canvas[P+i] != p.mask
		if !known[i] {
			masked = append(masked, i)
		}
	}
	sel := make(map[int32]bool)
	p.cand = p.cand[:0]
	// (1) the k masked slots of highest certainty prior, in the window
	// (d2Cache's top k): those of the current block are the step's
	// candidates. Under guided decoding every masked slot of the block is.
	if len(masked) > 0 {
		bl := s.BlockEnd - s.BlockStart
		end := G - 1
		if len(masked) >= p.o.K {
			end = masked[p.o.K-1]
		}
		end = min(G-1, (end/bl+1)*bl-1)
		bs, be := s.BlockStart-P, s.BlockEnd-P
		dens := sample.CertaintyDensity(known, p.o.Sigma)
		var win []int
		best := 0.0
		score := make(map[int]float64)
		for _, i := range masked {
			if i >= bs && i <= end {
				win = append(win, i)
				score[i] = p.conf[P+i] * dens[i]
				best = max(best, score[i])
			}
		}
		for _, i := range win {
			if i < be {
				score[i] += best + 1 // the current block first
			}
		}
		sort.SliceStable(win, func(a, b int) bool { return score[win[a]] > score[win[b]] })
		for j, i := range win {
			if j < p.o.K || s.Whole && i < be {
				sel[int32(P+i)] = true
				if i < be {
					p.cand = append(p.cand, int32(P+i))
				}
			}
		}
		slices.Sort(p.cand)
	}
	// (2) the tokens the last step decoded.
	for _, pos := range p.decoded {
		sel[pos] = true
	}
	// (3) the rows of highest importance among the others while their
	// cumulative share of the others' importance stays at or below P, and
	// at least the first (d2Cache's nucleus selection, min_k 1); P 0
	// selects none, P 1 all.
	var rest []int32
	var total float64
	for pos := range p.n {
		if !sel[int32(pos)] {
			rest = append(rest, int32(pos))
			total += p.importance[pos]
		}
	}
	sort.SliceStable(rest, func(a, b int) bool { return p.importance[rest[a]] > p.importance[rest[b]] })
	var acc float64
	for j, pos := range rest {
		if p.o.P == 0 {
			break
		}
		acc += p.importance[pos]
		if j > 0 && p.o.P < 1 && acc > p.o.P*total {
			break
		}
		sel[pos] = true
	}
	rows := make([]int32, 0, len(sel))
	for pos := range sel {
		rows = append(rows, pos)
	}
	slices.Sort(rows)
	return rows
}

// CandidateRows narrows the step's candidates to the masked slots of the
// current block among the k selected (every one on the first step, which
// computes all rows).
func (p *d2Planner) CandidateRows(s *sample.Step, _ []int32) []int32 {
	if p.all {
		return nil
	}
	return p.cand
}

func (p *d2Planner) WantsAttention(int) bool { return true }

// ObserveAttention keeps layer l's attention weights; after the last layer
// it computes each row's importance: its column sum in the attention
// rollout R = M_L ⋯ M_1, where M_l's computed rows are (attention_i + e_i)/2
// and its other rows e_i (rows not computed pass through). The column sums
// 1ᵀ·M_L ⋯ M_1 are taken as a vector–matrix chain from the last layer down,
// O(L·r·n), instead of the dense O(L·r·n²) product; the result is the same.
func (p *d2Planner) ObserveAttention(l int, computed []int32, probs []float32) {
	if l == 0 {
		p.layers = p.layers[:0]
	}
	p.layers = append(p.layers, attnLayer{computed, probs})
	if l < p.L-1 {
		return
	}
	n := p.n
	v := make([]float64, n)
	for j := range v {
		v[j] = 1
	}
	next := make([]float64, n)
	for li := len(p.layers) - 1; li >= 0; li-- {
		a := p.layers[li]
		copy(next, v) // the rows not computed: e_i
		for _, pos := range a.computed {
			next[pos] = 0
		}
		for i, pos := range a.computed {
			w := v[pos] / 2
			next[pos] += w
			for j, x := range a.probs[i*n : (i+1)*n] {
				next[j] += w * float64(x)
			}
		}
		v, next = next, v
	}
	copy(p.importance, v)
}

// attnLayer is one layer's computed rows and their attention weights.
type attnLayer struct {
	computed []int32
	probs    []float32
}

// CheckModel refuses block-causal models (wholeCanvas).
func (m *d2Cache) CheckModel(c *model.Config) error { return wholeCanvas(m.name, c) }
