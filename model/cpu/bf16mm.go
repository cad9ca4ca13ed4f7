package cpu

/*
#include "kernels.h"
*/
import "C"

import (
	"fmt"
	"runtime"
	"unsafe"

	"github.com/dlmcache/dlmcache/model/backend"
)

// bf16Dot reports whether bf16mm.c's vdpbf16ps kernel runs here:
// AVX512-BF16 under no ISA cap below native.
var bf16Dot = HasBF16Dot()

// bf16LayoutRows is the row block of dlmc_bf16_pack's layout: a product
// with a laid-out weight starts its parts on multiples of it.
const bf16LayoutRows = 64

// bf16Layout is a BF16 weight laid out at load for dlmc_bf16_mm_packed
// (dlmc_bf16_pack's blocks of 64 rows), in a layoutMem of its own.
type bf16Layout struct {
	*layoutMem
	v []uint32
}

// layOutBF16 lays the BF16 weight t out for bf16mm.c's product (its rows
// of 64 on the backend's threads), at the size of the weight itself
// rounded up to 64 rows; t keeps bf16 for its views and ToHost. An F16
// weight is rounded to BF16 (ties to even, as f16ToBF16 rounds) 64 rows
// at a time on the way in, and keeps f16. A layout that cannot be mapped
// (or an odd k, or a CPU without the kernel) leaves t as it was.
func (b *Backend) layOutBF16(t *Tensor) {
	rows, cols := t.rows, t.cols
	if cols%2 != 0 || rows < 1 || !bf16Dot || t.bf16 == nil && t.f16 == nil {
		return
	}
	blocks := (rows + bf16LayoutRows - 1) / bf16LayoutRows
	n := blocks * bf16LayoutRows * cols / 2
	lm := newLayoutMem(4 * n)
	if lm == nil {
		return
	}
	l := &bf16Layout{layoutMem: lm, v: unsafe.Slice((*uint32)(unsafe.Pointer(&lm.mem[0])), n)}
	pack := func(r0, r1 int, w *uint16, ldw int) {
		C.dlmc_bf16_pack(C.int(r1-r0), C.int(cols), (*C.uint16_t)(unsafe.Pointer(w)), C.long(ldw),
			(*C.uint32_t)(unsafe.Pointer(&l.v[r0*cols/2])))
	}
	b.parallel(blocks, max(1, rowGrain(cols)/bf16LayoutRows), func(lo, hi int) {
		r0, r1 := lo*bf16LayoutRows, min(rows, hi*bf16LayoutRows)
		if t.bf16 != nil {
			pack(r0, r1, &t.bf16[r0*t.stride], t.stride)
			return
		}
		f := b.bufs.scratch(bf16LayoutRows * cols)
		h := scratchOf[uint16](b.bufs, bf16LayoutRows*cols)
		for r := r0; r < r1; r += bf16LayoutRows {
			e := min(r+bf16LayoutRows, r1)
			f16Rows(f, t, r, e)
			toBF16(h, f, e-r, cols, cols)
			pack(r, e, &h[0], cols)
		}
		putOf(b.bufs, h)
		b.bufs.put(f)
	})
	t.bfl = l
	b.bf16LaidOut.Add(int64(4 * n))
}

// MarkTable implements backend.TableMarker: a weight laid out for
// products (a BF16 one for bf16mm.c, an F32 one for oneDNN or the blocked
// panel kernel, a Q8_0 one for the int8 product) that
// is only gathered from (an untied embedding) drops its layout; Embed
// reads its rows from the checkpoint's pages.
func (b *Backend) MarkTable(t backend.Tensor) {
	if x, ok := t.(*Tensor); ok {
		b.dropLayout(x)
	}
}

