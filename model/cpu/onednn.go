package cpu

/*
#cgo LDFLAGS: -ldl
#include "kernels.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"
)

// oneDNN's effective ISA values (dnnl_cpu_isa_t) the backend tests for.
const (
	dnnlISASSE41          = 0x1
	dnnlISAAVX2           = 0x7
	dnnlISAAVX512Core     = 0x27
	dnnlISAAVX512CoreBF16 = 0xe7
)

// dnnlOpen loads oneDNN (libdnnl.so.2, through dlopen) and reports its
// version and effective ISA, or why it cannot be used.
func dnnlOpen() (version string, isa int, err error) {
	if C.dlmc_dnnl_open(C.int(dnnlMaxISA())) != 0 {
		return "", 0, fmt.Errorf("oneDNN: %s", C.GoString(C.dlmc_dnnl_reason()))
	}
	var buf [64]C.char
	C.dlmc_dnnl_describe(&buf[0], C.int(len(buf)))
	return C.GoString(&buf[0]), int(C.dlmc_dnnl_isa()), nil
}

// dnnlMatMul computes c[m,n] = alpha·a·B on oneDNN's matmul primitive,
// single-threaded on the calling thread, with B = b[n,k]ᵀ when bt, else
// b[k,n]. a and b are *float32 (F32) or *uint16 (BF16, when bf16); c is
// F32. It returns the implementation's name when impl is set.
func dnnlMatMul(bf16, bt bool, m, n, k int, alpha float32, a unsafe.Pointer, lda int, b unsafe.Pointer, ldb int, c []float32, ldc int, impl bool) (string, error) {
	return dnnlMatMulThreads(bf16, bt, m, n, k, alpha, a, lda, b, ldb, c, ldc, impl, 1)
}

// dnnlMatMulThreads is dnnlMatMul on threads OpenMP threads of oneDNN's
// own.
func dnnlMatMulThreads(bf16, bt bool, m, n, k int, alpha float32, a unsafe.Pointer, lda int, b unsafe.Pointer, ldb int, c []float32, ldc int, impl bool, threads int) (string, error) {
	var buf [96]C.char
	var ip *C.char
	if impl {
		ip = &buf[0]
	}
	s := C.dlmc_dnnl_mm(cbool(bf16), cbool(bt), C.long(m), C.long(n), C.long(k), C.float(alpha),
		a, C.long(lda), b, C.long(ldb), (*C.float)(unsafe.Pointer(&c[0])), C.long(ldc), ip, C.int(len(buf)), C.int(threads))
	if s == -2 {
		return "", errors.New("oneDNN matmul: oneDNN is not loaded")
	}
	if s != 0 {
		return "", fmt.Errorf("oneDNN matmul %d×%d×%d (bf16 %v): status %d", m, n, k, bf16, int(s))
	}
	if impl {
		return C.GoString(ip), nil
	}
	return "", nil
}

// toBF16 rounds the rows×cols matrix src (row stride lds) to BF16, ties to
// even, into dst (dense, len ≥ rows·cols).
func toBF16(dst []uint16, src []float32, rows, cols, lds int) {
	if rows == 0 || cols == 0 {
		return
	}
	checkSpan("src", src, rows, cols, lds)
	if len(dst) < rows*cols {
		panic("cpu: toBF16: dst too short")
	}
	C.dlmc_f32_to_bf16((*C.uint16_t)(unsafe.Pointer(&dst[0])), (*C.float)(unsafe.Pointer(&src[0])), C.long(rows), C.long(cols), C.long(lds))
}

// packedWeight is a weight reordered once, at load, into oneDNN's blocked
// layout for its matmul (Options.PackWeights), in a 2 MB-page mapping of
// its own, freed when the weight's Tensor is collected.
type packedWeight struct {
	p     *C.dlmc_dnnl_packed
	bf16  bool
	bytes int
}

// dnnlPack packs the weight w[n,k] (F32 data or BF16 bits, row stride ldw)
// on threads threads. It returns nil, nil where the layout oneDNN picks is
// w's own.
func dnnlPack(bf16 bool, n, k int, w unsafe.Pointer, ldw, threads int) (*packedWeight, error) {
	var st C.int
	p := C.dlmc_dnnl_pack(cbool(bf16), C.long(n), C.long(k), w, C.long(ldw), C.int(threads), &st)
	switch {
	case st == 1:
		return nil, nil
	case p == nil:
		return nil, fmt.Errorf("oneDNN: packing a [%d, %d] weight: status %d", n, k, int(st))
	}
	pw := &packedWeight{p: p, bf16: bf16, bytes: int(C.dlmc_dnnl_packed_bytes(p))}
	runtime.SetFinalizer(pw, (*packedWeight).free)
	return pw, nil
}

// free unmaps the layout now (MarkTable, Free) rather than when pw is
// collected.
func (pw *packedWeight) free() {
	if pw.p != nil {
		C.dlmc_dnnl_packed_free(pw.p)
		pw.p = nil
	}
	runtime.SetFinalizer(pw, nil)
}

// matMul computes c[m,n] = a[m,k] · wᵀ from the packed w, a F32 (or BF16
// bits when the weight is BF16). It reports false, having written
// nothing, when the matmul oneDNN picks for m rows wants another layout.
func (pw *packedWeight) matMul(m, n, k int, a unsafe.Pointer, lda int, c []float32, ldc, threads int) (bool, error) {
	s := C.dlmc_dnnl_mm_packed(cbool(pw.bf16), C.long(m), C.long(n), C.long(k), a, C.long(lda), pw.p,
		(*C.float)(unsafe.Pointer(&c[0])), C.long(ldc), C.int(threads))
	runtime.KeepAlive(pw)
	switch s {
	case 0:
		return true, nil
	case 1:
		return false, nil
	}
	return false, fmt.Errorf("oneDNN matmul %d×%d×%d on a packed weight: status %d", m, n, k, int(s))
}
