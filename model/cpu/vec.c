// vec.c: the machine's ISA, and the element-wise kernels over rows: e^x,
// softmax, SiLU·up, and BF16 ↔ F32. Each in plain C and, where it pays,
// AVX2+FMA (a target attribute: the file builds for any x86-64, the Go
// side picks the path from dlmc_have_avx2).
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels.h"
#include "simd.h"

static inline float exp_scalar(float x) {
	if (x != x) return x;
	if (x > EXP_HI) return INFINITY;
	if (x < EXP_LO) return 0.0f;
	float fx = floorf(x * LOG2E + 0.5f);
	float r = x - fx * C1;
	r = r - fx * C2;
	float z = r * r;
	float p = P0;
	p = p * r + P1;
	p = p * r + P2;
	p = p * r + P3;
	p = p * r + P4;
	p = p * r + P5;
	p = p * z + r + 1.0f;
	uint32_t bits = (uint32_t)((int32_t)fx + 127) << 23;
	float scale;
	memcpy(&scale, &bits, 4);
	return p * scale;
}

static void softmax_rows_generic(float *s, int m, int n, float *inv) {
	for (int i = 0; i < m; i++) {
		float *row = s + (long)i * n;
		float mx = row[0];
		for (int j = 1; j < n; j++) if (row[j] > mx) mx = row[j];
		double sum = 0;
		for (int j = 0; j < n; j++) { float e = exp_scalar(row[j] - mx); row[j] = e; sum += e; }
		inv[i] = (float)(1.0 / sum);
	}
}

static void silu_mul_generic(float *dst, const float *g, const float *u, int n) {
	for (int j = 0; j < n; j++) {
		float v = g[j];
		dst[j] = v / (1.0f + exp_scalar(-v)) * u[j];
	}
}

// f16_to_f32 is one IEEE 754 binary16 value as a float32, exactly, in
// selects rather than branches (so that the compiler vectorises the loop
// over it): normal values rebiased; subnormals as mant·2⁻²⁴ (exact in
// float32); Inf kept and NaNs kept with their payload, quieted (as
// vcvtph2ps does).
static inline float f16_to_f32(uint16_t h) {
	uint32_t em = h & 0x7fffu;
	uint32_t normal = (em << 13) + ((uint32_t)(127 - 15) << 23);
	uint32_t special = (em << 13) | 0x7f800000u | (-(uint32_t)((em & 0x3ffu) != 0) & 0x400000u);
	float sf = (float)(int32_t)em * (1.0f / 16777216.0f);
	uint32_t sub;
	memcpy(&sub, &sf, 4);
	uint32_t isSpecial = -(uint32_t)(em >= 0x7c00u), isSub = -(uint32_t)(em < 0x400u);
	uint32_t u = (special & isSpecial) | (sub & isSub) | (normal & ~(isSpecial | isSub));
	u |= (uint32_t)(h & 0x8000u) << 16;
	float f;
	memcpy(&f, &u, 4);
	return f;
}

// bf16_to_f32 is one bfloat16 value as a float32 (its upper half).
static inline float bf16_to_f32(uint16_t h) {
	uint32_t u = (uint32_t)h << 16;
	float f;
	memcpy(&f, &u, 4);
	return f;
}

#if defined(__x86_64__)
int dlmc_have_avx512(void) {
	__builtin_cpu_init();
	return __builtin_cpu_supports("avx512f");
}