// dropLayout unmaps the BF16 layout of x and its layouts for oneDNN, the
// blocked panel kernel and the Q8_0 product (Options.PackWeights), where
// it has them (MarkTable, Free).
func (b *Backend) dropLayout(x *Tensor) {
	if x.packed != nil {
		b.packedBytes.Add(-int64(x.packed.bytes))
		x.packed.free()
		x.packed = nil
	}
	if x.q8l != nil {
		b.q8LaidOut.Add(-int64(len(x.q8l.mem)))
		x.q8l.free()
		x.q8l = nil
	}
	if x.wgl != nil {
		b.wgLaidOut.Add(-int64(len(x.wgl.mem)))
		x.wgl.free()
		x.wgl = nil
	}
	if x.bfl == nil {
		return
	}
	b.bf16LaidOut.Add(-int64(4 * len(x.bfl.v)))
	x.bfl.free()
	x.bfl = nil
}

// bf16MM computes c[m × n] (row stride ldc) = x·wᵀ for m rows of the BF16
// activations x (k values each, ldx apart) and rows [j0, j0+n) of the
// BF16 weight w laid out by layOutBF16 (j0 a multiple of bf16LayoutRows),
// accumulating in F32 on vdpbf16ps.
func bf16MM(m, n, k int, x []uint16, ldx int, w *Tensor, j0 int, c []float32, ldc int) {
	if m == 0 || n == 0 {
		return
	}
	if w.bfl == nil || k != w.cols || len(x) < (m-1)*ldx+k || j0+n > w.rows || len(c) < (m-1)*ldc+n || j0%bf16LayoutRows != 0 {
		panic(fmt.Sprintf("cpu: bf16MM: %d×%d×%d from row %d of %v (laid out %v): bad shape or buffers too short", m, n, k, j0, w, w.bfl != nil))
	}
	if C.dlmc_bf16_mm_packed(C.int(m), C.int(n), C.int(k), (*C.uint16_t)(unsafe.Pointer(&x[0])), C.long(ldx),
		(*C.uint32_t)(unsafe.Pointer(&w.bfl.v[j0*k/2])), (*C.float)(unsafe.Pointer(&c[0])), C.long(ldc)) != 0 {
		panic("cpu: bf16MM: the kernel declined a laid-out weight")
	}
	runtime.KeepAlive(w.bfl)
}

// matMulBF16Dot is MatMul for a BF16 w laid out by layOutBF16, shapes
// checked, on bf16mm.c's kernel with x rounded to BF16 (activationsBF16,
// as on oneDNN's BF16 matmul): the product cut along w's rows into one
// part per thread on multiples of 64 rows, or along x's rows where w has
// fewer blocks than the backend has threads.
func (b *Backend) matMulBF16Dot(d, xs, ws *Tensor) {
	checkSpan("dst", d.data, xs.rows, ws.rows, d.stride)
	xh := b.activationsBF16(xs)
	defer putOf(b.bufs, xh)
	b.bf16Product(d, xh, xs.rows, xs.cols, ws, 0, ws.rows)
}

// bf16Product computes d[n × (j1−j0)] = x·w[j0:j1]ᵀ for the n rows of the
// BF16 activations xh (in values each, dense) and rows [j0, j1) of the
// laid-out w (j0 a multiple of bf16LayoutRows), cut as matMulBF16Dot
// says.
func (b *Backend) bf16Product(d *Tensor, xh []uint16, n, in int, ws *Tensor, j0, j1 int) {
	out := j1 - j0
	part := func(r0, r1, c0, c1 int) {
		bf16MM(r1-r0, c1-c0, in, xh[r0*in:], in, ws, j0+c0, d.data[r0*d.stride+c0:], d.stride)
	}
	if !b.splits(n, in, out) {
		part(0, n, 0, out)
		return
	}
	blocks := (out + bf16LayoutRows - 1) / bf16LayoutRows
	if blocks < b.threads {
		parts, edge := b.parts16(n)
		fanOut(parts, func(p int) {
			if lo, hi := edge(p), edge(p+1); lo < hi {
				part(lo, hi, 0, out)
			}
		})
		return
	}
	fanOut(b.threads, func(p int) {
		lo, hi := bf16LayoutRows*(p*blocks/b.threads), min(out, bf16LayoutRows*((p+1)*blocks/b.threads))
		if lo < hi {
			part(0, n, lo, hi)
		}
	})
}
