package model

import "github.com/dlmcache/dlmcache/model/backend"

// Fewer, larger products: on a backend that can view a tensor's rows and
// columns (backend.Viewer), Fuse concatenates each block's q, k and v
// weights into one [d+2kv, d] matrix and gate and up into one
// [2·hidden, d], for any checkpoint; the forward then runs one product for
// q/k/v and one for gate/up, and reads q, k, v, gate and up as column
// views of the results. The separate weights become row views of the
// fused ones (no second copy).
//
// model/load does not fuse: measured on this project's 2-core AVX2 VM with the
// bundled model (BenchmarkFused, docs/performance.md), the fused forward
// was 5% faster on a full canvas and 15–30% slower on a 40-row one
// (the strided q/k/v views the attention then reads cost more than the
// saved calls). Call Fuse where a measurement says it pays.

// Fuse concatenates each block's q/k/v (where the layer has no biases or
// q/k norms) and gate/up (where it has no experts) weights; it reports
// false (and changes nothing) on a backend without views. The fused
// weights are float32 matrices (FromHost): on the CPU backend, BF16
// weights kept as BF16 become float32 copies, twice their memory.
func (m *Network) Fuse() bool {
	vw, ok := m.Backend.(backend.Viewer)
	if !ok {
		return false
	}
	b := m.Backend
	cat := func(ts ...*backend.Tensor) backend.Tensor {
		var data []float32
		rows, cols := 0, (*ts[0]).Cols()
		for _, t := range ts {
			data = append(data, b.ToHost(*t, nil)...)
			rows += (*t).Rows()
		}
		f := b.FromHost(rows, cols, data)
		r := 0
		for _, t := range ts {
			n := (*t).Rows()
			b.Free(*t)
			*t = vw.ViewRows(f, r, r+n)
			r += n
		}
		return f
	}
	for i := range m.Blocks {
		blk := &m.Blocks[i]
		if blk.plainAttn() && blk.QKV == nil {
			blk.QKV = cat(&blk.Q, &blk.K, &blk.V)
		}
		if blk.MoE == nil {
			blk.GateUp = cat(&blk.Gate, &blk.Up)
		}
	}
	return true
}

// carveQKV returns a layer's q [r, d], k and v [r, kv], carved from one
// temporary where the backend can (arena.carve).
func carveQKV(ar *arena, r, d, kv int) (q, k, v backend.Tensor) {
	ts := ar.carve([2]int{r, d}, [2]int{r, kv}, [2]int{r, kv})
	return ts[0], ts[1], ts[2]
}

// qkv computes the query, key and value rows of nrm [r, d]: one product
// with fused weights (column views of its result), else three into q, k, v
// (allocated here where nil).
func (m *Network) qkv(blk *Block, nrm, q, k, v backend.Tensor, ar *arena) (backend.Tensor, backend.Tensor, backend.Tensor) {
	b, c := m.Backend, m.Config
	r, d, kv := nrm.Rows(), c.DModel, c.KVDim()
	if blk.QKV != nil {
		all := ar.alloc(r, d+2*kv)
		b.MatMul(all, nrm, blk.QKV)
		vw := b.(backend.Viewer)
		return vw.ViewCols(all, 0, d), vw.ViewCols(all, d, d+kv), vw.ViewCols(all, d+kv, d+2*kv)
	}
	if q == nil {
		q, k, v = carveQKV(ar, r, d, kv)
	}
	b.MatMul(q, nrm, blk.Q)
	b.MatMul(k, nrm, blk.K)
	b.MatMul(v, nrm, blk.V)
	return q, k, v
}

// gateUp computes silu(gate)·up of mm [r, d] into a [r, hidden] tensor
// (a column view with fused weights), through the backend's GateUp where
// it runs these weights (no [r, hidden] up product beside it).
func (m *Network) gateUp(blk *Block, mm backend.Tensor, ar *arena) backend.Tensor {
	b, h := m.Backend, m.Config.MLPHiddenSize
	r := mm.Rows()
	var g, u backend.Tensor
	if blk.GateUp != nil {
		all := ar.alloc(r, 2*h)
		b.MatMul(all, mm, blk.GateUp)
		vw := b.(backend.Viewer)
		g, u = vw.ViewCols(all, 0, h), vw.ViewCols(all, h, 2*h)
	} else {
		g = ar.alloc(r, h)
		if gu, ok := b.(backend.GateUpper); ok && gu.GateUp(g, mm, blk.Gate, blk.Up) {
			return g
		}
		u = ar.alloc(r, h)
		b.MatMul(g, mm, blk.Gate)
		b.MatMul(u, mm, blk.Up)
	}
	b.SiLUMul(g, g, u)
	ar.release(u) // a column view of the fused product is not the arena's
	return g
}

