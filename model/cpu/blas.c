// blas.c: OpenBLAS's sgemm, row-major with leading dimensions.
#include <cblas.h>

#include "kernels.h"

// dlmc_sgemm_nt: C[m,n] = alpha * A[m,k] · B[n,k]ᵀ + beta*C.
void dlmc_sgemm_nt(int m, int n, int k, float alpha,
		const float *a, int lda, const float *b, int ldb,
		float beta, float *c, int ldc) {
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k,
		alpha, a, lda, b, ldb, beta, c, ldc);
}

// dlmc_sgemm_nn: C[m,n] = alpha * A[m,k] · B[k,n] + beta*C.
void dlmc_sgemm_nn(int m, int n, int k, float alpha,
		const float *a, int lda, const float *b, int ldb,
		float beta, float *c, int ldc) {
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k,
		alpha, a, lda, b, ldb, beta, c, ldc);
}
