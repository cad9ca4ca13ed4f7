// blas.c: OpenBLAS's sgemm, row-major with leading dimensions.
#include <cblas.h>

#include "kernels.h"

void dlmc_sgemm(int bt, int m, int n, int k, float alpha, const float *a, int lda, const float *b, int ldb,
		float beta, float *c, int ldc) {
	cblas_sgemm(CblasRowMajor, CblasNoTrans, bt ? CblasTrans : CblasNoTrans, m, n, k,
		alpha, a, lda, b, ldb, beta, c, ldc);
}
