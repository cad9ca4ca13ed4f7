package cpu

/*
#include "kernels.h"
*/
import "C"

import "unsafe"

// fptr is the C view of s's first element.
func fptr(s []float32) *C.float { return (*C.float)(unsafe.Pointer(&s[0])) }

// rmsNormRows runs RMSNorm over rows [lo, hi) of x into d (one cgo call).
func rmsNormRows(useSIMD bool, d, x, w *Tensor, lo, hi int, eps float32) {
	if hi <= lo || x.cols == 0 {
		return
	}
	dr, xr := d.data[lo*d.stride:], x.data[lo*x.stride:]
	_, _, _ = dr[(hi-lo-1)*d.stride+d.cols-1], xr[(hi-lo-1)*x.stride+x.cols-1], w.data[x.cols-1]
	C.dlmc_rms_norm_rows(cbool(useSIMD && simd), fptr(dr), C.long(d.stride), fptr(xr), C.long(x.stride), fptr(w.data),
		C.int(hi-lo), C.int(x.cols), C.float(eps))
}

// ropeRows rotates rows [lo, hi) of x whose positions have cached angles
// (0 ≤ pos < npos, cs holding npos·headDim: cosines then sines); the
// others are left for the caller.
func ropeRows(useSIMD bool, x *Tensor, lo, hi int, pos []int32, headDim int, cs []float32, npos int) {
	if hi <= lo || npos == 0 || x.cols == 0 {
		return
	}
	xr, p := x.data[lo*x.stride:], pos[lo:hi]
	_, _ = xr[(hi-lo-1)*x.stride+x.cols-1], cs[npos*headDim-1]
	C.dlmc_rope_rows(cbool(useSIMD && simd), fptr(xr), C.long(x.stride), C.int(hi-lo), C.int(x.cols/headDim), C.int(headDim),
		(*C.int32_t)(unsafe.Pointer(&p[0])), fptr(cs), C.int(npos))
}

// ropeRow rotates one row (whole heads of headDim) by the angles cs
// (headDim/2 cosines, then headDim/2 sines).
func ropeRow(useSIMD bool, row []float32, headDim int, cs []float32) {
	if len(row) == 0 {
		return
	}
	if len(row)%headDim != 0 || len(cs) < headDim {
		panic("cpu: ropeRow: row not whole heads, or angles too short")
	}
	C.dlmc_rope_row(cbool(useSIMD && simd), fptr(row), C.int(len(row)/headDim), C.int(headDim), fptr(cs))
}

// addRows sets d += x over rows [lo, hi).
func addRows(useSIMD bool, d, x *Tensor, lo, hi int) {
	if hi <= lo || d.cols == 0 {
		return
	}
	dr, xr := d.data[lo*d.stride:], x.data[lo*x.stride:]
	_, _ = dr[(hi-lo-1)*d.stride+d.cols-1], xr[(hi-lo-1)*x.stride+d.cols-1]
	C.dlmc_add_rows(cbool(useSIMD && simd), fptr(dr), C.long(d.stride), fptr(xr), C.long(x.stride), C.int(hi-lo), C.int(d.cols))
}
