package cpu

import "github.com/dlmcache/dlmcache/model/backend"

// gateUpChunk is how many rows of gate and up GateUp multiplies at a
// time: a multiple of bf16LayoutRows (a laid-out weight's products start
// on its blocks) and of 16 (the parts' edges).
const gateUpChunk = 1024

// GateUp implements backend.GateUpper for gate and up weights laid out
// for bf16mm.c's kernel, or kept quantized for the int8 products: x is
// rounded to BF16 or quantized once, then gateUpChunk rows of gate at a
// time multiply straight into dst's columns, as many of up into a
// [r, gateUpChunk] scratch, and SiLUMul joins them. Each weight row is
// read once, as in the two products; the up product's [r, h] tensor is
// never made (l16-d2048 at 256 rows: 5.8 MB of the forward's 35). Other
// weights, weights of at most one chunk, and weights stored out of order
// (PermuteRows) report false.
func (b *Backend) GateUp(dst, x, gate, up backend.Tensor) bool {
	ds, xs := writable(dst, "GateUp"), tensor(x, "GateUp")
	gs, us := anyTensor(gate, "GateUp"), anyTensor(up, "GateUp")
	r, d, h := xs.rows, xs.cols, gs.rows
	if gs.cols != d || us.rows != h || us.cols != d || ds.rows != r || ds.cols != h {
		shapePanic("GateUp", "dst %v from x %v, gate %v, up %v", ds, xs, gs, us)
	}
	if h <= gateUpChunk || r == 0 || d == 0 || gs.perm != nil || us.perm != nil || gs.panels != nil || us.panels != nil {
		return false
	}
	checkSpan("x", xs.data, r, d, xs.stride)
	checkSpan("dst", ds.data, r, h, ds.stride)
	switch {
	case gs.bfl != nil && us.bfl != nil:
		xh := b.activationsBF16(xs)
		defer putOf(b.bufs, xh)
		b.gateUpChunks(ds, gs, us, func(c, w *Tensor, j0, j1 int) { b.bf16Product(c, xh, r, d, w, j0, j1) })
	case gs.q != nil && us.q != nil && b.quantISA >= 0 && int8Product(gs.qType) && int8Product(us.qType):
		qa := b.quantizeActs(xs, gs, us)
		defer b.putActs(qa)
		b.gateUpChunks(ds, gs, us, func(c, w *Tensor, j0, j1 int) { b.quantProduct(c, qa, w, j0, j1, h) })
	default:
		return false
	}
	return true
}

// gateUpChunks runs GateUp's chunks: product(c, w, j0, j1) writes
// x·w[j0:j1]ᵀ into c.
func (b *Backend) gateUpChunks(ds, gate, up *Tensor, product func(c, w *Tensor, j0, j1 int)) {
	r, h := ds.rows, ds.cols
	scratch := b.bufs.scratch(r * min(h, gateUpChunk))
	defer b.bufs.put(scratch)
	for j0 := 0; j0 < h; j0 += gateUpChunk {
		j1 := min(h, j0+gateUpChunk)
		g := &Tensor{rows: r, cols: j1 - j0, stride: ds.stride, data: ds.data[j0:]}
		u := &Tensor{rows: r, cols: j1 - j0, stride: j1 - j0, data: scratch}
		product(g, gate, j0, j1)
		product(u, up, j0, j1)
		b.SiLUMul(g, g, u)
	}
}

var _ backend.GateUpper = (*Backend)(nil)
