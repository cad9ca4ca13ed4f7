// sumexp.c: Σ e^(x_i − m) four terms at a time in float64 (AVX2+FMA).
#include <math.h>

#include "sumexp.h"

// Cephes exp: x = n·ln2 + r, e^r = 1 + 2r·P(r²)/(Q(r²) − r·P(r²)), times
// 2ⁿ through the exponent bits. x ≥ 709.78 gives +Inf; x below −708.39
// gives 0 (math.Exp gives a subnormal down to −745: nothing beside a
// sum ≥ 1); NaN passes through.
#define EXPD_HI 709.782712893383973096
#define EXPD_LO -708.396418532264106224

#if defined(__x86_64__)
#include <immintrin.h>

__attribute__((target("avx2,fma")))
static __m256d exp4(__m256d x) {
	__m256d hi = _mm256_cmp_pd(x, _mm256_set1_pd(EXPD_HI), _CMP_GE_OQ);
	__m256d lo = _mm256_cmp_pd(x, _mm256_set1_pd(EXPD_LO), _CMP_LT_OQ);
	__m256d xc = _mm256_max_pd(_mm256_set1_pd(EXPD_LO), _mm256_min_pd(_mm256_set1_pd(EXPD_HI), x));
	// Where x is NaN, max/min above returned x: keep it.
	__m256d nan = _mm256_cmp_pd(x, x, _CMP_UNORD_Q);
	xc = _mm256_blendv_pd(xc, x, nan);
	__m256d n = _mm256_round_pd(_mm256_mul_pd(xc, _mm256_set1_pd(1.4426950408889634073599)),
		_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	__m256d r = _mm256_fnmadd_pd(n, _mm256_set1_pd(6.93145751953125E-1), xc);
	r = _mm256_fnmadd_pd(n, _mm256_set1_pd(1.42860682030941723212E-6), r);
	__m256d rr = _mm256_mul_pd(r, r);
	__m256d p = _mm256_fmadd_pd(_mm256_set1_pd(1.26177193074810590878E-4), rr, _mm256_set1_pd(3.02994407707441961300E-2));
	p = _mm256_fmadd_pd(p, rr, _mm256_set1_pd(9.99999999999999999910E-1));
	p = _mm256_mul_pd(p, r);
	__m256d q = _mm256_fmadd_pd(_mm256_set1_pd(3.00198505138664455042E-6), rr, _mm256_set1_pd(2.52448340349684104192E-3));
	q = _mm256_fmadd_pd(q, rr, _mm256_set1_pd(2.27265548208155028766E-1));
	q = _mm256_fmadd_pd(q, rr, _mm256_set1_pd(2.00000000000000000009E0));
	__m256d e = _mm256_div_pd(p, _mm256_sub_pd(q, p));
	e = _mm256_fmadd_pd(_mm256_set1_pd(2.0), e, _mm256_set1_pd(1.0));
	// 2ⁿ as 2^⌊n/2⌋ · 2^(n − ⌊n/2⌋), each a normal double's exponent
	// field (n is within [−1022, 1024] here).
	__m128i ni = _mm256_cvtpd_epi32(n), n1 = _mm_srai_epi32(ni, 1), n2 = _mm_sub_epi32(ni, n1);
	__m256i b1 = _mm256_slli_epi64(_mm256_add_epi64(_mm256_cvtepi32_epi64(n1), _mm256_set1_epi64x(1023)), 52);
	__m256i b2 = _mm256_slli_epi64(_mm256_add_epi64(_mm256_cvtepi32_epi64(n2), _mm256_set1_epi64x(1023)), 52);
	e = _mm256_mul_pd(_mm256_mul_pd(e, _mm256_castsi256_pd(b1)), _mm256_castsi256_pd(b2));
	e = _mm256_blendv_pd(e, _mm256_set1_pd(INFINITY), hi);
	return _mm256_andnot_pd(lo, e);
}

__attribute__((target("avx2,fma")))
double dlmc_sum_exp_avx2(const float *x, int n, double m) {
	__m256d acc = _mm256_setzero_pd(), vm = _mm256_set1_pd(m);
	int i = 0;
	for (; i + 4 <= n; i += 4)
		acc = _mm256_add_pd(acc, exp4(_mm256_sub_pd(_mm256_cvtps_pd(_mm_loadu_ps(x + i)), vm)));
	double t[4];
	_mm256_storeu_pd(t, acc);
	double s = (t[0] + t[1]) + (t[2] + t[3]);
	for (; i < n; i++) s += exp((double)x[i] - m);
	return s;
}

int dlmc_sumexp_have_avx2(void) { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); }
#else
double dlmc_sum_exp_avx2(const float *x, int n, double m) {
	(void)x, (void)n, (void)m;
	return 0;
}
int dlmc_sumexp_have_avx2(void) { return 0; }
#endif
