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

import (
	"fmt"
	"unsafe"

	"github.com/dlmcache/dlmcache/model/backend"
)

// simd reports whether the AVX2+FMA kernels run on this machine.
var simd = isaCap >= ISAAVX2 && C.dlmc_have_avx2() != 0

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
	halfRows(false, useSIMD && simd, dst, w, lo, hi)
}

// f16c reports whether F16 weights are converted with F16C (vcvtph2ps):
// where the AVX2 kernels run (not under DLMCACHE_CPU_ISA=generic) and the
// CPU has F16C.
var f16c = simd && C.dlmc_have_f16c() != 0

// f16Rows converts rows [lo, hi) of the F16 weight w into dst, row after
// row (len(dst) ≥ (hi−lo)·cols), exactly, in one cgo call: F16C where the
// machine has it (f16c), else a plain C loop.
func f16Rows(dst []float32, w *Tensor, lo, hi int) { f16RowsWith(f16c, dst, w, lo, hi) }

// f16RowsWith is f16Rows with the F16C loop only when useF16C (and the
// machine has it). For tests.
func f16RowsWith(useF16C bool, dst []float32, w *Tensor, lo, hi int) {
	halfRows(true, useF16C && f16c, dst, w, lo, hi)
}

// rowsToDecode reports whether rows [lo, hi) of w hold values to decode
// into dst, and panics, naming fn, when dst is too short for them.
func rowsToDecode(fn string, dst []float32, w *Tensor, lo, hi int) bool {
	if hi <= lo || w.cols == 0 {
		return false
	}
	if len(dst) < (hi-lo)*w.cols {
		panic("cpu: " + fn + ": dst too short")
	}
	return true
}

// halfRows converts rows [lo, hi) of w's F16 values (f16) or BF16 ones
// into dst in one cgo call, on the vector loop when vec.
func halfRows(f16, vec bool, dst []float32, w *Tensor, lo, hi int) {
	fn, h := "bf16Rows", w.bf16
	if f16 {
		fn, h = "f16Rows", w.f16
	}
	if !rowsToDecode(fn, dst, w, lo, hi) {
		return
	}
	src := h[lo*w.stride:]
	_ = src[(hi-lo-1)*w.stride+w.cols-1]
	d, p := (*C.float)(unsafe.Pointer(&dst[0])), (*C.uint16_t)(unsafe.Pointer(&src[0]))
	if f16 {
		C.dlmc_f16_rows(cbool(vec), d, p, C.long(hi-lo), C.long(w.cols), C.long(w.stride))
	} else {
		C.dlmc_bf16_rows(cbool(vec), d, p, C.long(hi-lo), C.long(w.cols), C.long(w.stride))
	}
}

// quantRows decodes rows [lo, hi) of the quantized weight w into dst
// (dense, len ≥ (hi−lo)·cols), exactly as ggml dequantizes them, in one
// cgo call: an AVX2 loop where the machine has it.
func quantRows(dst []float32, w *Tensor, lo, hi int) { quantRowsWith(simd, dst, w, lo, hi) }

// quantRowsWith is quantRows with the AVX2 loop only when useSIMD (and the
// machine has it). For tests.
func quantRowsWith(useSIMD bool, dst []float32, w *Tensor, lo, hi int) {
	if !rowsToDecode("quantRows", dst, w, lo, hi) {
		return
	}
	src := w.q[lo*w.qStride:]
	_ = src[(hi-lo)*w.qStride-1]
	C.dlmc_quant_rows(cbool(useSIMD && simd), C.int(w.qType), (*C.float)(unsafe.Pointer(&dst[0])), (*C.uint8_t)(unsafe.Pointer(&src[0])), C.long(hi-lo), C.long(w.cols), C.long(w.qStride))
}

// The instruction sets of the int8 products (quant.c's DLMC_ISA_*).
const (
	isaGeneric    = C.DLMC_ISA_GENERIC
	isaAVX2       = C.DLMC_ISA_AVX2
	isaAVXVNNI    = C.DLMC_ISA_AVXVNNI
	isaAVX512VNNI = C.DLMC_ISA_AVX512VNNI
)

