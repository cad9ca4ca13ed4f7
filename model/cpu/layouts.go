package cpu

/*
#include "kernels.h"
*/
import "C"

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/dlmcache/dlmcache/model/backend"
)

// layoutMem is the memory of a weight's layout made at load (bf16Layout,
// q8Layout, wgLayout): an anonymous mapping of its own outside the Go
// heap, unmapped by free or when it is collected.
type layoutMem struct{ mem []byte }

// newLayoutMem maps n bytes for a layout; nil where they cannot be mapped
// (the weight then stays as it was).
func newLayoutMem(n int) *layoutMem {
	mem, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS)
	if err != nil {
		return nil
	}
	l := &layoutMem{mem: mem}
	runtime.SetFinalizer(l, (*layoutMem).free)
	return l
}

// free unmaps the layout now (MarkTable, Free) rather than when it is
// collected.
func (l *layoutMem) free() {
	runtime.SetFinalizer(l, nil)
	if len(l.mem) > 0 {
		_ = syscall.Munmap(l.mem)
		l.mem = nil
	}
}

// q8LayoutRows is the row group of dlmc_q8_layout: a product with a
// laid-out weight starts its parts on multiples of it.
const q8LayoutRows = 16

// q8Layout is a Q8_0 weight laid out at load for the AVX512-VNNI product
// (dlmc_q8_layout: per group of 16 rows and block of 32 values, the
// quants in the product's order and the 16 F16 scales), in an anonymous
// mapping of its own outside the Go heap: the Q8_0 blocks' own bytes,
// reordered, so it takes the memory the mapped weight did (rounded up to
// 16 rows).
type q8Layout struct {
	*layoutMem
	q []int32  // groups · nb · 128
	s []uint16 // groups · nb · 16
}

// layOutQ8 lays the Q8_0 weight t out for dlmc_qmatmul_laid, its groups
// of 16 rows on the backend's threads. Where the layout cannot be mapped
// (or the CPU has no AVX512-VNNI) t stays as it was: its products pack
// the weight as they go.
func (b *Backend) layOutQ8(t *Tensor) {
	if t.qType != backend.Q8_0 || t.rows < 1 || t.cols%32 != 0 || b.quantISA != isaAVX512VNNI {
		return
	}
	groups := (t.rows + q8LayoutRows - 1) / q8LayoutRows
	nb := t.cols / 32
	nq, ns := groups*nb*128, groups*nb*16
	lm := newLayoutMem(4*nq + 2*ns)
	if lm == nil {
		return
	}
	l := &q8Layout{layoutMem: lm, q: unsafe.Slice((*int32)(unsafe.Pointer(&lm.mem[0])), nq),
		s: unsafe.Slice((*uint16)(unsafe.Pointer(&lm.mem[4*nq])), ns)}
	var failed atomic.Bool
	b.parallel(groups, max(1, rowGrain(t.cols)/q8LayoutRows), func(lo, hi int) {
		if C.dlmc_q8_layout((*C.uint8_t)(unsafe.Pointer(&t.q[0])), C.long(t.qStride), C.long(t.rows), C.long(t.cols),
			C.long(lo), C.long(hi), (*C.int32_t)(unsafe.Pointer(&l.q[0])), (*C.uint16_t)(unsafe.Pointer(&l.s[0]))) != 0 {
			failed.Store(true) // every part fails alike (the CPU's)
		}
	})
	if failed.Load() {
		l.free()
		return
	}
	t.q8l = l
	b.q8LaidOut.Add(int64(len(lm.mem)))
}

// qMatMulLaid is qMatMul on w's Q8_0 layout (q8Layout), for columns
// [j0, j0+n) with j0 a multiple of q8LayoutRows; activations as
// quantizeAct writes them for isaAVX512VNNI. qMatMul has checked the
// shapes and buffers.
func qMatMulLaid(m, n, k int, q []byte, d []float32, w *Tensor, j0 int, c []float32, ldc int, pack []byte) {
	l := w.q8l
	nb := k / 32
	g := j0 / q8LayoutRows
	rc := C.dlmc_qmatmul_laid(C.int(m), C.int(n), C.int(k), unsafe.Pointer(&q[0]), (*C.float)(unsafe.Pointer(&d[0])),
		(*C.int32_t)(unsafe.Pointer(&l.q[g*nb*128])), (*C.uint16_t)(unsafe.Pointer(&l.s[g*nb*16])),
		(*C.float)(unsafe.Pointer(&c[0])), C.long(ldc), unsafe.Pointer(&pack[0]))
	runtime.KeepAlive(l)
	if rc != 0 {
		panic(fmt.Sprintf("cpu: qMatMulLaid: %s weight [%d, %d] has no laid-out product here", w.qType, w.rows, w.cols))
	}
}

// wgLayout is an F32, F16 or BF16 weight laid out at load for the
// blocked panel kernel (dlmc_wg_layout: the panels dlmc_wg_block would
// pack at every product), where its products run there (AVX2 machines,
// or no oneDNN): the weight's own values, reordered, rows rounded up to
// 16, in an layoutMem of its own; a 16-bit weight's values stay 16-bit
// (the kernel converts each chunk in order, where it transposed them from
// the weight's rows), so the layout takes the memory the mapped weight
// did.
type wgLayout struct {
	*layoutMem
	typ C.int // wgF32, wgF16, wgBF16
}

// wgType is the blocked panel kernel's type of t's values, where they
// start and how many there are.
func wgType(t *Tensor) (C.int, unsafe.Pointer, int) {
	switch {
	case t.f16 != nil:
		return wgF16, unsafe.Pointer(&t.f16[0]), len(t.f16)
	case t.bf16 != nil:
		return wgBF16, unsafe.Pointer(&t.bf16[0]), len(t.bf16)
	default:
		return wgF32, unsafe.Pointer(&t.data[0]), len(t.data)
	}
}

// layOutWG lays the F32, F16 or BF16 weight t out for the blocked panel
// kernel, its blocks of DLMC_WG_NB rows on the backend's threads; where
// the layout cannot be mapped t stays as it was.
func (b *Backend) layOutWG(t *Tensor) {
	rows, cols := t.rows, t.cols
	if rows < 1 || cols < 1 || (t.data == nil && t.f16 == nil && t.bf16 == nil) || !simd {
		return
	}
	typ, w, _ := wgType(t)
	es := 4
	if typ != wgF32 {
		es = 2
	}
	lm := newLayoutMem(es * (rows + 15) / 16 * 16 * cols)
	if lm == nil {
		return
	}
	l := &wgLayout{layoutMem: lm, typ: typ}
	blocks := (rows + C.DLMC_WG_NB - 1) / C.DLMC_WG_NB
	b.parallel(blocks, 1, func(lo, hi int) {
		C.dlmc_wg_layout(typ, w, C.long(t.stride), C.int(rows), C.int(cols), C.int(lo), C.int(hi), unsafe.Pointer(&l.mem[0]))
	})
	runtime.KeepAlive(t)
	t.wgl = l
	b.wgLaidOut.Add(int64(len(lm.mem)))
}