int dlmc_have_avx2(void) {
	__builtin_cpu_init();
	return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

int dlmc_have_avx512bf16(void) {
	__builtin_cpu_init();
	return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16");
}

EXP_POLY(exp_poly256, __m256, _mm256, "avx2,fma")

__attribute__((target("avx2,fma")))
static inline __m256 exp256(__m256 x) {
	const __m256 hi = _mm256_set1_ps(EXP_HI), lo = _mm256_set1_ps(EXP_LO);
	// min/max with x second: a NaN x passes through to the result.
	__m256 xc = _mm256_max_ps(lo, _mm256_min_ps(hi, x));
	__m256 fx = _mm256_floor_ps(_mm256_fmadd_ps(xc, _mm256_set1_ps(LOG2E), _mm256_set1_ps(0.5f)));
	__m256 p = exp_poly256(fx, xc);
	__m256i n = _mm256_cvttps_epi32(fx);
	n = _mm256_slli_epi32(_mm256_add_epi32(n, _mm256_set1_epi32(127)), 23);
	__m256 y = _mm256_mul_ps(p, _mm256_castsi256_ps(n));
	y = _mm256_blendv_ps(y, _mm256_setzero_ps(), _mm256_cmp_ps(x, lo, _CMP_LT_OQ));
	y = _mm256_blendv_ps(y, _mm256_set1_ps(INFINITY), _mm256_cmp_ps(x, hi, _CMP_GT_OQ));
	return y;
}

__attribute__((target("avx2,fma")))
static void softmax_rows_avx2(float *s, int m, int n, float *inv) {
	for (int i = 0; i < m; i++) {
		float *row = s + (long)i * n;
		int j = 0;
		float mx = row[0];
		if (n >= 8) {
			__m256 vm = _mm256_loadu_ps(row);
			for (j = 8; j + 8 <= n; j += 8) vm = _mm256_max_ps(vm, _mm256_loadu_ps(row + j));
			mx = hmax256(vm);
		}
		for (; j < n; j++) if (row[j] > mx) mx = row[j];
		// Eight float32 partial sums per register, spilled to double
		// every 64 elements so long rows keep float64-like accuracy.
		__m256 vmx = _mm256_set1_ps(mx);
		double sum = 0;
		j = 0;
		while (j + 8 <= n) {
			__m256 acc = _mm256_setzero_ps();
			int end = j + 64 <= n ? j + 64 : n - (n - j) % 8;
			for (; j < end; j += 8) {
				__m256 e = exp256(_mm256_sub_ps(_mm256_loadu_ps(row + j), vmx));
				_mm256_storeu_ps(row + j, e);
				acc = _mm256_add_ps(acc, e);
			}
			sum += hsum256(acc);
		}
		for (; j < n; j++) { float e = exp_scalar(row[j] - mx); row[j] = e; sum += e; }
		inv[i] = (float)(1.0 / sum);
	}
}

// exp2_256 is exp2_le0 over [−126, 127] (x clamped to it: 2^x then lies
// in [2⁻¹²⁶, 2¹²⁷]); a NaN passes through. SiLU's e^−v as 2^(−v·log₂e):
// v / (1 + e^−v) at either end is within float32 rounding of what an
// unclamped e^x gives, ±Inf and NaN aside.
__attribute__((target("avx2,fma")))
static inline __m256 exp2_256(__m256 x) {
	return exp2_le0(_mm256_min_ps(_mm256_set1_ps(127.0f), x));
}

__attribute__((target("avx2,fma")))
static void silu_mul_avx2(float *dst, const float *g, const float *u, int n) {
	int j = 0;
	const __m256 one = _mm256_set1_ps(1.0f), nl2e = _mm256_set1_ps(-LOG2E);
	for (; j + 8 <= n; j += 8) {
		__m256 v = _mm256_loadu_ps(g + j);
		__m256 e = exp2_256(_mm256_mul_ps(v, nl2e));
		__m256 y = _mm256_div_ps(v, _mm256_add_ps(one, e));
		_mm256_storeu_ps(dst + j, _mm256_mul_ps(y, _mm256_loadu_ps(u + j)));
	}
	silu_mul_generic(dst + j, g + j, u + j, n - j);
}

__attribute__((target("avx2,fma")))
static void exp_store8(float *dst, const float *x) {
	_mm256_storeu_ps(dst, exp256(_mm256_loadu_ps(x)));
}

int dlmc_have_f16c(void) {
	__builtin_cpu_init();
	return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
}

// HALF_ROWS defines NAME(dst, src, rows, cols, stride) on the instruction
// set TARGET: rows × cols 16-bit floats (rows stride apart) to a contiguous
// float32 matrix, 16 at a time by CVT8 (the eight at p as a __m256), the
// tail by SCALAR.
#define HALF_ROWS(NAME, TARGET, CVT8, SCALAR)                                                        \
	__attribute__((target(TARGET))) static void NAME(float *dst, const uint16_t *src, long rows, \
		long cols, long stride) {                                                            \
		for (long i = 0; i < rows; i++, dst += cols, src += stride) {                        \
			long j = 0;                                                                  \
			for (; j + 16 <= cols; j += 16) {                                            \
				_mm256_storeu_ps(dst + j, CVT8(src + j));                            \
				_mm256_storeu_ps(dst + j + 8, CVT8(src + j + 8));                    \
			}                                                                            \
			for (; j < cols; j++) dst[j] = SCALAR(src[j]);                               \
		}                                                                                    \
	}

// bf16x8 is the eight bfloat16s at p as float32s: zero-extended, shifted
// left 16.
__attribute__((target("avx2")))
static inline __m256 bf16x8(const uint16_t *p) {
	return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}

// f16x8 is the eight IEEE halves at p as float32s, by vcvtph2ps (exact:
// every half is a float32; a signalling NaN comes out quiet, as
// f16_to_f32's).
__attribute__((target("avx2,f16c")))
static inline __m256 f16x8(const uint16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }

// bf16_rows_avx2 and f16_rows_f16c: HALF_ROWS for bfloat16s on AVX2 and
// for IEEE halves on F16C.
HALF_ROWS(bf16_rows_avx2, "avx2", bf16x8, bf16_to_f32)
HALF_ROWS(f16_rows_f16c, "avx2,f16c", f16x8, f16_to_f32)
#undef HALF_ROWS
#else
int dlmc_have_avx512(void) { return 0; }
int dlmc_have_avx2(void) { return 0; }
int dlmc_have_avx512bf16(void) { return 0; }
int dlmc_have_f16c(void) { return 0; }
static void bf16_rows_avx2(float *dst, const uint16_t *src, long rows, long cols, long stride) {
	(void)dst, (void)src, (void)rows, (void)cols, (void)stride;
}
static void f16_rows_f16c(float *dst, const uint16_t *src, long rows, long cols, long stride) {
	(void)dst, (void)src, (void)rows, (void)cols, (void)stride;
}
static void softmax_rows_avx2(float *s, int m, int n, float *inv) { softmax_rows_generic(s, m, n, inv); }
static void silu_mul_avx2(float *dst, const float *g, const float *u, int n) { silu_mul_generic(dst, g, u, n); }
#endif

void dlmc_bf16_rows(int simd, float *dst, const uint16_t *src, long rows, long cols, long stride) {
	if (simd) {
		bf16_rows_avx2(dst, src, rows, cols, stride);
		return;
	}
	for (long i = 0; i < rows; i++, dst += cols, src += stride)
		for (long j = 0; j < cols; j++) dst[j] = bf16_to_f32(src[j]);
}

// f16_rows_c is dlmc_f16_rows's plain C loop, vectorised by the compiler
// at the baseline ISA.
__attribute__((optimize("tree-vectorize")))
static void f16_rows_c(float *dst, const uint16_t *src, long rows, long cols, long stride) {
	for (long i = 0; i < rows; i++, dst += cols, src += stride)
		for (long j = 0; j < cols; j++) dst[j] = f16_to_f32(src[j]);
}

void dlmc_f16_rows(int f16c, float *dst, const uint16_t *src, long rows, long cols, long stride) {
	if (f16c) {
		f16_rows_f16c(dst, src, rows, cols, stride);
		return;
	}
	f16_rows_c(dst, src, rows, cols, stride);
}

void dlmc_softmax_rows(int simd, float *s, int m, int n, float *inv) {
	if (simd) softmax_rows_avx2(s, m, n, inv); else softmax_rows_generic(s, m, n, inv);
}

void dlmc_silu_mul(int simd, float *dst, const float *g, const float *u, int n) {
	if (simd) silu_mul_avx2(dst, g, u, n); else silu_mul_generic(dst, g, u, n);
}

void dlmc_exp_many(int simd, float *dst, const float *x, int n) {
	int j = 0;
#if defined(__x86_64__)
	if (simd) {
		// Through the same vector path softmax and SiLU use.
		for (; j + 8 <= n; j += 8) exp_store8(dst + j, x + j);
	}
#else
	(void)simd;
#endif
	for (; j < n; j++) dst[j] = exp_scalar(x[j]);
}

// dlmc_f32_to_bf16: dst (rows × cols, dense) = src (row stride lds) rounded to
// the nearest BF16, ties to even; NaN stays NaN. Scalar: the compiler
// vectorises it, and it is a small pass beside the product it feeds.
void dlmc_f32_to_bf16(uint16_t *dst, const float *src, long rows, long cols, long lds) {
	for (long i = 0; i < rows; i++) {
		const uint32_t *s = (const uint32_t *)(src + i * lds);
		uint16_t *d = dst + i * cols;
		for (long j = 0; j < cols; j++) {
			uint32_t u = s[j];
			if ((u & 0x7fffffffu) > 0x7f800000u) {
				d[j] = (uint16_t)((u >> 16) | 0x40);
			} else {
				d[j] = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
			}
		}
	}
}

// dlmc_gemm_nt_plain: c[m × n] = a[m × k]·wᵀ (w [n × k]) in plain C, each
// element the sum over k in index order with no fused multiply-add: a
// row's bits never depend on the other rows of the product, on m or on
// how the columns are split. The products with weights run on it only
// where OpenBLAS's kernel lacks that and the panel kernel cannot run (the
// kernels capped below AVX2 on an AVX2 processor). Tiles of 4 rows × 8
// columns keep the partial sums in registers; on x86-64 full tiles run
// on SSE2 (every x86-64 processor has it), lane j of a vector being
// column j's sum, multiplied then added as the scalar loop does.
void dlmc_gemm_nt_plain(int m, int n, int k, const float *a, long lda, const float *w, long ldw, float *c, long ldc) {
	for (int i0 = 0; i0 < m; i0 += 4) {
		int mr = m - i0 < 4 ? m - i0 : 4;
		for (int j0 = 0; j0 < n; j0 += 8) {
			int nr = n - j0 < 8 ? n - j0 : 8;
#if defined(__x86_64__)
			if (mr == 4 && nr == 8) {
				__m128 acc[4][2];
				for (int i = 0; i < 4; i++) acc[i][0] = acc[i][1] = _mm_setzero_ps();
				for (int kk = 0; kk < k; kk++) {
					const float *wk = w + (long)j0 * ldw + kk;
					__m128 w0 = _mm_setr_ps(wk[0], wk[ldw], wk[2 * ldw], wk[3 * ldw]);
					__m128 w1 = _mm_setr_ps(wk[4 * ldw], wk[5 * ldw], wk[6 * ldw], wk[7 * ldw]);
					for (int i = 0; i < 4; i++) {
						__m128 av = _mm_set1_ps(a[(long)(i0 + i) * lda + kk]);
						acc[i][0] = _mm_add_ps(acc[i][0], _mm_mul_ps(av, w0));
						acc[i][1] = _mm_add_ps(acc[i][1], _mm_mul_ps(av, w1));
					}
				}
				for (int i = 0; i < 4; i++) {
					_mm_storeu_ps(c + (long)(i0 + i) * ldc + j0, acc[i][0]);
					_mm_storeu_ps(c + (long)(i0 + i) * ldc + j0 + 4, acc[i][1]);
				}
				continue;
			}
#endif
			float acc[4][8] = {{0}};
			for (int kk = 0; kk < k; kk++) {
				float wv[8];
				for (int j = 0; j < nr; j++) wv[j] = w[(long)(j0 + j) * ldw + kk];
				for (int i = 0; i < mr; i++) {
					float av = a[(long)(i0 + i) * lda + kk];
					for (int j = 0; j < nr; j++) {
						float p = av * wv[j];
						acc[i][j] = acc[i][j] + p;
					}
				}
			}
			for (int i = 0; i < mr; i++)
				for (int j = 0; j < nr; j++) c[(long)(i0 + i) * ldc + j0 + j] = acc[i][j];
		}
	}
}