// quantISA is the best instruction set for the int8 products this machine
// runs.
var quantISA = capQuantISA(int(C.dlmc_quant_isa()))

// quantISASupported reports whether this machine runs the int8 products'
// instruction set isa (one below quantISA may be missing: AVX-VNNI on an
// AVX512-VNNI processor).
func quantISASupported(isa int) bool {
	return C.dlmc_quant_isa_supported(C.int(isa)) != 0 && isa <= capQuantISA(isaAVX512VNNI)
}

// isaNames names quantISA's values.
var isaNames = map[int]string{isaGeneric: "generic C", isaAVX2: "AVX2", isaAVXVNNI: "AVX-VNNI", isaAVX512VNNI: "AVX512-VNNI"}

// actBytes is the size of one quantized activation for the instruction
// set isa: int16 for the AVX2 product, int8 for the others.
func actBytes(isa int) int {
	if isa == isaAVX2 {
		return 2
	}
	return 1
}

// quantizeAct quantizes rows of x (rows × cols, row stride ldx; cols a
// multiple of 32) per block of 32 into q (rows·cols values of
// actBytes(isa) bytes) and d (rows·cols/32 scales) for the instruction
// set isa; with sums non-nil (rows·cols/32), each block's d·Σq into it
// (what Q4_K's and Q5_K's minima multiply).
func quantizeAct(isa int, q []byte, d, sums []float32, x []float32, rows, cols, ldx int) {
	if rows == 0 {
		return
	}
	if cols%32 != 0 || len(q) < rows*cols*actBytes(isa) || len(d) < rows*cols/32 || len(x) < (rows-1)*ldx+cols ||
		sums != nil && len(sums) < rows*cols/32 {
		panic("cpu: quantizeAct: bad shape or buffers too short")
	}
	var sp *C.float
	if sums != nil {
		sp = (*C.float)(unsafe.Pointer(&sums[0]))
	}
	C.dlmc_quantize_act(C.int(isa), unsafe.Pointer(&q[0]), (*C.float)(unsafe.Pointer(&d[0])), sp,
		(*C.float)(unsafe.Pointer(&x[0])), C.long(rows), C.long(cols), C.long(ldx))
}

// kquantISA is the instruction set a K-quant's int8 products run on where
// isa is the machine's: AVX-VNNI's are AVX2's (only its Q8_0 and Q4_0
// products have a tile of their own).
func kquantISA(isa int) int {
	if isa == isaAVXVNNI {
		return isaAVX2
	}
	return isa
}

// int8Product reports whether a weight of type t has int8 products (all
// but Q4_1 and Q5_1, whose minima are decoded with their values).
func int8Product(t backend.QuantType) bool { return t != backend.Q4_1 && t != backend.Q5_1 }

// needsSums reports whether the int8 products with a weight of type t
// take the activations' block sums (quantizeAct's sums): Q4_K's and
// Q5_K's minima multiply them.
func needsSums(t backend.QuantType) bool { return t == backend.Q4_K || t == backend.Q5_K }

// qMatMul computes c[m × n] (row stride ldc) = x·wᵀ for m quantized rows
// of x (q, d and, for needsSums(w.qType), sums from quantizeAct with the
// same isa, k values each) and rows [j0, j0+n) of the quantized weight w,
// with the instruction set isa (for a K-quant, kquantISA's). pack is
// scratch of qPackBytes for the kernel's packs of w.
func qMatMul(isa int, m, n, k int, q []byte, d, sums []float32, w *Tensor, j0 int, c []float32, ldc int, pack []byte) {
	if m == 0 || n == 0 {
		return
	}
	if k != w.cols || len(q) < m*k*actBytes(isa) || len(d) < m*k/32 || j0+n > w.rows || len(c) < (m-1)*ldc+n || len(pack) < qPackBytes ||
		needsSums(w.qType) && len(sums) < m*k/32 {
		panic("cpu: qMatMul: bad shape or buffers too short")
	}
	if w.q8l != nil && isa == isaAVX512VNNI && j0%q8LayoutRows == 0 {
		qMatMulLaid(m, n, k, q, d, w, j0, c, ldc, pack)
		return
	}
	var sp *C.float
	if sums != nil {
		sp = (*C.float)(unsafe.Pointer(&sums[0]))
	}
	src := w.q[j0*w.qStride : (j0+n)*w.qStride]
	rc := C.dlmc_qmatmul(C.int(isa), C.int(w.qType), C.int(m), C.int(n), C.int(k), unsafe.Pointer(&q[0]),
		(*C.float)(unsafe.Pointer(&d[0])), sp, (*C.uint8_t)(unsafe.Pointer(&src[0])), C.long(w.qStride),
		(*C.float)(unsafe.Pointer(&c[0])), C.long(ldc), unsafe.Pointer(&pack[0]))
	if rc != 0 {
		panic(fmt.Sprintf("cpu: qMatMul: %s weight [%d, %d] has no int8 product on %s", w.qType, w.rows, w.cols, isaNames[isa]))
	}
}

