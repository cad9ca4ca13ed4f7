// rowops.c: the row-wise ops of a layer (RMSNorm, RoPE, the residual add)
// over a range of rows in one call: plain C, and AVX2+FMA versions that
// give the same results up to the order of RMSNorm's float64 sum.
#include <math.h>
#include <stdint.h>

#include "kernels.h"

static void rms_norm_generic(float *dst, long ldd, const float *x, long ldx, const float *w,
		int rows, int cols, float eps) {
	for (int i = 0; i < rows; i++) {
		const float *xr = x + (long)i * ldx;
		float *dr = dst + (long)i * ldd;
		double s = 0;
		for (int j = 0; j < cols; j++) s += (double)xr[j] * xr[j];
		float r = (float)(1.0 / sqrt(s / cols + (double)eps));
		for (int j = 0; j < cols; j++) dr[j] = xr[j] * r * w[j];
	}
}

// rope_half_generic rotates one head: x1, x2 its two halves, c and s
// the angles' cosines and sines (half of each).
static void rope_half_generic(float *x1, float *x2, const float *c, const float *s, int half) {
	for (int j = 0; j < half; j++) {
		float a = x1[j], b = x2[j];
		x1[j] = a * c[j] - b * s[j];
		x2[j] = b * c[j] + a * s[j];
	}
}

static void add_generic(float *dst, long ldd, const float *x, long ldx, int rows, int cols) {
	for (int i = 0; i < rows; i++) {
		float *dr = dst + (long)i * ldd;
		const float *xr = x + (long)i * ldx;
		for (int j = 0; j < cols; j++) dr[j] += xr[j];
	}
}

#if defined(__x86_64__)
#include <immintrin.h>

__attribute__((target("avx2,fma")))
static void rms_norm_avx2(float *dst, long ldd, const float *x, long ldx, const float *w,
		int rows, int cols, float eps) {
	for (int i = 0; i < rows; i++) {
		const float *xr = x + (long)i * ldx;
		float *dr = dst + (long)i * ldd;
		__m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
		int j = 0;
		for (; j + 8 <= cols; j += 8) {
			__m256 v = _mm256_loadu_ps(xr + j);
			__m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
			__m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
			s0 = _mm256_fmadd_pd(lo, lo, s0);
			s1 = _mm256_fmadd_pd(hi, hi, s1);
		}
		s0 = _mm256_add_pd(s0, s1);
		__m128d h = _mm_add_pd(_mm256_castpd256_pd128(s0), _mm256_extractf128_pd(s0, 1));
		double s = _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
		for (; j < cols; j++) s += (double)xr[j] * xr[j];
		float r = (float)(1.0 / sqrt(s / cols + (double)eps));
		__m256 vr = _mm256_set1_ps(r);
		for (j = 0; j + 8 <= cols; j += 8)
			_mm256_storeu_ps(dr + j, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(xr + j), vr), _mm256_loadu_ps(w + j)));
		for (; j < cols; j++) dr[j] = xr[j] * r * w[j];
	}
}

__attribute__((target("avx2,fma")))
static void rope_half_avx2(float *x1, float *x2, const float *c, const float *s, int half) {
	int j = 0;
	for (; j + 8 <= half; j += 8) {
		__m256 a = _mm256_loadu_ps(x1 + j), b = _mm256_loadu_ps(x2 + j);
		__m256 vc = _mm256_loadu_ps(c + j), vs = _mm256_loadu_ps(s + j);
		_mm256_storeu_ps(x1 + j, _mm256_sub_ps(_mm256_mul_ps(a, vc), _mm256_mul_ps(b, vs)));
		_mm256_storeu_ps(x2 + j, _mm256_add_ps(_mm256_mul_ps(b, vc), _mm256_mul_ps(a, vs)));
	}
	rope_half_generic(x1 + j, x2 + j, c + j, s + j, half - j);
}

__attribute__((target("avx2")))
static void add_avx2(float *dst, long ldd, const float *x, long ldx, int rows, int cols) {
	for (int i = 0; i < rows; i++) {
		float *dr = dst + (long)i * ldd;
		const float *xr = x + (long)i * ldx;
		int j = 0;
		for (; j + 8 <= cols; j += 8) _mm256_storeu_ps(dr + j, _mm256_add_ps(_mm256_loadu_ps(dr + j), _mm256_loadu_ps(xr + j)));
		for (; j < cols; j++) dr[j] += xr[j];
	}
}
#else
static void rms_norm_avx2(float *dst, long ldd, const float *x, long ldx, const float *w,
		int rows, int cols, float eps) { rms_norm_generic(dst, ldd, x, ldx, w, rows, cols, eps); }
static void rope_half_avx2(float *x1, float *x2, const float *c, const float *s, int half) {
	rope_half_generic(x1, x2, c, s, half);
}
static void add_avx2(float *dst, long ldd, const float *x, long ldx, int rows, int cols) {
	add_generic(dst, ldd, x, ldx, rows, cols);
}
#endif

void dlmc_rms_norm_rows(int simd, float *dst, long ldd, const float *x, long ldx, const float *w,
		int rows, int cols, float eps) {
	if (simd) rms_norm_avx2(dst, ldd, x, ldx, w, rows, cols, eps);
	else rms_norm_generic(dst, ldd, x, ldx, w, rows, cols, eps);
}

// dlmc_rope_row rotates each of the heads of one row by the angles cs (hd/2
// cosines, then hd/2 sines).
void dlmc_rope_row(int simd, float *row, int heads, int hd, const float *cs) {
	int half = hd / 2;
	for (int h = 0; h < heads; h++) {
		float *x1 = row + (long)h * hd;
		if (simd) rope_half_avx2(x1, x1 + half, cs, cs + half, half);
		else rope_half_generic(x1, x1 + half, cs, cs + half, half);
	}
}

// dlmc_rope_rows rotates the rows whose position p has 0 ≤ p < npos by the
// table's angles (cs + p·hd); other rows are left to the caller.
void dlmc_rope_rows(int simd, float *x, long ldx, int rows, int heads, int hd, const int32_t *pos,
		const float *cs, int npos) {
	for (int i = 0; i < rows; i++) {
		int32_t p = pos[i];
		if (p >= 0 && p < npos) dlmc_rope_row(simd, x + (long)i * ldx, heads, hd, cs + (long)p * hd);
	}
}

void dlmc_add_rows(int simd, float *dst, long ldd, const float *x, long ldx, int rows, int cols) {
	if (simd) add_avx2(dst, ldd, x, ldx, rows, cols);
	else add_generic(dst, ldd, x, ldx, rows, cols);
}
