//go:build cuda

package cuda

/*
#cgo LDFLAGS: -lcublas -lcuda
#include <stdint.h>
#include <cublas_v2.h>

// Device pointers cross from Go as integers (gorgonia.org/cu's DevicePtr is
// a uintptr), so the casts to pointers happen here, not in Go.

static cublasStatus_t dlm_gemm(cublasHandle_t h, int ta, int tb, int m, int n, int k,
		float alpha, uintptr_t a, int atype, int lda, uintptr_t b, int btype, int ldb,
		float beta, uintptr_t c, int ctype, int ldc, int compute) {
	return cublasGemmEx(h, (cublasOperation_t)ta, (cublasOperation_t)tb, m, n, k,
		&alpha, (const void*)a, (cudaDataType)atype, lda,
		(const void*)b, (cudaDataType)btype, ldb,
		&beta, (void*)c, (cudaDataType)ctype, ldc,
		(cublasComputeType_t)compute, CUBLAS_GEMM_DEFAULT);
}

static cublasStatus_t dlm_gemm_batched(cublasHandle_t h, int ta, int tb, int m, int n, int k,
		float alpha, uintptr_t a, int lda, long long sa, uintptr_t b, int ldb, long long sb,
		float beta, uintptr_t c, int ldc, long long sc, int batch, int compute) {
	return cublasGemmStridedBatchedEx(h, (cublasOperation_t)ta, (cublasOperation_t)tb, m, n, k,
		&alpha, (const void*)a, CUDA_R_32F, lda, sa,
		(const void*)b, CUDA_R_32F, ldb, sb,
		&beta, (void*)c, CUDA_R_32F, ldc, sc, batch,
		(cublasComputeType_t)compute, CUBLAS_GEMM_DEFAULT);
}
*/
import "C"

import (
	"fmt"

	"gorgonia.org/cu"
)

// cuBLAS enums, as ints for the helpers above.
const (
	opN = int(C.CUBLAS_OP_N)
	opT = int(C.CUBLAS_OP_T)

	typeF32  = int(C.CUDA_R_32F)
	typeF16  = int(C.CUDA_R_16F)
	typeBF16 = int(C.CUDA_R_16BF)

	compute32F     = int(C.CUBLAS_COMPUTE_32F)
	compute32FTF32 = int(C.CUBLAS_COMPUTE_32F_FAST_TF32)
)

// blasHandle is a cuBLAS handle bound to the context current when it was
// created; it runs on the legacy default stream, as the kernels do.
type blasHandle struct{ h C.cublasHandle_t }

func newBLAS() (*blasHandle, error) {
	var h C.cublasHandle_t
	if st := C.cublasCreate(&h); st != C.CUBLAS_STATUS_SUCCESS {
		return nil, fmt.Errorf("cuda: cublasCreate: %s", blasStatus(st))
	}
	return &blasHandle{h: h}, nil
}

func (b *blasHandle) destroy() {
	if b != nil && b.h != nil {
		C.cublasDestroy(b.h)
		b.h = nil
	}
}

// gemm is cublasGemmEx in column-major terms: C[m,n] = alpha·op(A)·op(B) +
// beta·C, with A, B of type abType and C of type cType.
func (b *blasHandle) gemm(ta, tb, m, n, k int, alpha float32, a cu.DevicePtr, abType, lda int, bp cu.DevicePtr, ldb int, beta float32, c cu.DevicePtr, cType, ldc, compute int) {
	st := C.dlm_gemm(b.h, C.int(ta), C.int(tb), C.int(m), C.int(n), C.int(k),
		C.float(alpha), C.uintptr_t(a), C.int(abType), C.int(lda), C.uintptr_t(bp), C.int(abType), C.int(ldb),
		C.float(beta), C.uintptr_t(c), C.int(cType), C.int(ldc), C.int(compute))
	if st != C.CUBLAS_STATUS_SUCCESS {
		panic(fmt.Sprintf("cuda: cublasGemmEx m=%d n=%d k=%d: %s", m, n, k, blasStatus(st)))
	}
}

// gemmBatched is cublasGemmStridedBatchedEx on float32 matrices; strides
// are in elements.
func (b *blasHandle) gemmBatched(ta, tb, m, n, k int, alpha float32, a cu.DevicePtr, lda int, sa int64, bp cu.DevicePtr, ldb int, sb int64, beta float32, c cu.DevicePtr, ldc int, sc int64, batch, compute int) {
	st := C.dlm_gemm_batched(b.h, C.int(ta), C.int(tb), C.int(m), C.int(n), C.int(k),
		C.float(alpha), C.uintptr_t(a), C.int(lda), C.longlong(sa), C.uintptr_t(bp), C.int(ldb), C.longlong(sb),
		C.float(beta), C.uintptr_t(c), C.int(ldc), C.longlong(sc), C.int(batch), C.int(compute))
	if st != C.CUBLAS_STATUS_SUCCESS {
		panic(fmt.Sprintf("cuda: cublasGemmStridedBatchedEx m=%d n=%d k=%d batch=%d: %s", m, n, k, batch, blasStatus(st)))
	}
}

func blasStatus(st C.cublasStatus_t) string {
	switch st {
	case C.CUBLAS_STATUS_NOT_INITIALIZED:
		return "CUBLAS_STATUS_NOT_INITIALIZED"
	case C.CUBLAS_STATUS_ALLOC_FAILED:
		return "CUBLAS_STATUS_ALLOC_FAILED"
	case C.CUBLAS_STATUS_INVALID_VALUE:
		return "CUBLAS_STATUS_INVALID_VALUE"
	case C.CUBLAS_STATUS_ARCH_MISMATCH:
		return "CUBLAS_STATUS_ARCH_MISMATCH"
	case C.CUBLAS_STATUS_MAPPING_ERROR:
		return "CUBLAS_STATUS_MAPPING_ERROR"
	case C.CUBLAS_STATUS_EXECUTION_FAILED:
		return "CUBLAS_STATUS_EXECUTION_FAILED"
	case C.CUBLAS_STATUS_INTERNAL_ERROR:
		return "CUBLAS_STATUS_INTERNAL_ERROR"
	case C.CUBLAS_STATUS_NOT_SUPPORTED:
		return "CUBLAS_STATUS_NOT_SUPPORTED"
	}
	return fmt.Sprintf("cublasStatus %d", int(st))
}