// qPackBytes is the scratch qMatMul's kernels pack w into.
const qPackBytes = C.DLMC_QPACK_BYTES

// avx512 reports whether the AVX-512F kernels run on this machine: the
// fused attention's, and the panel kernels' tiles (panelTiles).
var avx512 = isaCap >= ISAAVX512 && C.dlmc_have_avx512() != 0

// panelTiles names the tiles the panel kernels run on: "AVX-512" (12 rows ×
// 32 columns) where avx512, else "AVX2" (6 × 16); the same bits either way.
var panelTiles = setPanelAVX512(avx512)

// setPanelAVX512 puts the panel kernels on the AVX-512F tiles (on) or
// the AVX2 ones, process-wide, and returns their name; tests switch it
// to compare the two.
func setPanelAVX512(on bool) string {
	if on {
		C.dlmc_panel_set_avx512(1)
		return "AVX-512"
	}
	C.dlmc_panel_set_avx512(0)
	return "AVX2"
}

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

// panelMaxK is the most columns (the inner dimension k) an F32 weight may
// have to be laid out for the panel kernel: a tile's 12 rows of x (48 KB
// at 1024) stay in L1 and its two panels (k·64 bytes each) stream from
// L2, one pass over k. At 1024 rather than 512, the l8-d256 shape's down
// projection (768 columns) is laid out too and its layer halves run fused:
// its full step went from 0.58 to 0.68 of the F32 peak (Zen 5).
const panelMaxK = 1024

// halfPanelMaxK is the most columns an F16, BF16 or quantized weight may
// have to be laid out for the panel kernel: its panels are float32, two
// to seven times the bytes of the weight as kept, so only a small model's
// narrow matrices are.
const halfPanelMaxK = 512

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

// plainWeightNT is c = a·wᵀ (a [m, k], w [n, k], c [m, n]) on a plain C
// loop on this goroutine: each row of c is the same whatever m is.
func plainWeightNT(m, n, k int, a []float32, lda int, w []float32, ldw int, c []float32, ldc int) {
	_, _, _ = a[(m-1)*lda+k-1], w[(n-1)*ldw+k-1], c[(m-1)*ldc+n-1]
	C.dlmc_gemm_nt_plain(C.int(m), C.int(n), C.int(k), fptr(a), C.long(lda), fptr(w), C.long(ldw), fptr(c), C.long(ldc))
}

// panelWeightNT is c = a·wᵀ (a [m, k], w [n, k], c [m, n]) on the panel
// kernel on this goroutine, w laid out for it into a pooled buffer first:
// each row of c is the same whatever m is.
func (b *Backend) panelWeightNT(m, n, k int, a []float32, lda int, w []float32, ldw int, c []float32, ldc int) {
	_, _, _ = a[(m-1)*lda+k-1], w[(n-1)*ldw+k-1], c[(m-1)*ldc+n-1]
	p := b.bufs.scratch((n + 15) / 16 * 16 * k)
	C.dlmc_panel_pack(fptr(w), C.long(ldw), C.int(n), C.int(k), fptr(p))
	C.dlmc_panel_gemm(C.int(m), C.int(n), C.int(k), fptr(a), C.long(lda), fptr(p), fptr(c), C.long(ldc))
	b.bufs.put(p)
}
