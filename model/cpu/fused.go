package cpu

/*
#cgo LDFLAGS: -lpthread
#include "kernels.h"
*/
import "C"

import (
	"fmt"
	"runtime"
	"unsafe"

	"github.com/dlmcache/dlmcache/model/backend"
)

// fusedRows is the row block of the fused layer halves (backend.Fuser),
// one task of the team: a multiple of the panel kernel's 6-row tile,
// small enough that a block's intermediates stay in L2 (the bundled
// model's gate and up of 48 rows: 147 KB) and that the last blocks even
// out the cores.
const fusedRows = C.DLMC_FUSED_ROWS

// i32ptr is the C view of s's first element.
func i32ptr(s []int32) *C.int32_t { return (*C.int32_t)(unsafe.Pointer(&s[0])) }

// fusable reports whether the fused halves can run these weights: all laid
// out for the panel kernel (float32, at most panelMaxK columns).
func fusable(ws ...*Tensor) bool {
	for _, w := range ws {
		if w.panels == nil {
			return false
		}
	}
	return true
}

// panelMatMul computes d = x·wᵀ on the panel kernel (w laid out), as one
// job of the team (on the caller alone where the product is too small to
// split). AVX2+FMA only (simd).
func (b *Backend) panelMatMul(d, xs, ws *Tensor) {
	m, n, k := xs.rows, ws.rows, xs.cols
	if m == 0 || n == 0 {
		return
	}
	if !simd || k == 0 || k > panelMaxK || len(ws.panels) < (n+15)/16*16*k {
		panic("cpu: panelMatMul: no AVX2, or panels too short")
	}
	_, _ = xs.data[(m-1)*xs.stride+k-1], d.data[(m-1)*d.stride+n-1]
	C.dlmc_panel_matmul(C.int(b.workers(2*float64(m)*float64(n)*float64(k))), C.int(m), C.int(n), C.int(k),
		fptr(xs.data), C.long(xs.stride), fptr(ws.panels), fptr(d.data), C.long(d.stride))
}

// The weight types of the blocked panel kernel (dlmc_wg_matmul).
const (
	wgF32  = 0
	wgF16  = 1
	wgBF16 = 2
)

// wgMatMul computes d = x·wᵀ on the blocked panel kernel (attn.c): w, of
// any k, read as it is kept (float32, F16 or BF16: converted exactly as
// it is packed, 512 of its columns at a time), as one job of the team, a
// task a block of 64 of its rows. AVX2+FMA only (simd). Every row of d is
// the same whatever the rows beside it and the threads: the kernel sums
// each element in k's order, one chain of FMAs.
func (b *Backend) wgMatMul(d, xs, ws *Tensor) {
	m, n, k := xs.rows, ws.rows, xs.cols
	if m == 0 || n == 0 {
		return
	}
	if !simd {
		panic("cpu: wgMatMul: no AVX2")
	}
	_, _ = xs.data[(m-1)*xs.stride+k-1], d.data[(m-1)*d.stride+n-1]
	typ, w, nw := wgType(ws)
	if nw < (n-1)*ws.stride+k {
		panic(fmt.Sprintf("cpu: wgMatMul: weight %v holds %d values, its rows need %d", ws, nw, (n-1)*ws.stride+k))
	}
	var laid unsafe.Pointer
	if ws.wgl != nil && ws.wgl.typ == typ {
		laid = unsafe.Pointer(&ws.wgl.mem[0])
	}
	C.dlmc_wg_matmul(C.int(b.workers(2*float64(m)*float64(n)*float64(k))), typ, C.int(m), C.int(n), C.int(k),
		fptr(xs.data), C.long(xs.stride), w, C.long(ws.stride), laid, fptr(d.data), C.long(d.stride))
	runtime.KeepAlive(ws)
	runtime.KeepAlive(ws.wgl)
}

// workers is how many threads a fused operation of flops runs on: one
// where it is too small to split.
func (b *Backend) workers(flops float64) int {
	if !b.split || flops < minTeamFlops {
		return 1
	}
	return b.threads
}

