package cpu

/*
#cgo CFLAGS: -O2
#include <math.h>
#include <stdint.h>
#include <string.h>

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

#if defined(__x86_64__)
#include <immintrin.h>

__attribute__((target("avx2,fma")))
static inline __m256 exp256(__m256 x) {
	const __m256 hi = _mm256_set1_ps(EXP_HI), lo = _mm256_set1_ps(EXP_LO);
	// min/max with x second: a NaN x passes through to the result.
	__m256 xc = _mm256_max_ps(lo, _mm256_min_ps(hi, x));
	__m256 fx = _mm256_floor_ps(_mm256_fmadd_ps(xc, _mm256_set1_ps(LOG2E), _mm256_set1_ps(0.5f)));
	__m256 r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(C1), xc);
	r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(C2), r);
	__m256 z = _mm256_mul_ps(r, r);
	__m256 p = _mm256_set1_ps(P0);
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(P1));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(P2));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(P3));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(P4));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(P5));
	p = _mm256_fmadd_ps(p, z, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
	__m256i n = _mm256_cvttps_epi32(fx);
	n = _mm256_slli_epi32(_mm256_add_epi32(n, _mm256_set1_epi32(127)), 23);
	__m256 y = _mm256_mul_ps(p, _mm256_castsi256_ps(n));
	y = _mm256_blendv_ps(y, _mm256_setzero_ps(), _mm256_cmp_ps(x, lo, _CMP_LT_OQ));
	y = _mm256_blendv_ps(y, _mm256_set1_ps(INFINITY), _mm256_cmp_ps(x, hi, _CMP_GT_OQ));
	return y;
}

__attribute__((target("avx2,fma")))
static float hsum256(__m256 v) {
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

__attribute__((target("avx2,fma")))
static float hmax256(__m256 v) {
	__m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
	s = _mm_max_ps(s, _mm_movehl_ps(s, s));
	s = _mm_max_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
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

__attribute__((target("avx2,fma")))
static void silu_mul_avx2(float *dst, const float *g, const float *u, int n) {
	int j = 0;
	const __m256 one = _mm256_set1_ps(1.0f), sign = _mm256_set1_ps(-0.0f);
	for (; j + 8 <= n; j += 8) {
		__m256 v = _mm256_loadu_ps(g + j);
		__m256 e = exp256(_mm256_xor_ps(v, sign));
		__m256 y = _mm256_div_ps(v, _mm256_add_ps(one, e));
		_mm256_storeu_ps(dst + j, _mm256_mul_ps(y, _mm256_loadu_ps(u + j)));
	}
	silu_mul_generic(dst + j, g + j, u + j, n - j);
}

__attribute__((target("avx2,fma")))
static void exp_store8(float *dst, const float *x) {
	_mm256_storeu_ps(dst, exp256(_mm256_loadu_ps(x)));
}

// bf16_rows_avx2 converts rows × cols bfloat16s (rows stride apart) to
// a contiguous float32 matrix: zero-extend 8 at a time, shift left 16.
__attribute__((target("avx2")))
static void bf16_rows_avx2(float *dst, const uint16_t *src, long rows, long cols, long stride) {
	for (long i = 0; i < rows; i++, dst += cols, src += stride) {
		long j = 0;
		for (; j + 16 <= cols; j += 16) {
			__m256i a = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(src + j)));
			__m256i b = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(src + j + 8)));
			_mm256_storeu_si256((__m256i *)(dst + j), _mm256_slli_epi32(a, 16));
			_mm256_storeu_si256((__m256i *)(dst + j + 8), _mm256_slli_epi32(b, 16));
		}
		for (; j < cols; j++) {
			uint32_t u = (uint32_t)src[j] << 16;
			memcpy(dst + j, &u, 4);
		}
	}
}

static int have_avx2(void) {
	__builtin_cpu_init();
	return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
#else
static int have_avx2(void) { return 0; }
static void bf16_rows_avx2(float *dst, const uint16_t *src, long rows, long cols, long stride) {}
static void softmax_rows_avx2(float *s, int m, int n, float *inv) { softmax_rows_generic(s, m, n, inv); }
static void silu_mul_avx2(float *dst, const float *g, const float *u, int n) { silu_mul_generic(dst, g, u, n); }
#endif

static void bf16_rows(int simd, float *dst, const uint16_t *src, long rows, long cols, long stride) {
	if (simd) {
		bf16_rows_avx2(dst, src, rows, cols, stride);
		return;
	}
	for (long i = 0; i < rows; i++, dst += cols, src += stride)
		for (long j = 0; j < cols; j++) {
			uint32_t u = (uint32_t)src[j] << 16;
			memcpy(dst + j, &u, 4);
		}
}

static void softmax_rows(int simd, float *s, int m, int n, float *inv) {
	if (simd) softmax_rows_avx2(s, m, n, inv); else softmax_rows_generic(s, m, n, inv);
}

static void silu_mul(int simd, float *dst, const float *g, const float *u, int n) {
	if (simd) silu_mul_avx2(dst, g, u, n); else silu_mul_generic(dst, g, u, n);
}

static void exp_many(int simd, float *dst, const float *x, int n) {
	int j = 0;
#if defined(__x86_64__)
	if (simd) {
		// Through the same vector path softmax and SiLU use.
		for (; j + 8 <= n; j += 8) exp_store8(dst + j, x + j);
	}
#endif
	for (; j < n; j++) dst[j] = exp_scalar(x[j]);
}
*/
import "C"

