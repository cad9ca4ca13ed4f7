package cpu

/*
#cgo LDFLAGS: -lopenblas
#include <cblas.h>

#include "kernels.h"
*/
import "C"

import (
	"fmt"
	"os"
	"strings"
)

// BLAS describes the BLAS library the CPU backend's products run on and the
// kernel it picked for this processor, e.g. "OpenBLAS 0.3.21 … (kernel
// Haswell)". OPENBLAS_CORETYPE, when set, decides the kernel; where it is
// unset and OpenBLAS fell back to an SSE kernel on a vector CPU (a build
// older than the processor), the description says so (blasKernelHint).
func BLAS() string {
	cfg := strings.TrimSpace(C.GoString(C.openblas_get_config()))
	s := cfg + " (kernel " + blasCorename() + ")"
	if h := blasKernelHint(blasCorename(), MachineISA(), os.Getenv("OPENBLAS_CORETYPE") != ""); h != "" {
		s += "; " + h
	}
	if !blasRowsInvariant() {
		if simd {
			s += "; its rows depend on their place in a product, so products with weights run on the panel kernel"
		} else {
			s += "; its rows depend on their place in a product, so products with weights run on a plain C loop (kernels capped below AVX2)"
		}
	}
	return s
}

// blasSSEKernels are OpenBLAS's kernels for processors without AVX2:
// what its runtime dispatch picks on a CPU its build does not know
// (Debian 12's 0.3.21 picks Prescott on Intel family 6 model 207).
var blasSSEKernels = map[string]bool{"prescott": true, "core2": true, "penryn": true, "dunnington": true,
	"nehalem": true, "atom": true, "opteron": true, "opteron_sse3": true, "barcelona": true, "bobcat": true,
	"katmai": true, "coppermine": true, "northwood": true, "banias": true, "athlon": true}

// blasKernelHint is the advice for a user whose OpenBLAS runs SSE kernels
// on a CPU with AVX2 or AVX-512 (its products run several times slower:
// the weights dlmcache hands it and make bench's raw sgemm baseline), or
// "" when its kernel fits the CPU or OPENBLAS_CORETYPE was set by hand.
// dlmcache never sets the variable itself: an old OpenBLAS's newer
// kernels may miscompute on processors it predates, so the choice is the
// user's.
func blasKernelHint(core string, isa ISALevel, coretypeSet bool) string {
	if coretypeSet || isa < ISAAVX2 || !blasSSEKernels[strings.ToLower(core)] {
		return ""
	}
	want, what := "Haswell", "AVX2"
	if isa >= ISAAVX512 {
		want, what = "SkylakeX", "AVX-512"
	}
	return fmt.Sprintf("this OpenBLAS does not know the CPU and runs its SSE kernels: OPENBLAS_CORETYPE=%s selects its %s ones (check them against the default first: make test)", want, what)
}

// blasCorename is the name of OpenBLAS's kernel for this CPU.
func blasCorename() string { return strings.TrimSpace(C.GoString(C.openblas_get_corename())) }

// blasSetThreads sets OpenBLAS's thread count. It is process-wide.
func blasSetThreads(n int) { C.openblas_set_num_threads(C.int(n)) }

// blasThreads reports OpenBLAS's current thread count.
func blasThreads() int { return int(C.openblas_get_num_threads()) }

// sgemmNT computes c = alpha·a·bᵀ + beta·c.
// a [m,k] (row stride lda), b [n,k] (ldb), c [m,n] (ldc).
// The slices must start at the first element and reach the last one.
func sgemmNT(m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	sgemm(true, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// sgemmNN computes c = alpha·a·b + beta·c.
// a [m,k] (lda), b [k,n] (ldb), c [m,n] (ldc).
func sgemmNN(m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	sgemm(false, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// sgemm is sgemmNT where bt, else sgemmNN.
func sgemm(bt bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if m == 0 || n == 0 {
		return
	}
	if k == 0 {
		scaleRows(c, m, n, ldc, beta)
		return
	}
	checkSpans(bt, m, n, k, a, lda, b, ldb, c, ldc)
	C.dlmc_sgemm(cbool(bt), C.int(m), C.int(n), C.int(k), C.float(alpha), fptr(a), C.int(lda), fptr(b), C.int(ldb),
		C.float(beta), fptr(c), C.int(ldc))
}

// scaleRows multiplies the m×n matrix c (row stride ldc) by beta.
func scaleRows(c []float32, m, n, ldc int, beta float32) {
	for i := 0; i < m; i++ {
		row := c[i*ldc : i*ldc+n]
		for j := range row {
			if beta == 0 {
				row[j] = 0
			} else {
				row[j] *= beta
			}
		}
	}
}

// checkSpans checks a product's operands against their shapes: a [m,k],
// b [n,k] where bt, else [k,n], c [m,n].
func checkSpans(bt bool, m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	checkSpan("a", a, m, k, lda)
	if bt {
		checkSpan("b", b, n, k, ldb)
	} else {
		checkSpan("b", b, k, n, ldb)
	}
	checkSpan("c", c, m, n, ldc)
}

// checkSpan panics unless s holds a rows×cols matrix with row stride ld, so
// that C never reads or writes outside a Go slice.
func checkSpan(name string, s []float32, rows, cols, ld int) {
	if ld < cols || len(s) < (rows-1)*ld+cols {
		panic("cpu: sgemm: operand " + name + " too short for its shape")
	}
}
