package cpu

// The package's C lives in the .c files beside this one, each Go binding
// declared in kernels.h; the flags below apply to all of it (cgo joins every
// file's CFLAGS), so a warning anywhere in it fails the build.

/*
#cgo CFLAGS: -O2 -Wall -Wextra -Werror
#cgo LDFLAGS: -lm
#include "kernels.h"
*/
import "C"

import "unsafe"

// simd reports whether the AVX2+FMA kernels run on this machine.
var simd = C.dlmc_have_avx2() != 0

func cbool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

// softmaxRows turns each row of the m×n matrix s (contiguous) into
// e^(s−max row) in place and stores 1/sum of each row in inv[:m].
func softmaxRows(s []float32, m, n int, inv []float32) {
	if m == 0 {
		return
	}
	if n <= 0 || len(s) < m*n || len(inv) < m {
		panic("cpu: softmaxRows: buffers too short")
	}
	C.dlmc_softmax_rows(cbool(simd), (*C.float)(unsafe.Pointer(&s[0])), C.int(m), C.int(n), (*C.float)(unsafe.Pointer(&inv[0])))
}

// siluMul sets dst[j] = g[j]/(1+e^(−g[j]))·u[j]; dst may be g.
func siluMul(dst, g, u []float32) {
	n := len(dst)
	if n == 0 {
		return
	}
	if len(g) < n || len(u) < n {
		panic("cpu: siluMul: buffers too short")
	}
	C.dlmc_silu_mul(cbool(simd), (*C.float)(unsafe.Pointer(&dst[0])), (*C.float)(unsafe.Pointer(&g[0])), (*C.float)(unsafe.Pointer(&u[0])), C.int(n))
}

// expMany sets dst[j] = e^x[j] with the vector kernel when useSIMD (and
// the machine has it), else the scalar one. For tests.
func expMany(useSIMD bool, dst, x []float32) {
	if len(dst) == 0 {
		return
	}
	C.dlmc_exp_many(cbool(useSIMD && simd), (*C.float)(unsafe.Pointer(&dst[0])), (*C.float)(unsafe.Pointer(&x[0])), C.int(len(dst)))
}

// bf16Rows converts rows [lo, hi) of the BF16 weight w into dst, row after
// row (len(dst) ≥ (hi−lo)·cols), exactly, in one cgo call: an AVX2 loop
// where the machine has it (BenchmarkBF16Decode: 6× the Go loop's speed).
func bf16Rows(dst []float32, w *Tensor, lo, hi int) { bf16RowsWith(simd, dst, w, lo, hi) }

// bf16RowsWith is bf16Rows with the AVX2 loop only when useSIMD (and the
// machine has it). For tests.
func bf16RowsWith(useSIMD bool, dst []float32, w *Tensor, lo, hi int) {
	if hi <= lo || w.cols == 0 {
		return
	}
	if len(dst) < (hi-lo)*w.cols {
		panic("cpu: bf16Rows: dst too short")
	}
	src := w.bf16[lo*w.stride:]
	_ = src[(hi-lo-1)*w.stride+w.cols-1]
	C.dlmc_bf16_rows(cbool(useSIMD && simd), (*C.float)(unsafe.Pointer(&dst[0])), (*C.uint16_t)(unsafe.Pointer(&src[0])), C.long(hi-lo), C.long(w.cols), C.long(w.stride))
}

// q8Rows decodes rows [lo, hi) of the Q8_0 weight w into dst (dense,
// len ≥ (hi−lo)·cols), exactly as ggml dequantizes them (q·d), in one cgo
// call: an AVX2 loop where the machine has it.
func q8Rows(dst []float32, w *Tensor, lo, hi int) { q8RowsWith(simd, dst, w, lo, hi) }

// q8RowsWith is q8Rows with the AVX2 loop only when useSIMD (and the
// machine has it). For tests.
func q8RowsWith(useSIMD bool, dst []float32, w *Tensor, lo, hi int) {
	if hi <= lo || w.cols == 0 {
		return
	}
	if len(dst) < (hi-lo)*w.cols {
		panic("cpu: q8Rows: dst too short")
	}
	src := w.q8[lo*w.q8Stride:]
	_ = src[(hi-lo)*w.q8Stride-1]
	C.dlmc_q8_0_rows(cbool(useSIMD && simd), (*C.float)(unsafe.Pointer(&dst[0])), (*C.uint8_t)(unsafe.Pointer(&src[0])), C.long(hi-lo), C.long(w.cols), C.long(w.q8Stride))
}

// avx512 reports whether the AVX-512F attention kernel runs on this machine.
var avx512 = C.dlmc_have_avx512() != 0

// attnKernel names the fused attention kernel a backend runs (attn_rows
// or attn_rows2 in C), or none: Attention's GEMM path.
type attnKernel int

const (
	attnNone   attnKernel = iota
	attnAVX2              // 6-row blocks, 8 lanes (AVX2+FMA)
	attnAVX512            // 8-row blocks, 16 lanes (AVX-512F)
)

func (k attnKernel) String() string {
	switch k {
	case attnAVX2:
		return "AVX2"
	case attnAVX512:
		return "AVX-512"
	}
	return "none"
}

// bestAttn is the widest fused attention kernel this machine runs.
var bestAttn = func() attnKernel {
	switch {
	case avx512:
		return attnAVX512
	case simd:
		return attnAVX2
	}
	return attnNone
}()

// panelMaxK is the most columns (the inner dimension k) a weight may have
// to run on the panel kernel: a 16-row panel of it (k·64 bytes) stays in
// L1 beside the tile's rows of x.
const panelMaxK = 512

// panelPack lays out the weight w [n, k] (row stride ldw) for the panel
// kernel (panelMatMul):
// ⌈n/16⌉ panels of 16 rows, k-major, zero-padded.
func panelPack(w []float32, ldw, n, k int) []float32 {
	p := make([]float32, (n+15)/16*16*k)
	if n == 0 || k == 0 {
		return p
	}
	_ = w[(n-1)*ldw+k-1]
	C.dlmc_panel_pack(fptr(w), C.long(ldw), C.int(n), C.int(k), fptr(p))
	return p
}