import "unsafe"

// simd reports whether the AVX2+FMA kernels run on this machine.
var simd = C.have_avx2() != 0

func cbool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

// softmaxRows turns each row of the m×n matrix s (contiguous) into
// e^(s−max row) in place and stores 1/sum of each row in inv[:m].
func softmaxRows(s []float32, m, n int, inv []float32) {
	if m == 0 {
		return
	}
	if n <= 0 || len(s) < m*n || len(inv) < m {
		panic("cpu: softmaxRows: buffers too short")
	}
	C.softmax_rows(cbool(simd), (*C.float)(unsafe.Pointer(&s[0])), C.int(m), C.int(n), (*C.float)(unsafe.Pointer(&inv[0])))
}

// siluMul sets dst[j] = g[j]/(1+e^(−g[j]))·u[j]; dst may be g.
func siluMul(dst, g, u []float32) {
	n := len(dst)
	if n == 0 {
		return
	}
	if len(g) < n || len(u) < n {
		panic("cpu: siluMul: buffers too short")
	}
	C.silu_mul(cbool(simd), (*C.float)(unsafe.Pointer(&dst[0])), (*C.float)(unsafe.Pointer(&g[0])), (*C.float)(unsafe.Pointer(&u[0])), C.int(n))
}

// expMany sets dst[j] = e^x[j] with the vector kernel when useSIMD (and
// the machine has it), else the scalar one. For tests.
func expMany(useSIMD bool, dst, x []float32) {
	if len(dst) == 0 {
		return
	}
	C.exp_many(cbool(useSIMD && simd), (*C.float)(unsafe.Pointer(&dst[0])), (*C.float)(unsafe.Pointer(&x[0])), C.int(len(dst)))
}

// bf16Rows converts rows [lo, hi) of the BF16 weight w into dst, row after
// row (len(dst) ≥ (hi−lo)·cols), exactly, in one cgo call: an AVX2 loop
// where the machine has it (BenchmarkBF16Decode: 6× the Go loop's speed).
func bf16Rows(dst []float32, w *Tensor, lo, hi int) { bf16RowsWith(simd, dst, w, lo, hi) }

// bf16RowsWith is bf16Rows with the AVX2 loop only when useSIMD (and the
// machine has it). For tests.
func bf16RowsWith(useSIMD bool, dst []float32, w *Tensor, lo, hi int) {
	if hi <= lo || w.cols == 0 {
		return
	}
	if len(dst) < (hi-lo)*w.cols {
		panic("cpu: bf16Rows: dst too short")
	}
	src := w.bf16[lo*w.stride:]
	_ = src[(hi-lo-1)*w.stride+w.cols-1]
	C.bf16_rows(cbool(useSIMD && simd), (*C.float)(unsafe.Pointer(&dst[0])), (*C.uint16_t)(unsafe.Pointer(&src[0])), C.long(hi-lo), C.long(w.cols), C.long(w.stride))
}