// AttnInput implements backend.Fuser: n = RMSNorm(x, norm); q, k, v =
// n·wqᵀ, n·wkᵀ, n·wvᵀ; RoPE of q and k at pos. A block of rows at a time,
// its normed rows in cache; every value is what the five operations give
// one after the other (the same kernels, each output element summed in the
// same order). It runs where every weight is laid out for the panel kernel
// and reports false, touching nothing, elsewhere.
func (b *Backend) AttnInput(q, k, v, x, norm, wq, wk, wv backend.Tensor, pos []int32, headDim int, theta float64, eps float32) bool {
	qs, ks, vs := writable(q, "AttnInput"), writable(k, "AttnInput"), writable(v, "AttnInput")
	xs, ns := tensor(x, "AttnInput"), tensor(norm, "AttnInput")
	wqs, wks, wvs := anyTensor(wq, "AttnInput"), anyTensor(wk, "AttnInput"), anyTensor(wv, "AttnInput")
	r, d := xs.rows, xs.cols
	if ns.rows != 1 || ns.cols != d || wqs.cols != d || wks.cols != d || wvs.cols != d ||
		qs.rows != r || qs.cols != wqs.rows || ks.rows != r || ks.cols != wks.rows || vs.rows != r || vs.cols != wvs.rows ||
		len(pos) != r || headDim <= 0 || headDim%2 != 0 || qs.cols%headDim != 0 || ks.cols%headDim != 0 {
		shapePanic("AttnInput", "q %v, k %v, v %v from x %v, norm %v, wq %v, wk %v, wv %v, %d positions, headDim %d",
			qs, ks, vs, xs, ns, wqs, wks, wvs, len(pos), headDim)
	}
	if !fusable(wqs, wks, wvs) {
		return false
	}
	if r == 0 || d == 0 {
		return true
	}
	rope := b.ropeFor(pos, headDim, theta)
	var cs *C.float
	if rope.need > 0 {
		cs = fptr(rope.tab.cs)
	}
	C.dlmc_attn_input(C.int(b.workers(2*float64(r)*float64(d)*float64(qs.cols+ks.cols+vs.cols))), C.int(r), C.int(d),
		C.int(qs.cols), C.int(ks.cols), C.int(vs.cols), C.int(headDim), cbool(!b.scalarOps && simd), C.float(eps),
		fptr(xs.data), C.long(xs.stride), fptr(ns.data), fptr(wqs.panels), fptr(wks.panels), fptr(wvs.panels),
		fptr(qs.data), C.long(qs.stride), fptr(ks.data), C.long(ks.stride), fptr(vs.data), C.long(vs.stride),
		i32ptr(pos), cs, C.int(rope.need))
	// Rows at positions without cached angles: angles of their own.
	rope.own(qs, 0, r)
	rope.own(ks, 0, r)
	return true
}

// BlockOutput implements backend.Fuser: x += att·woᵀ; n = RMSNorm(x,
// norm); x += (silu(n·gateᵀ) ⊙ n·upᵀ)·downᵀ. A block of rows at a time,
// its gate and up in cache; every value is what the operations give one
// after the other. It runs where every weight is laid out for the panel
// kernel and reports false, touching nothing, elsewhere.
func (b *Backend) BlockOutput(x, att, wo, norm, gate, up, down backend.Tensor, eps float32) bool {
	xs, as, ns := writable(x, "BlockOutput"), tensor(att, "BlockOutput"), tensor(norm, "BlockOutput")
	wos, gs, us, ds := anyTensor(wo, "BlockOutput"), anyTensor(gate, "BlockOutput"), anyTensor(up, "BlockOutput"), anyTensor(down, "BlockOutput")
	r, d, h := xs.rows, xs.cols, gs.rows
	if as.rows != r || wos.cols != as.cols || wos.rows != d || ns.rows != 1 || ns.cols != d ||
		gs.cols != d || us.rows != h || us.cols != d || ds.rows != d || ds.cols != h {
		shapePanic("BlockOutput", "x %v, att %v, wo %v, norm %v, gate %v, up %v, down %v", xs, as, wos, ns, gs, us, ds)
	}
	if !fusable(wos, gs, us, ds) {
		return false
	}
	if r == 0 || d == 0 {
		return true
	}
	C.dlmc_block_output(C.int(b.workers(2*float64(r)*float64(d)*float64(as.cols+3*h))), C.int(r), C.int(d), C.int(as.cols), C.int(h),
		cbool(!b.scalarOps && simd), cbool(simd), C.float(eps), fptr(xs.data), C.long(xs.stride), fptr(as.data), C.long(as.stride),
		fptr(ns.data), fptr(wos.panels), fptr(gs.panels), fptr(us.panels), fptr(ds.panels))
	return true
}

