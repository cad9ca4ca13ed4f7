package cpu

/*
#include "kernels.h"
*/
import "C"

import (
	"fmt"

	"runtime"
	"syscall"
	"unsafe"

	"github.com/dlmcache/dlmcache/model/backend"
)

// bf16Dot reports whether BF16 products run on bf16mm.c's vdpbf16ps
// kernel: AVX512-BF16 under no ISA cap below native.
var bf16Dot = HasBF16Dot()

// bf16LayoutRows is the row block of dlmc_bf16_pack's layout: a product
// with a laid-out weight starts its parts on multiples of it.
const bf16LayoutRows = 64

// bf16Layout is a BF16 weight laid out at load for dlmc_bf16_mm_packed
// (dlmc_bf16_pack's blocks of 64 rows), in an anonymous mapping of its
// own outside the Go heap, unmapped when the layout is collected.
type bf16Layout struct {
	v []uint32
}

// layOutBF16 lays the BF16 weight t out for bf16mm.c's product (its rows
// of 64 on the backend's threads), at the size of the weight itself
// rounded up to 64 rows; t keeps bf16 for its views and ToHost. A layout
// that cannot be mapped leaves t as it was.
func (b *Backend) layOutBF16(t *Tensor) {
	rows, cols := t.rows, t.cols
	if cols%2 != 0 || rows < 1 {
		return
	}
	blocks := (rows + bf16LayoutRows - 1) / bf16LayoutRows
	n := blocks * bf16LayoutRows * cols / 2
	mem, err := syscall.Mmap(-1, 0, 4*n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS)
	if err != nil {
		return
	}
	// 2 MB pages where the kernel has them: a fault per 2 MB rather than
	// per 4 KB as the layout is written.
	_ = syscall.Madvise(mem, syscall.MADV_HUGEPAGE)
	l := &bf16Layout{v: unsafe.Slice((*uint32)(unsafe.Pointer(&mem[0])), n)}
	runtime.SetFinalizer(l, (*bf16Layout).free)
	b.parallel(blocks, max(1, rowGrain(cols)/bf16LayoutRows), func(lo, hi int) {
		r0, r1 := lo*bf16LayoutRows, min(rows, hi*bf16LayoutRows)
		C.dlmc_bf16_pack(C.int(r1-r0), C.int(cols), (*C.uint16_t)(unsafe.Pointer(&t.bf16[r0*t.stride])), C.long(t.stride),
			(*C.uint32_t)(unsafe.Pointer(&l.v[r0*cols/2])))
	})
	t.bfl = l
	b.bf16LaidOut.Add(int64(4 * n))
}

// free unmaps the layout.
func (l *bf16Layout) free() {
	runtime.SetFinalizer(l, nil)
	if len(l.v) > 0 {
		_ = syscall.Munmap(unsafe.Slice((*byte)(unsafe.Pointer(&l.v[0])), 4*len(l.v)))
		l.v = nil
	}
}

// MarkTable implements backend.TableMarker: a BF16 weight laid out for
// products that is only gathered from (an untied embedding) drops its
// layout; Embed reads its rows from the checkpoint's pages.
func (b *Backend) MarkTable(t backend.Tensor) {
	x, ok := t.(*Tensor)
	if !ok || x.bfl == nil {
		return
	}
	b.bf16LaidOut.Add(-int64(4 * len(x.bfl.v)))
	x.bfl.free()
	x.bfl = nil
}

// bf16MM computes c[m × n] (row stride ldc) = x·wᵀ for m rows of the BF16
// activations x (k values each, ldx apart) and rows [j0, j0+n) of the
// BF16 weight w, accumulating in F32 on vdpbf16ps: on w's layout when it
// has one (j0 then a multiple of bf16LayoutRows), else packing w as it
// goes. It reports false, writing nothing, where the kernel cannot run
// (no AVX512-BF16, odd k).
func bf16MM(m, n, k int, x []uint16, ldx int, w *Tensor, j0 int, c []float32, ldc int) bool {
	if m == 0 || n == 0 {
		return true
	}
	if k != w.cols || len(x) < (m-1)*ldx+k || j0+n > w.rows || len(c) < (m-1)*ldc+n {
		panic("cpu: bf16MM: bad shape or buffers too short")
	}
	xp, cp := (*C.uint16_t)(unsafe.Pointer(&x[0])), (*C.float)(unsafe.Pointer(&c[0]))
	if w.bfl != nil {
		if j0%bf16LayoutRows != 0 {
			panic(fmt.Sprintf("cpu: bf16MM: row %d of a laid-out weight is not a multiple of %d", j0, bf16LayoutRows))
		}
		ok := C.dlmc_bf16_mm_packed(C.int(m), C.int(n), C.int(k), xp, C.long(ldx),
			(*C.uint32_t)(unsafe.Pointer(&w.bfl.v[j0*k/2])), cp, C.long(ldc)) == 0
		runtime.KeepAlive(w.bfl)
		return ok
	}
	src := w.bf16[j0*w.stride:]
	return C.dlmc_bf16_mm(C.int(m), C.int(n), C.int(k), xp, C.long(ldx),
		(*C.uint16_t)(unsafe.Pointer(&src[0])), C.long(w.stride), cp, C.long(ldc)) == 0
}

// matMulBF16Dot is MatMul for a BF16 w on bf16mm.c's kernel, x rounded
// to BF16 in xh (n rows of in values): the product cut along w's rows
// into one part per thread, on multiples of 64 rows where w is laid out.
func (b *Backend) matMulBF16Dot(d, xs, ws *Tensor, xh []uint16) {
	n, in, out := xs.rows, xs.cols, ws.rows
	part := func(r0, r1, c0, c1 int) {
		bf16MM(r1-r0, c1-c0, in, xh[r0*in:], in, ws, c0, d.data[r0*d.stride+c0:], d.stride)
	}
	if ws.bfl == nil {
		b.forParts(n, in, out, part)
		return
	}
	if !b.splits(n, in, out) {
		part(0, n, 0, out)
		return
	}
	blocks := (out + bf16LayoutRows - 1) / bf16LayoutRows
	if blocks < b.threads {
		// Too few blocks for the threads: x's rows are cut instead.
		parts, edge := b.parts16(n)
		fanOut(parts, func(p int) {
			if lo, hi := edge(p), edge(p+1); lo < hi {
				part(lo, hi, 0, out)
			}
		})
		return
	}
	parts := b.threads
	fanOut(parts, func(p int) {
		lo, hi := bf16LayoutRows*(p*blocks/parts), min(out, bf16LayoutRows*((p+1)*blocks/parts))
		if lo < hi {
			part(0, n, lo, hi)
		}
	})
}
