package sumexp

/*
#cgo CFLAGS: -O2 -Wall -Wextra -Werror
#cgo LDFLAGS: -lm
#include "sumexp.h"
*/
import "C"

import (
	"math"
	"unsafe"
)

// vector reports whether Sum runs the AVX2 kernel.
var vector = C.dlmc_sumexp_have_avx2() != 0

// Sum returns Σ e^(float64(x_i) − m).
func Sum(x []float32, m float64) float64 {
	if vector && len(x) >= 16 {
		return float64(C.dlmc_sum_exp_avx2((*C.float)(unsafe.Pointer(&x[0])), C.int(len(x)), C.double(m)))
	}
	return sumGo(x, m)
}

func sumGo(x []float32, m float64) float64 {
	var s float64
	for _, v := range x {
		s += math.Exp(float64(v) - m)
	}
	return s
}
