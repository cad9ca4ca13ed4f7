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

// q8LayoutRows is the row group of dlmc_q8_layout: a product with a
// laid-out weight starts its parts on multiples of it.
const q8LayoutRows = 16

// q8Layout is a Q8_0 weight laid out at load for the AVX512-VNNI product
// (dlmc_q8_layout: per group of 16 rows and block of 32 values, the
// quants in the product's order and the 16 F16 scales), in an anonymous
// mapping of its own outside the Go heap: the Q8_0 blocks' own bytes,
// reordered, so it takes the memory the mapped weight did (rounded up to
// 16 rows). Unmapped when the layout is collected.
type q8Layout struct {
	mem []byte
	q   []int32  // groups · nb · 128
	s   []uint16 // groups · nb · 16
}

func (l *q8Layout) free() {
	runtime.SetFinalizer(l, nil)
	if len(l.mem) > 0 {
		_ = syscall.Munmap(l.mem)
		l.mem, l.q, l.s = nil, nil, nil
	}
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
	mem, err := syscall.Mmap(-1, 0, 4*nq+2*ns, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS)
	if err != nil {
		return
	}
	l := &q8Layout{mem: mem, q: unsafe.Slice((*int32)(unsafe.Pointer(&mem[0])), nq),
		s: unsafe.Slice((*uint16)(unsafe.Pointer(&mem[4*nq])), ns)}
	runtime.SetFinalizer(l, (*q8Layout).free)
	failed := false
	b.parallel(groups, max(1, rowGrain(t.cols)/q8LayoutRows), func(lo, hi int) {
		if C.dlmc_q8_layout((*C.uint8_t)(unsafe.Pointer(&t.q[0])), C.long(t.qStride), C.long(t.rows), C.long(t.cols),
			C.long(lo), C.long(hi), (*C.int32_t)(unsafe.Pointer(&l.q[0])), (*C.uint16_t)(unsafe.Pointer(&l.s[0]))) != 0 {
			failed = true // every part fails alike (the CPU's)
		}
	})
	if failed {
		l.free()
		return
	}
	t.q8l = l
	b.q8LaidOut.Add(int64(len(mem)))
}

// qMatMulLaid is qMatMul on w's Q8_0 layout (q8Layout), for columns
// [j0, j0+n) with j0 a multiple of q8LayoutRows; activations as
// quantizeAct writes them for isaAVX512VNNI.
func qMatMulLaid(m, n, k int, q []byte, d []float32, w *Tensor, j0 int, c []float32, ldc int, pack []byte) {
	if m == 0 || n == 0 {
		return
	}
	l := w.q8l
	nb := k / 32
	if k != w.cols || j0%q8LayoutRows != 0 || j0+n > w.rows || len(q) < m*k || len(d) < m*nb || len(c) < (m-1)*ldc+n || len(pack) < qPackBytes {
		panic("cpu: qMatMulLaid: bad shape or buffers too short")
	}
	g := j0 / q8LayoutRows
	rc := C.dlmc_qmatmul_laid(C.int(m), C.int(n), C.int(k), unsafe.Pointer(&q[0]), (*C.float)(unsafe.Pointer(&d[0])),
		(*C.int32_t)(unsafe.Pointer(&l.q[g*nb*128])), (*C.uint16_t)(unsafe.Pointer(&l.s[g*nb*16])),
		(*C.float)(unsafe.Pointer(&c[0])), C.long(ldc), unsafe.Pointer(&pack[0]))
	runtime.KeepAlive(l)
	if rc != 0 {
		panic(fmt.Sprintf("cpu: qMatMulLaid: %s weight [%d, %d] has no laid-out product here", w.qType, w.rows, w.cols))
	}
}

// wgLayout is an F32 weight laid out at load for the blocked panel
// kernel (dlmc_wg_layout: the panels dlmc_wg_block would pack at every
// product), where its products run there (AVX2 machines, or no oneDNN):
// the weight's own values, reordered, rows rounded up to 16, in an
// anonymous mapping of its own. Unmapped when the layout is collected.
type wgLayout struct {
	mem []byte
	p   []float32
}

func (l *wgLayout) free() {
	runtime.SetFinalizer(l, nil)
	if len(l.mem) > 0 {
		_ = syscall.Munmap(l.mem)
		l.mem, l.p = nil, nil
	}
}

// layOutWG lays the F32 weight t out for the blocked panel kernel, its
// blocks of DLMC_WG_NB rows on the backend's threads; where the layout
// cannot be mapped t stays as it was.
func (b *Backend) layOutWG(t *Tensor) {
	rows, cols := t.rows, t.cols
	if rows < 1 || cols < 1 || t.data == nil || !simd {
		return
	}
	n := (rows + 15) / 16 * 16 * cols
	mem, err := syscall.Mmap(-1, 0, 4*n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS)
	if err != nil {
		return
	}
	l := &wgLayout{mem: mem, p: unsafe.Slice((*float32)(unsafe.Pointer(&mem[0])), n)}
	runtime.SetFinalizer(l, (*wgLayout).free)
	blocks := (rows + C.DLMC_WG_NB - 1) / C.DLMC_WG_NB
	b.parallel(blocks, 1, func(lo, hi int) {
		C.dlmc_wg_layout(fptr(t.data), C.long(t.stride), C.int(rows), C.int(cols), C.int(lo), C.int(hi), fptr(l.p))
	})
	t.wgl = l
	b.wgLaidOut.Add(int64(len(mem)))
}