var _ backend.Fuser = (*Backend)(nil)

// ropeRange is RoPE's work for one set of positions: the cached angles
// where positions have them, angles of their own for the rest.
type ropeRange struct {
	useSIMD bool
	pos     []int32
	headDim int
	tab     *ropeTable
	need    int
	invFreq []float64
}

// ropeFor prepares RoPE at pos (shapes checked by the caller).
func (b *Backend) ropeFor(pos []int32, headDim int, theta float64) *ropeRange {
	rr := &ropeRange{useSIMD: !b.scalarOps, pos: pos, headDim: headDim, invFreq: ropeInvFreq(headDim, theta)}
	for _, p := range pos {
		if p >= 0 && int(p) < maxRopePositions {
			rr.need = max(rr.need, int(p)+1)
		}
	}
	if rr.need > 0 {
		rr.tab = b.rope.table(headDim, theta, rr.need)
	}
	return rr
}

// rows rotates rows [lo, hi) of x, row i at pos[i].
func (rr *ropeRange) rows(x *Tensor, lo, hi int) {
	if rr.need > 0 {
		ropeRows(rr.useSIMD, x, lo, hi, rr.pos, rr.headDim, rr.tab.cs, rr.need)
	}
	rr.own(x, lo, hi)
}

// own rotates the rows of [lo, hi) whose positions have no cached angles
// (beyond the table, or negative), a row at a time with angles of their own.
func (rr *ropeRange) own(x *Tensor, lo, hi int) {
	var cs []float32
	for i := lo; i < hi; i++ {
		if p := int(rr.pos[i]); p >= 0 && p < rr.need {
			continue
		}
		if cs == nil {
			cs = make([]float32, rr.headDim)
		}
		ropeAngles(cs, float64(rr.pos[i]), rr.invFreq)
		ropeRow(rr.useSIMD, x.Row(i), rr.headDim, cs)
	}
}

// attnParts gathers the parts of one fused attention job (attn_parts),
// every Go pointer in them pinned until done.
type attnParts struct {
	parts           []C.dlmc_attn_part
	pin             runtime.Pinner
	packs, row, ldt int // ldt: the largest of the parts'
}

// add appends the part for the kv heads [g0, g0+kvn) of the attention
// dst = Attention(q, k, v) (head size hd) in blocks of block query rows,
// its layouts in buf (kvn·attnLayout(hd, nk) floats): every kᵀ, then
// every v.
func (ap *attnParts) add(d, qs, ks, vs *Tensor, hd int, buf []float32, g0, kvn, blocks, block int) {
	nk := ks.rows
	ap.own(d, qs, ks, vs, hd, buf, nk, 0, nk, g0, kvn, blocks, block)
}

// addKept appends the part for every kv head of the attention
// dst = Attention(q, k, v) whose keys and values are NewKV's pair with the
// kept layout l (keptLayout): it lays out only the keys not laid out yet.
func (ap *attnParts) addKept(d, qs, ks, vs *Tensor, hd int, l *kvLayout, blocks, block int) {
	lo, hi := l.span(ks.rows)
	ap.own(d, qs, ks, vs, hd, l.buf, l.rows, lo, hi, 0, l.kvHead, blocks, block)
}