// attnInput computes the query, key and value rows of x [r, d] at
// positions pos (RoPE applied to q and k): through the backend's fused
// AttnInput where it runs these weights, else as RMSNorm, the products
// and RoPE one after the other (the same values).
func (m *Network) attnInput(blk *Block, x backend.Tensor, pos []int32, ar *arena) (q, k, v backend.Tensor) {
	b, c, alloc := m.Backend, m.Config, ar.alloc
	r, d, kv, hd, eps := x.Rows(), c.DModel, c.KVDim(), c.HeadDim(), float32(c.RMSNormEps)
	if f, ok := b.(backend.Fuser); ok && blk.plainAttn() && c.RotaryDim == 0 {
		q, k, v = carveQKV(ar, r, d, kv)
		if f.AttnInput(q, k, v, x, blk.AttnNorm, blk.Q, blk.K, blk.V, pos, hd, c.RopeTheta, eps) {
			return q, k, v
		}
	}
	// Unfused: into the q, k, v the fused call declined, where allocated.
	nrm := alloc(r, d)
	b.RMSNorm(nrm, x, blk.AttnNorm, eps)
	q0, k0, v0 := q, k, v
	q, k, v = m.qkv(blk, nrm, q, k, v, ar)
	ar.release(nrm)
	if q != q0 { // fused weights: views of one product instead
		ar.release(q0, k0, v0)
	}
	if !blk.plainAttn() {
		m.qkvExtras(blk, q, k, v)
	}
	if c.RotaryDim != 0 {
		m.partialRoPE(q, pos)
		m.partialRoPE(k, pos)
		return q, k, v
	}
	b.RoPE(q, pos, hd, c.RopeTheta)
	b.RoPE(k, pos, hd, c.RopeTheta)
	return q, k, v
}

// blockOutput finishes a block on x [r, d] given its attention att:
// x += att·W_oᵀ, then the MLP's residual; through the backend's fused
// BlockOutput where it runs these weights, else one operation after the
// other (the same values). With outputs it runs the latter and returns
// the attention output o and the MLP output y [r, d] it added (a
// Carrier's), else nils. The temporaries it made are released as it goes
// (att with them), o and y at the end where they are not returned.
func (m *Network) blockOutput(blk *Block, x, att backend.Tensor, ar *arena, outputs bool) (o, y backend.Tensor) {
	b, c, alloc := m.Backend, m.Config, ar.alloc
	r, d, eps := x.Rows(), c.DModel, float32(c.RMSNormEps)
	if f, ok := b.(backend.Fuser); ok && !outputs && blk.MoE == nil && blk.OBias == nil && f.BlockOutput(x, att, blk.AttnOut, blk.FFNorm, blk.Gate, blk.Up, blk.Down, eps) {
		return nil, nil
	}
	o = alloc(r, d)
	b.MatMul(o, att, blk.AttnOut)
	ar.release(att)
	m.hostRows(o, blk.OBias, nil, 0, 0)
	b.Add(x, o) // x is now h
	if !outputs {
		ar.release(o)
	}
	mm := alloc(r, d)
	b.RMSNorm(mm, x, blk.FFNorm, eps)
	if blk.MoE != nil {
		y = m.moe(blk.MoE, mm, alloc)
		ar.release(mm)
	} else {
		g := m.gateUp(blk, mm, ar) // [r, hidden]
		ar.release(mm)
		y = alloc(r, d)
		b.MatMul(y, g, blk.Down)
		ar.release(g)
	}
	b.Add(x, y)
	if !outputs {
		ar.release(y)
		return nil, nil
	}
	return o, y
}
