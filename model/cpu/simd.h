// simd.h: the constants and vector helpers vec.c, attn.c, quant.c, kquant.c
// and bf16mm.c share; not part of what the Go side binds (kernels.h is).
#ifndef DLMCACHE_CPU_SIMD_H
#define DLMCACHE_CPU_SIMD_H

#include <stdint.h>

// Cephes expf: x = n·ln2 + r, |r| ≤ ln2/2, e^r by a polynomial, scaled by
// 2ⁿ through the exponent bits. About 1 ulp; below the smallest normal
// float32 the result is 0, above ln(2¹²⁷·1.5) it is +Inf; NaN propagates.
#define EXP_HI 88.3762626647949f
#define EXP_LO -87.3365447505531f
#define LOG2E 1.44269504088896341f
#define C1 0.693359375f
#define C2 -2.12194440e-4f
#define P0 1.9875691500e-4f
#define P1 1.3981999507e-3f
#define P2 8.3334519073e-3f
#define P3 4.1665795894e-2f
#define P4 1.6666665459e-1f
#define P5 5.0000001201e-1f

// IQ4_NL's and IQ4_XS's sixteen int8 levels (ggml's kvalues_iq4nl; in
// quant.c): a 4-bit quant q stands for iq4_levels[q].
extern const int8_t iq4_levels[16];

// Row tiles: a block of m rows goes in T = row_tiles(m, mr) = ⌈m / mr⌉
// tiles of even heights, row_tile_h(m, T, t) (the first m mod T of them
// one row taller), none taller than mr. A last tile of the few rows left
// over (1–3: fewer chains of FMAs than the two FMA pipes' latency keeps
// busy) would take most of a whole tile's time for a fraction of its
// work: 43 rows go as 6, 6, 6, 5, 5, 5, 5, 5 rather than seven 6s and a 1.
// Each element of c is the same chain of products whatever its tile's
// height.
static inline int row_tiles(int m, int mr) { return (m + mr - 1) / mr; }
static inline int row_tile_h(int m, int tiles, int t) { return m / tiles + (t < m % tiles); }

#if defined(__x86_64__)
#include <immintrin.h>

// HREDUCE256 defines NAME(v): OP (add or max) over v's eight lanes, the
// upper half onto the lower, then pairs, then the last two.
#define HREDUCE256(NAME, OP)                                                              \
	__attribute__((target("avx2,fma"))) static inline float NAME(__m256 v) {           \
		__m128 s = _mm_##OP##_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1)); \
		s = _mm_##OP##_ps(s, _mm_movehl_ps(s, s));                                    \
		s = _mm_##OP##_ss(s, _mm_movehdup_ps(s));                                     \
		return _mm_cvtss_f32(s);                                                      \
	}
HREDUCE256(hsum256, add)
HREDUCE256(hmax256, max)
#undef HREDUCE256

// acc_store16 writes the first cols (≤ 16) lanes of an accumulator r to o:
// stored where first, else added to what o holds; the lanes past cols are
// neither read nor written (the int8 and BF16 products' tile edges).
__attribute__((target("avx512f"), always_inline)) static inline void acc_store16(float *o, int cols, __m512 r, int first) {
	__mmask16 m = (__mmask16)((1u << cols) - 1);
	if (!first) r = _mm512_add_ps(r, _mm512_maskz_loadu_ps(m, o));
	_mm512_mask_storeu_ps(o, m, r);
}

// EXP_POLY defines NAME(fx, xc) at one vector width (V the vector type, P
// the intrinsics' prefix, TARGET the instruction set): the Cephes expf
// steps between the reduction's n = fx and the scaling by 2ⁿ: r = xc − n·ln2
// (ln2 in two parts, C1 + C2), and e^r ≈ 1 + r + r²·P(r).
#define EXP_POLY(NAME, V, P, TARGET)                                       \
	__attribute__((target(TARGET))) static inline V NAME(V fx, V xc) {  \
		V r = P##_fnmadd_ps(fx, P##_set1_ps(C1), xc);                \
		r = P##_fnmadd_ps(fx, P##_set1_ps(C2), r);                   \
		V z = P##_mul_ps(r, r);                                      \
		V p = P##_set1_ps(P0);                                       \
		p = P##_fmadd_ps(p, r, P##_set1_ps(P1));                     \
		p = P##_fmadd_ps(p, r, P##_set1_ps(P2));                     \
		p = P##_fmadd_ps(p, r, P##_set1_ps(P3));                     \
		p = P##_fmadd_ps(p, r, P##_set1_ps(P4));                     \
		p = P##_fmadd_ps(p, r, P##_set1_ps(P5));                     \
		return P##_fmadd_ps(p, z, P##_add_ps(r, P##_set1_ps(1.0f))); \
	}

// exp2_le0 is 2^x for the softmax's x = s − max ≤ 0 (scores scaled by
// log₂e, so e^(s − max) in the natural units): x = n + r, |r| ≤ ½, 2^r by
// Cephes' exp2f polynomial (within 8·10⁻⁸ relative of 2^x on [−126, 0]),
// n to nearest by adding 1.5·2²³ + 127 (the sum's last mantissa bits are
// then n + 127, shifted into the exponent as they are). Below −126 it
// gives 2⁻¹²⁶ ≈ 1.2·10⁻³⁸, nothing beside a sum ≥ 1; a NaN passes
// through. Five operations fewer than exp256: no log₂e product, no
// two-part ln 2 reduction, no floor and conversion.
#define EXP2_SHIFT 12583039.0f // 1.5·2²³ + 127
__attribute__((target("avx2,fma")))
static inline __m256 exp2_le0(__m256 x) {
	__m256 xc = _mm256_max_ps(_mm256_set1_ps(-126.0f), x);
	__m256 t = _mm256_add_ps(xc, _mm256_set1_ps(EXP2_SHIFT));
	__m256 r = _mm256_sub_ps(xc, _mm256_sub_ps(t, _mm256_set1_ps(EXP2_SHIFT)));
	__m256 p = _mm256_set1_ps(1.535336188319500e-4f);
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.339887440266574e-3f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(9.618437357674640e-3f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.550332471162809e-2f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(2.402264791363012e-1f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(6.931472028550421e-1f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
	return _mm256_mul_ps(p, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_castps_si256(t), 23)));
}
#endif

#endif
