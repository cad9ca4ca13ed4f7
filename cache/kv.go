package cache

import (
	"fmt"

	"github.com/dlmcache/dlmcache/model"
	"github.com/dlmcache/dlmcache/model/backend"
	"github.com/dlmcache/dlmcache/model/sample"
)

// The planners' shared pieces: row sets and kept K/V buffers.

// iota32 is lo, lo+1, …, hi-1.
func iota32(lo, hi int) []int32 {
	r := make([]int32, 0, max(0, hi-lo))
	for i := lo; i < hi; i++ {
		r = append(r, int32(i))
	}
	return r
}

// splitAt splits sorted rows into those below m and the rest, with their
// indices in rows.
func splitAt(rows []int32, m int) (lo, loIdx, hi, hiIdx []int32) {
	for i, p := range rows {
		if int(p) < m {
			lo, loIdx = append(lo, p), append(loIdx, int32(i))
		} else {
			hi, hiIdx = append(hi, p), append(hiIdx, int32(i))
		}
	}
	return
}

// kvBuffers keeps per layer the K and V of every canvas row ([n, kv],
// allocated on first use), as the token-level caches do.
type kvBuffers struct {
	b    backend.Backend
	n    int
	cols int
	k, v []backend.Tensor
}

func newKVBuffers(lm *model.Network, n int) kvBuffers {
	L := len(lm.Blocks)
	return kvBuffers{b: lm.Backend, n: n, cols: lm.Config.KVDim(), k: make([]backend.Tensor, L), v: make([]backend.Tensor, L)}
}

// keep copies rows (nil: all) of layer l's complete k and v [n, kv].
func (c *kvBuffers) keep(l int, rows []int32, k, v backend.Tensor) {
	if c.k[l] == nil {
		c.k[l], c.v[l] = c.b.New(c.n, c.cols), c.b.New(c.n, c.cols)
	}
	c.b.CopyRows(c.k[l], rows, k, rows)
	c.b.CopyRows(c.v[l], rows, v, rows)
}

// fill writes the kept K/V of rows into k and v.
func (c *kvBuffers) fill(l int, rows []int32, k, v backend.Tensor) error {
	if c.k[l] == nil {
		return fmt.Errorf("cache: no kept K/V for layer %d", l)
	}
	c.b.CopyRows(k, rows, c.k[l], rows)
	c.b.CopyRows(v, rows, c.v[l], rows)
	return nil
}

func (c *kvBuffers) free() {
	for l := range c.k {
		if c.k[l] != nil {
			c.b.Free(c.k[l])
			c.b.Free(c.v[l])
		}
	}
	c.k, c.v = nil, nil
}

// fuller is a plan that can say it computes every row of every layer this
// step (a refresh or block start); the bicache wrapper passes such steps
// through whole with the recompute source.
type fuller interface{ full() bool }

func isFull(p model.Plan) bool {
	if p == nil {
		return true
	}
	f, ok := p.(fuller)
	return ok && f.full()
}

// allKeeper is a plan that keeps every layer's K/V of every row (the
// token-level caches).
type allKeeper interface{ keepsAll() bool }

func keepsAll(p model.Plan) bool {
	k, ok := p.(allKeeper)
	return ok && k.keepsAll()
}

// tokenPlan is the body the token-level caches share: a step either
// computes every row (all) or the rows the method chose, the same at every
// layer; every computed row's K/V are kept, and every other row's come
// from the kept ones.
type tokenPlan struct {
	lm   *model.Network
	kv   kvBuffers
	all  bool
	rows []int32
}

func (p *tokenPlan) begin(r *sample.Request) {
	p.kv = newKVBuffers(p.lm, len(r.Canvas))
}

func (p *tokenPlan) End()                        { p.kv.free() }
func (p *tokenPlan) After(*sample.Step, []int32) {}
func (p *tokenPlan) full() bool                  { return p.all }
func (p *tokenPlan) keepsAll() bool              { return true }

func (p *tokenPlan) Rows(int) []int32 {
	if p.all {
		return nil
	}
	return p.rows
}

// compute makes the step compute rows (sorted) at every layer, with the
// rows its logits are read from (logitSources).
func (p *tokenPlan) compute(s *sample.Step, rows []int32) {
	p.rows = mergeRows(rows, logitSources(p.lm.Config, s))
}

// logitSources are the rows whose last hidden states give step s's logits
// on a model with shifted logits (Config.ShiftLogits, Dream's: a slot's
// logits come from the row before it): the row before each masked slot of
// the current block. A planner that computes a subset of the rows computes
// these with it at every layer (nil for an unshifted model: the slots'
// own rows, which every planner computes).
func logitSources(c *model.Config, s *sample.Step) []int32 {
	if !c.ShiftLogits {
		return nil
	}
	var src []int32
	for pos := max(s.BlockStart, 1); pos < s.BlockEnd; pos++ {
		if s.Canvas[pos] == int32(c.MaskTokenID) {
			src = append(src, int32(pos-1))
		}
	}
	return src
}

func (p *tokenPlan) Hidden(l int, _ []int32, _ backend.Tensor) error {
	return fmt.Errorf("cache: no hidden state for layer %d (the planner computes the same rows at every layer)", l)
}

func (p *tokenPlan) KV(l int, rows []int32, k, v backend.Tensor) error {
	return p.kv.fill(l, rows, k, v)
}

func (p *tokenPlan) Observe(l int, computed []int32, _, k, v backend.Tensor) {
	if p.all {
		computed = nil
	}
	p.kv.keep(l, computed, k, v)
}