// own appends a part that lays out keys [plo, phi) of its kv heads
// [g0, g0+kvn) in buf (kvn·attnLayout(hd, pnk) floats: every kᵀ, then every
// v, with room for pnk keys).
func (ap *attnParts) own(d, qs, ks, vs *Tensor, hd int, buf []float32, pnk, plo, phi, g0, kvn, blocks, block int) {
	nq, nk := qs.rows, ks.rows
	ldt := attnLdt(pnk)
	voff := kvn * hd * ldt
	_, _, _ = qs.data[(nq-1)*qs.stride+qs.cols-1], ks.data[(nk-1)*ks.stride+ks.cols-1], vs.data[(nk-1)*vs.stride+vs.cols-1]
	_, _ = d.data[(nq-1)*d.stride+d.cols-1], buf[kvn*attnLayout(hd, pnk)-1]
	for _, s := range [][]float32{qs.data, ks.data, vs.data, d.data, buf} {
		ap.pin.Pin(&s[0])
	}
	ap.parts = append(ap.parts, C.dlmc_attn_part{q: fptr(qs.data), k: fptr(ks.data), v: fptr(vs.data), o: fptr(d.data),
		kt: fptr(buf), vp: fptr(buf[voff:]),
		ldq: C.long(qs.stride), ldk: C.long(ks.stride), ldv: C.long(vs.stride), ldo: C.long(d.stride), ldt: C.long(ldt),
		nq: C.int(nq), nk: C.int(nk), pnk: C.int(pnk), plo: C.int(plo), phi: C.int(phi), own: 1,
		g0: C.int(g0), kvn: C.int(kvn), blocks: C.int(blocks), block: C.int(block),
		pack0: C.int(ap.packs), row0: C.int(ap.row)})
	ap.packs += kvn
	ap.row += kvn * (qs.cols / hd / (ks.cols / hd)) * blocks
	ap.ldt = max(ap.ldt, ldt)
}

// share appends the part of the attention dst = Attention(q, k', v')
// whose keys and values k', v' are the first nk rows of part owner's
// (same storage), group query heads a kv head: it reads owner's layouts
// instead of laying out its own.
func (ap *attnParts) share(d, qs *Tensor, nk, owner, group, blocks, block int) {
	nq := qs.rows
	_, _ = qs.data[(nq-1)*qs.stride+qs.cols-1], d.data[(nq-1)*d.stride+d.cols-1]
	for _, s := range [][]float32{qs.data, d.data} {
		ap.pin.Pin(&s[0])
	}
	p := ap.parts[owner]
	p.q, p.o, p.ldq, p.ldo, p.nq, p.nk, p.own = fptr(qs.data), fptr(d.data), C.long(qs.stride), C.long(d.stride), C.int(nq), C.int(nk), 0
	p.blocks, p.block, p.row0 = C.int(blocks), C.int(block), C.int(ap.row)
	ap.parts = append(ap.parts, p)
	ap.row += int(p.kvn) * group * blocks
}

// runAttn runs the parts as one job of the team (group query heads a kv
// head) and unpins them.
func (b *Backend) runAttn(ap *attnParts, workers, hd, group int, scale float32) {
	defer ap.pin.Unpin()
	if len(ap.parts) == 0 {
		return
	}
	// The team sizes every task's scratch by one stride: the part whose
	// scratch is largest, which need not be the largest stride (the AVX2
	// kernel takes fewer rows a block at long strides, so a middle
	// stride can need more: 48·(672+17) floats > 30·(1008+17)).
	avx2 := cbool(b.attn == attnAVX2)
	ldt, most := ap.ldt, C.long(-1)
	for _, p := range ap.parts {
		if s := C.dlmc_attn_scratch(avx2, p.ldt, C.int(hd)); s > most {
			ldt, most = int(p.ldt), s
		}
	}
	C.dlmc_attn_parts(C.int(workers), avx2, C.int(hd), C.int(group), C.float(scale),
		&ap.parts[0], C.int(len(ap.parts)), C.long(ldt))
}
