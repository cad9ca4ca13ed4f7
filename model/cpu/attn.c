// attn.c: the panel kernel (products with weights of small k, laid out
// once), the blocked panel kernel (weights of any k and type, packed as
// they are multiplied) and the fused attention kernels, AVX-512F (attn_rows) and
// AVX2+FMA (attn_rows2); target attributes per function, picked at run
// time by the Go side's avx2 argument.
#include <math.h>
#include <string.h>

#include "half.h"
#include "kernels.h"
#include "simd.h"

#if defined(__x86_64__)
// ROW_CASES6(T) is a switch's cases for a tile of 6 down to 1 rows, each
// T(rows) with the count a constant (each count its own unrolled tile);
// ROW_CASES8 adds 8 and 7.
#define ROW_CASES6(T) \
	case 6: T(6); break; case 5: T(5); break; case 4: T(4); break; \
	case 3: T(3); break; case 2: T(2); break; case 1: T(1); break
#define ROW_CASES8(T) case 8: T(8); break; case 7: T(7); break; ROW_CASES6(T)

// The fused attention kernel (AVX-512F): for one head and a block of query
// rows, scores, softmax and the product with v in blocks of 8 query rows,
// so that the 8 score rows stay in L1 between the three. Both products go
// through one register tile, c[mr × 32] = α·a[mr × K]·b[K × 32] (b row-major),
// with kᵀ and v laid out once per kv head (attn_pack) so that both
// products read b row by row.
#define ATTN_MR 8

// A tile of mr ≤ 8 rows and nv (1 or 2) vectors of 16 columns, the last
// ones masked by m0, m1; c row i gets α·rs[i]·(a·b) (rs may be NULL).
__attribute__((target("avx512f"), always_inline))
static inline void attn_tile(const int mr, const int nv, int K, const float *a, long lda,
		const float *b, long ldb, float *c, long ldc, float alpha, const float *rs,
		__mmask16 m0, __mmask16 m1) {
	__m512 acc[ATTN_MR][2];
#pragma GCC unroll 8
	for (int i = 0; i < mr; i++) {
		acc[i][0] = _mm512_setzero_ps();
		acc[i][1] = _mm512_setzero_ps();
	}
	for (int k = 0; k < K; k++) {
		const float *bk = b + (long)k * ldb;
		__m512 b0 = _mm512_maskz_loadu_ps(m0, bk);
		__m512 b1 = nv > 1 ? _mm512_maskz_loadu_ps(m1, bk + 16) : b0;
#pragma GCC unroll 8
		for (int i = 0; i < mr; i++) {
			__m512 ai = _mm512_set1_ps(a[(long)i * lda + k]);
			acc[i][0] = _mm512_fmadd_ps(ai, b0, acc[i][0]);
			if (nv > 1) acc[i][1] = _mm512_fmadd_ps(ai, b1, acc[i][1]);
		}
	}
#pragma GCC unroll 8
	for (int i = 0; i < mr; i++) {
		__m512 sc = _mm512_set1_ps(rs ? alpha * rs[i] : alpha);
		_mm512_mask_storeu_ps(c + (long)i * ldc, m0, _mm512_mul_ps(acc[i][0], sc));
		if (nv > 1) _mm512_mask_storeu_ps(c + (long)i * ldc + 16, m1, _mm512_mul_ps(acc[i][1], sc));
	}
}

// attn_gemm: c[m × n] = α·diag(rs)·a[m × K]·b[K × n], m ≤ 8, in tiles of
// 32 columns.
__attribute__((target("avx512f")))
static void attn_gemm(int m, int n, int K, const float *a, long lda, const float *b, long ldb,
		float *c, long ldc, float alpha, const float *rs) {
	for (int j = 0; j < n; j += 32) {
		int w = n - j < 32 ? n - j : 32;
		__mmask16 m0 = w >= 16 ? 0xFFFF : (__mmask16)((1u << w) - 1);
		__mmask16 m1 = w >= 32 ? 0xFFFF : w > 16 ? (__mmask16)((1u << (w - 16)) - 1) : 0;
		int nv = w > 16 ? 2 : 1;
#define ATTN_TILE(MR) \
		if (nv == 2) attn_tile(MR, 2, K, a, lda, b + j, ldb, c + j, ldc, alpha, rs, m0, m1); \
		else attn_tile(MR, 1, K, a, lda, b + j, ldb, c + j, ldc, alpha, rs, m0, m1)
		switch (m) { ROW_CASES8(ATTN_TILE); }
#undef ATTN_TILE
	}
}

EXP_POLY(exp_poly512, __m512, _mm512, "avx512f")

__attribute__((target("avx512f")))
static inline __m512 exp512(__m512 x) {
	const __m512 hi = _mm512_set1_ps(EXP_HI), lo = _mm512_set1_ps(EXP_LO);
	__m512 xc = _mm512_max_ps(lo, _mm512_min_ps(hi, x));
	__m512 fx = _mm512_roundscale_ps(_mm512_fmadd_ps(xc, _mm512_set1_ps(LOG2E), _mm512_set1_ps(0.5f)),
		_MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
	__m512 p = exp_poly512(fx, xc);
	__m512i n = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvttps_epi32(fx), _mm512_set1_epi32(127)), 23);
	__m512 y = _mm512_mul_ps(p, _mm512_castsi512_ps(n));
	// As exp_scalar: 0 below EXP_LO, +Inf above EXP_HI.
	y = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ), y, _mm512_setzero_ps());
	return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, hi, _CMP_GT_OQ), y, _mm512_set1_ps(INFINITY));
}

// attn_softmax: each of the m rows of s (n used, stride lds) becomes
// e^(s−max) in place, inv[i] = 1/Σ; sums spill to double every 256.
__attribute__((target("avx512f")))
static void attn_softmax(int m, int n, float *s, long lds, float *inv) {
	for (int i = 0; i < m; i++) {
		float *row = s + (long)i * lds;
		__m512 vm = _mm512_set1_ps(-INFINITY);
		int j = 0;
		for (; j + 16 <= n; j += 16) vm = _mm512_max_ps(vm, _mm512_loadu_ps(row + j));
		__mmask16 t = (__mmask16)((1u << (n - j)) - 1);
		if (t) vm = _mm512_mask_max_ps(vm, t, vm, _mm512_maskz_loadu_ps(t, row + j));
		__m512 vmx = _mm512_set1_ps(_mm512_reduce_max_ps(vm));
		double sum = 0;
		for (j = 0; j < n;) {
			__m512 acc = _mm512_setzero_ps();
			for (int c = 0; c < 16 && j < n; c++, j += 16) {
				__mmask16 mk = n - j >= 16 ? 0xFFFF : (__mmask16)((1u << (n - j)) - 1);
				__m512 e = exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(mk, row + j), vmx));
				_mm512_mask_storeu_ps(row + j, mk, e);
				acc = _mm512_add_ps(acc, _mm512_maskz_mov_ps(mk, e));
			}
			sum += _mm512_reduce_add_ps(acc);
		}
		inv[i] = (float)(1.0 / sum);
	}
}

// attn_pack lays out keys [lo, hi) of one kv head for attn_rows:
// kt[d·ldt + j] = k[j·ldk + d] (in blocks of 16 keys, so each write touches
// one cache line per d) and vp[j·hd + d] = v[j·ldv + d], contiguous: the
// product with v then reads consecutive rows, not one page per key.
static void attn_pack(int lo, int hi, int hd, const float *k, long ldk, const float *v, long ldv,
		float *kt, long ldt, float *vp) {
	for (int j0 = lo; j0 < hi; j0 += 16) {
		int je = j0 + 16 < hi ? j0 + 16 : hi;
		for (int d = 0; d < hd; d++)
			for (int j = j0; j < je; j++) kt[(long)d * ldt + j] = k[(long)j * ldk + d];
	}
	for (int j = lo; j < hi; j++) memcpy(vp + (long)j * hd, v + (long)j * ldv, (size_t)hd * sizeof(float));
}

// attn_rows: o[i] = softmax(scale·q[i]·ktᵀ)·v for the m query rows of one
// head; kt is that head's [hd × nk] transposed keys (stride ldt), s a
// scratch of 8·ldt + 8 floats.
__attribute__((target("avx512f")))
static void attn_rows(int m, int nk, int hd, float scale, const float *q, long ldq,
		const float *kt, long ldt, const float *v, long ldv, float *o, long ldo, float *s) {
	float *inv = s + ATTN_MR * ldt;
	for (int i = 0; i < m; i += ATTN_MR) {
		int mr = m - i < ATTN_MR ? m - i : ATTN_MR;
		attn_gemm(mr, nk, hd, q + (long)i * ldq, ldq, kt, ldt, s, ldt, scale, NULL);
		attn_softmax(mr, nk, s, ldt, inv);
		attn_gemm(mr, hd, nk, s, ldt, v, ldv, o + (long)i * ldo, ldo, 1.0f, inv);
	}
}

// The same kernel for AVX2+FMA: 16 registers of 8 lanes hold a tile of
// 6 rows × 16 columns (12 accumulators, two rows of b, a broadcast), so
// a block is 6 query rows. Column tails use masked loads and stores.
#define ATTN_MR2 6

__attribute__((target("avx2,fma"), always_inline))
static inline void attn_tile2(const int mr, const int nv, const int full, const int add, int K, const float *a, long lda,
		const float *b, long ldb, float *c, long ldc, float alpha, const float *rs,
		__m256i m0, __m256i m1) {
	__m256 acc[ATTN_MR2][2];
#pragma GCC unroll 6
	for (int i = 0; i < mr; i++) {
		// add (α = 1, no rs): the sums go on from what c holds, so a pass
		// over k in several blocks is one chain of FMAs.
		const float *ci = c + (long)i * ldc;
		acc[i][0] = !add ? _mm256_setzero_ps() : full ? _mm256_loadu_ps(ci) : _mm256_maskload_ps(ci, m0);
		acc[i][1] = !add || nv < 2 ? _mm256_setzero_ps() : full ? _mm256_loadu_ps(ci + 8) : _mm256_maskload_ps(ci + 8, m1);
	}
	// Four steps an iteration (-O2 leaves the loop rolled): attention's
	// rows 3–7% and the panel products 0–15% faster, measured on Zen 3
	// with the two builds alternating in one process.
#pragma GCC unroll 4
	for (int k = 0; k < K; k++) {
		const float *bk = b + (long)k * ldb;
		__m256 b0 = full ? _mm256_loadu_ps(bk) : _mm256_maskload_ps(bk, m0);
		__m256 b1 = nv > 1 ? (full ? _mm256_loadu_ps(bk + 8) : _mm256_maskload_ps(bk + 8, m1)) : b0;
#pragma GCC unroll 6
		for (int i = 0; i < mr; i++) {
			__m256 ai = _mm256_broadcast_ss(a + (long)i * lda + k);
			acc[i][0] = _mm256_fmadd_ps(ai, b0, acc[i][0]);
			if (nv > 1) acc[i][1] = _mm256_fmadd_ps(ai, b1, acc[i][1]);
		}
	}
#pragma GCC unroll 6
	for (int i = 0; i < mr; i++) {
		__m256 sc = _mm256_set1_ps(rs ? alpha * rs[i] : alpha);
		float *ci = c + (long)i * ldc;
		if (full) {
			_mm256_storeu_ps(ci, _mm256_mul_ps(acc[i][0], sc));
			if (nv > 1) _mm256_storeu_ps(ci + 8, _mm256_mul_ps(acc[i][1], sc));
		} else {
			_mm256_maskstore_ps(ci, m0, _mm256_mul_ps(acc[i][0], sc));
			if (nv > 1) _mm256_maskstore_ps(ci + 8, m1, _mm256_mul_ps(acc[i][1], sc));
		}
	}
}

// tile2 runs attn_tile2 on a tile of w ≤ 16 columns and mr ≤ 6 rows,
// with the masks of its column tail (lane < w, lane + 8 < w) and an
// instance compiled for each row count, vector count and tail. b16 says
// b has 16 columns whatever w (a zero-padded panel): always two vectors.
__attribute__((target("avx2,fma"), always_inline))
static inline void tile2(int mr, int w, int b16, int K, const float *a, long lda,
		const float *b, long ldb, float *c, long ldc, float alpha, const float *rs) {
	const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
	__m256i m0 = _mm256_cmpgt_epi32(_mm256_set1_epi32(w), lane);
	__m256i m1 = _mm256_cmpgt_epi32(_mm256_set1_epi32(w - 8), lane);
	int nv = b16 || w > 8 ? 2 : 1, full = w == 16 || (w == 8 && nv == 1);
#define TILE2(MR) \
	if (nv == 2) { if (full) attn_tile2(MR, 2, 1, 0, K, a, lda, b, ldb, c, ldc, alpha, rs, m0, m1); \
		else attn_tile2(MR, 2, 0, 0, K, a, lda, b, ldb, c, ldc, alpha, rs, m0, m1); } \
	else { if (full) attn_tile2(MR, 1, 1, 0, K, a, lda, b, ldb, c, ldc, alpha, rs, m0, m1); \
		else attn_tile2(MR, 1, 0, 0, K, a, lda, b, ldb, c, ldc, alpha, rs, m0, m1); }
	switch (mr) { ROW_CASES6(TILE2); }
#undef TILE2
}

// The panel kernel: c[m × n] = a[m × k]·wᵀ for a weight w [n × k] with a
// small k, laid out once (panel_pack) as panels of 16 of its rows, k-major
// and zero-padded: p[q·k·16 + kk·16 + r] = w[(16q + r)·ldw + kk]. Each
// 6 × 16 tile of c is one pass over k on attn_tile2, a's rows read in
// place, c written once: neither a packed again at every call
// nor c cleared first, as a GEMM library does.
// A whole panel goes 8 rows × 8 columns at a time through an 8 × 8
// transpose in registers (attention lays out every kv head of every
// request at every layer this way); the columns past a multiple of 8 and a
// last panel of fewer rows one value at a time.
// The types of weight panel_pack_t lays out: float32, IEEE halves,
// bfloat16s (each converted to float32 exactly as it is packed).
enum { WT_F32 = 0, WT_F16 = 1, WT_BF16 = 2 };

// load8 is 8 consecutive values of a weight of type t at p as float32,
// exactly, on AVX2 alone (halves without F16C: the magnitude's bits moved
// into a float32's and scaled by 2^112, which also makes subnormals
// right; the largest exponent becomes ±Inf or NaN).
__attribute__((target("avx2,fma"), always_inline))
static inline __m256 load8(const int t, const void *p) {
	if (t == WT_F32) return _mm256_loadu_ps(p);
	__m256i x = _mm256_cvtepu16_epi32(_mm_loadu_si128(p));
	if (t == WT_BF16) return _mm256_castsi256_ps(_mm256_slli_epi32(x, 16));
	__m256i sign = _mm256_slli_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x8000)), 16);
	__m256i mag = _mm256_slli_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x7fff)), 13);
	__m256 f = _mm256_mul_ps(_mm256_castsi256_ps(mag), _mm256_castsi256_ps(_mm256_set1_epi32(0x77800000)));
	__m256i top = _mm256_cmpeq_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x7c00)), _mm256_set1_epi32(0x7c00));
	f = _mm256_blendv_ps(f, _mm256_castsi256_ps(_mm256_or_si256(mag, _mm256_set1_epi32(0x7f800000))), _mm256_castsi256_ps(top));
	return _mm256_or_ps(f, _mm256_castsi256_ps(sign));
}

// value1 is the value i of a weight of type t at p as float32.
static inline float value1(const int t, const void *p, long i) {
	if (t == WT_F32) return ((const float *)p)[i];
	uint16_t h = ((const uint16_t *)p)[i];
	if (t == WT_F16) return half_to_float(h);
	uint32_t bits = (uint32_t)h << 16;
	float f;
	memcpy(&f, &bits, 4);
	return f;
}

// panel_pack_t lays out w [n × k] of type t (row stride ldw values) as
// ⌈n/16⌉ panels of 16 rows, k-major and zero-padded, in float32.
__attribute__((target("avx2,fma"), always_inline))
static inline void panel_pack_t(const int t, const void *w, long ldw, int n, int k, float *p) {
	const long es = t == WT_F32 ? 4 : 2;
	const char *wb = w;
	for (int q = 0; q * 16 < n; q++) {
		float *pq = p + (long)q * k * 16;
		int rows = n - q * 16 < 16 ? n - q * 16 : 16, k0 = 0;
		if (rows == 16) {
			for (; k0 + 8 <= k; k0 += 8) {
				for (int h = 0; h < 16; h += 8) {
					const char *src = wb + ((long)(q * 16 + h) * ldw + k0) * es;
					__m256 r[8], t8[8];
					for (int i = 0; i < 8; i++) r[i] = load8(t, src + (long)i * ldw * es);
					for (int i = 0; i < 8; i += 2) {
						t8[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
						t8[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
					}
					for (int i = 0; i < 8; i += 4) {
						r[i] = _mm256_shuffle_ps(t8[i], t8[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
						r[i + 1] = _mm256_shuffle_ps(t8[i], t8[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
						r[i + 2] = _mm256_shuffle_ps(t8[i + 1], t8[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
						r[i + 3] = _mm256_shuffle_ps(t8[i + 1], t8[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
					}
					// r[0..3] hold columns 0..3 of rows 0..3 (low) and 4..7 of
					// rows 0..3 (high); r[4..7] the same of rows 4..7.
					for (int c = 0; c < 4; c++) {
						_mm256_storeu_ps(pq + (long)(k0 + c) * 16 + h, _mm256_permute2f128_ps(r[c], r[c + 4], 0x20));
						_mm256_storeu_ps(pq + (long)(k0 + c + 4) * 16 + h, _mm256_permute2f128_ps(r[c], r[c + 4], 0x31));
					}
				}
			}
		}
		for (int r = 0; r < 16; r++) {
			int row = q * 16 + r;
			for (int kk = k0; kk < k; kk++) pq[(long)kk * 16 + r] = row < n ? value1(t, wb, (long)row * ldw + kk) : 0;
		}
	}
}

__attribute__((target("avx2,fma")))
static void panel_pack(const float *w, long ldw, int n, int k, float *p) { panel_pack_t(WT_F32, w, ldw, n, k, p); }

// panel_gemm computes α times columns [q0·16, q0·16 + n) of c from panels q0, …:
// rows in blocks of 96 (their a stays in L2 while every panel passes),
// then panel by panel, in tiles of up to 6 rows (row_tiles); on
// panel_gemm16 where panel_avx512 says (the same bits).
static void panel_gemm16(int m, int n, int k, const float *a, long lda, const float *p, float *c, long ldc, float alpha);
static int panel_avx512;
__attribute__((target("avx2,fma")))
static void panel_gemm(int m, int n, int k, const float *a, long lda, const float *p, float *c, long ldc, float alpha) {
	if (panel_avx512) {
		panel_gemm16(m, n, k, a, lda, p, c, ldc, alpha);
		return;
	}
	for (int i0 = 0; i0 < m; i0 += 96) {
		int i1 = i0 + 96 < m ? i0 + 96 : m;
		for (int j = 0; j < n; j += 16) {
			const float *pq = p + (long)(j / 16) * k * 16;
			int w = n - j < 16 ? n - j : 16;
			for (int T = row_tiles(i1 - i0, ATTN_MR2), ti = 0, i = i0, h; ti < T; ti++, i += h) {
				h = row_tile_h(i1 - i0, T, ti);
				tile2(h, w, 1, k, a + (long)i * lda, lda, pq, 16, c + (long)i * ldc + j, ldc, alpha, NULL);
			}
		}
	}
}

// tile2_add runs a tile of mr ≤ 6 rows and w ≤ 16 columns on a zero-padded
// panel (two vectors), its sums started from c where add.
__attribute__((target("avx2,fma"), always_inline))
static inline void tile2_add(int mr, int w, int add, int K, const float *a, long lda, const float *b, float *c, long ldc) {
	const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
	__m256i m0 = _mm256_cmpgt_epi32(_mm256_set1_epi32(w), lane);
	__m256i m1 = _mm256_cmpgt_epi32(_mm256_set1_epi32(w - 8), lane);
#define TILE2A(MR) \
	if (w == 16) { if (add) attn_tile2(MR, 2, 1, 1, K, a, lda, b, 16, c, ldc, 1.0f, NULL, m0, m1); \
		else attn_tile2(MR, 2, 1, 0, K, a, lda, b, 16, c, ldc, 1.0f, NULL, m0, m1); } \
	else { if (add) attn_tile2(MR, 2, 0, 1, K, a, lda, b, 16, c, ldc, 1.0f, NULL, m0, m1); \
		else attn_tile2(MR, 2, 0, 0, K, a, lda, b, 16, c, ldc, 1.0f, NULL, m0, m1); }
	switch (mr) { ROW_CASES6(TILE2A); }
#undef TILE2A
}

// The panel kernel on AVX-512F: 32 registers of 16 lanes hold a tile of
// 12 rows × 2 panels (24 accumulators, a row of each panel, a broadcast),
// twice the columns and rows of attn_tile2's. Each element of c is the
// same chain of FMAs in k's order as on attn_tile2 (from 0, or from c
// where add; α applied once at the end), so both kernels give the same
// bits and the machine's widest runs. panel_avx512 picks it
// (dlmc_panel_set_avx512: the Go side's ISA cap).
#define PANEL_MR16 12

void dlmc_panel_set_avx512(int on) { panel_avx512 = on; }

// ptile16 is a tile of mr ≤ 12 rows and np (1 or 2) zero-padded panels
// (p0, p1: 16 columns a k, k-major) written to c's columns under m0 (p0's)
// and m1 (p1's).
__attribute__((target("avx512f"), always_inline))
static inline void ptile16(const int mr, const int np, const int add, int K, const float *a, long lda,
		const float *p0, const float *p1, float *c, long ldc, float alpha, __mmask16 m0, __mmask16 m1) {
	__m512 acc[PANEL_MR16][2];
#pragma GCC unroll 12
	for (int i = 0; i < mr; i++) {
		const float *ci = c + (long)i * ldc;
		acc[i][0] = add ? _mm512_maskz_loadu_ps(m0, ci) : _mm512_setzero_ps();
		acc[i][1] = add && np > 1 ? _mm512_maskz_loadu_ps(m1, ci + 16) : _mm512_setzero_ps();
	}
#pragma GCC unroll 2
	for (int k = 0; k < K; k++) {
		__m512 b0 = _mm512_loadu_ps(p0 + (long)k * 16);
		__m512 b1 = np > 1 ? _mm512_loadu_ps(p1 + (long)k * 16) : b0;
#pragma GCC unroll 12
		for (int i = 0; i < mr; i++) {
			__m512 ai = _mm512_set1_ps(a[(long)i * lda + k]);
			acc[i][0] = _mm512_fmadd_ps(ai, b0, acc[i][0]);
			if (np > 1) acc[i][1] = _mm512_fmadd_ps(ai, b1, acc[i][1]);
		}
	}
	__m512 sc = _mm512_set1_ps(alpha);
#pragma GCC unroll 12
	for (int i = 0; i < mr; i++) {
		float *ci = c + (long)i * ldc;
		_mm512_mask_storeu_ps(ci, m0, _mm512_mul_ps(acc[i][0], sc));
		if (np > 1) _mm512_mask_storeu_ps(ci + 16, m1, _mm512_mul_ps(acc[i][1], sc));
	}
}

// ptile16_n runs ptile16 on the panels from p (kp floats apart) under c's
// columns [0, w), w ≤ 32, mr ≤ 12 rows: an instance for each row count,
// panel count and add.
__attribute__((target("avx512f"), always_inline))
static inline void ptile16_n(int mr, int w, int add, int K, const float *a, long lda, const float *p, long kp,
		float *c, long ldc, float alpha) {
	__mmask16 m0 = w >= 16 ? 0xffff : (__mmask16)((1u << w) - 1);
	__mmask16 m1 = w >= 32 ? 0xffff : w > 16 ? (__mmask16)((1u << (w - 16)) - 1) : 0;
	const float *p1 = p + kp;
#define PTILE(MR) \
	if (w > 16) { if (add) ptile16(MR, 2, 1, K, a, lda, p, p1, c, ldc, alpha, m0, m1); \
		else ptile16(MR, 2, 0, K, a, lda, p, p1, c, ldc, alpha, m0, m1); } \
	else { if (add) ptile16(MR, 1, 1, K, a, lda, p, p, c, ldc, alpha, m0, m1); \
		else ptile16(MR, 1, 0, K, a, lda, p, p, c, ldc, alpha, m0, m1); }
	switch (mr) {
	case 12: PTILE(12); break; case 11: PTILE(11); break; case 10: PTILE(10); break;
	case 9: PTILE(9); break; ROW_CASES8(PTILE);
	}
#undef PTILE
}

// tiles16 is c's columns [0, n) from the panels p (k floats of each of
// 16 columns, k·16 apart) on ptile16: rows in blocks of mc (their a stays
// in L2), then pairs of panels, in tiles of up to 12 rows, the sums
// started from c where add.
__attribute__((target("avx512f")))
static void tiles16(int m, int n, int add, int k, const float *a, long lda, const float *p, float *c, long ldc,
		float alpha, int mc) {
	for (int i0 = 0; i0 < m; i0 += mc) {
		int i1 = i0 + mc < m ? i0 + mc : m;
		for (int j = 0; j < n; j += 32)
			for (int T = row_tiles(i1 - i0, PANEL_MR16), ti = 0, i = i0, h; ti < T; ti++, i += h) {
				h = row_tile_h(i1 - i0, T, ti);
				ptile16_n(h, n - j < 32 ? n - j : 32, add, k, a + (long)i * lda, lda, p + (long)(j / 16) * k * 16,
					(long)k * 16, c + (long)i * ldc + j, ldc, alpha);
			}
	}
}

// panel_gemm16 is panel_gemm on ptile16: rows in blocks of 96, as there.
__attribute__((target("avx512f")))
static void panel_gemm16(int m, int n, int k, const float *a, long lda, const float *p, float *c, long ldc, float alpha) {
	tiles16(m, n, 0, k, a, lda, p, c, ldc, alpha, 96);
}

// The blocked panel kernel, for weights of any k kept as the checkpoint
// holds them (F32, F16 or BF16): columns [c0, c0 + nc) of c[m × n] =
// a[m × k]·wᵀ, nc ≤ DLMC_WG_NB. w's rows c0… are laid out DLMC_WG_KC
// columns at a time into p (DLMC_WG_KC·DLMC_WG_NB floats; panel_pack_t,
// converting to float32 as it packs), and every 6 × 16 tile of c takes one
// pass over those columns on attn_tile2, its sums going on from what the
// earlier columns left in c. Each element of c is so one chain of FMAs in
// k's order whatever m, c0 or the thread: the same in any batch. Rows go
// in blocks of WG_MC (their a stays in L2), then panel by panel (16 KC
// columns of w, 32 KB at KC 512, stay in L1) in tiles of up to 6 rows.
#define WG_MC 192

// wg_at is where dlmc_wg_layout's layout of a weight with k columns
// holds the panels wg_block packs for rows [c0, c0 + nc) (c0 a multiple
// of DLMC_WG_NB) and columns pc…, in elements (floats for an F32 weight,
// halves or bfloat16s for a 16-bit one): the blocks of DLMC_WG_NB rows one
// after another, each its KC-column chunks in order, nc rounded up to 16.
static inline long wg_at(int k, int c0, int nc, int pc) {
	return (long)c0 * k + (long)pc * ((nc + 15) & ~15);
}

// widen16 converts cnt 16-bit values of type t at h to float32 at p,
// exactly, on vec.c's row converters (F16C's vcvtph2ps for halves where
// the CPU has it): a 16-bit layout's chunk made the panels panel_pack_t
// would have packed from the mapped weight, in order.
static void widen16(const int t, const uint16_t *h, long cnt, float *p) {
	if (t == WT_F16) dlmc_f16_rows(dlmc_have_f16c(), p, h, 1, cnt, cnt);
	else dlmc_bf16_rows(1, p, h, 1, cnt, cnt);
}

__attribute__((target("avx2,fma")))
static void wg_block(int t, int m, int k, const float *a, long lda, const void *w, long ldw, int c0, int nc,
		float *c, long ldc, float *pk, const void *laid) {
	const long es = t == WT_F32 ? 4 : 2;
	for (int pc = 0; pc < k; pc += DLMC_WG_KC) {
		int kc = k - pc < DLMC_WG_KC ? k - pc : DLMC_WG_KC;
		const char *src = (const char *)w + ((long)c0 * ldw + pc) * es;
		const float *p = pk;
		if (laid && t == WT_F32) p = (const float *)laid + wg_at(k, c0, nc, pc);
		else if (laid) widen16(t, (const uint16_t *)laid + wg_at(k, c0, nc, pc), (long)((nc + 15) & ~15) * kc, pk);
		else if (t == WT_F32) panel_pack_t(WT_F32, src, ldw, nc, kc, pk);
		else if (t == WT_F16) panel_pack_t(WT_F16, src, ldw, nc, kc, pk);
		else panel_pack_t(WT_BF16, src, ldw, nc, kc, pk);
		if (panel_avx512) {
			tiles16(m, nc, pc > 0, kc, a + pc, lda, p, c + c0, ldc, 1.0f, WG_MC);
			continue;
		}
		for (int i0 = 0; i0 < m; i0 += WG_MC) {
			int i1 = i0 + WG_MC < m ? i0 + WG_MC : m;
			for (int q = 0; q * 16 < nc; q++) {
				int wq = nc - q * 16 < 16 ? nc - q * 16 : 16;
				for (int T = row_tiles(i1 - i0, ATTN_MR2), ti = 0, i = i0, h; ti < T; ti++, i += h) {
					h = row_tile_h(i1 - i0, T, ti);
					tile2_add(h, wq, pc > 0, kc, a + (long)i * lda + pc, lda, p + (long)q * kc * 16,
						c + (long)i * ldc + c0 + q * 16, ldc);
				}
			}
		}
	}
}

// panel_pack16 is panel_pack_t for a 16-bit weight kept 16-bit: the same
// panels (16 rows, k-major, zero-padded), each value's bits moved, not
// converted; 8 rows × 8 columns at a time through an 8 × 8 transpose of
// 16-bit lanes, the rest one value at a time.
__attribute__((target("avx2,fma")))
static void panel_pack16(const uint16_t *w, long ldw, int n, int k, uint16_t *p) {
	for (int q = 0; q * 16 < n; q++) {
		uint16_t *pq = p + (long)q * k * 16;
		int rows = n - q * 16 < 16 ? n - q * 16 : 16, k0 = 0;
		if (rows == 16) {
			for (; k0 + 8 <= k; k0 += 8) {
				for (int h = 0; h < 16; h += 8) {
					const uint16_t *src = w + (long)(q * 16 + h) * ldw + k0;
					__m128i r[8], a[8], b[8];
					for (int i = 0; i < 8; i++) r[i] = _mm_loadu_si128((const void *)(src + (long)i * ldw));
					for (int i = 0; i < 8; i += 2) {
						a[i] = _mm_unpacklo_epi16(r[i], r[i + 1]);
						a[i + 1] = _mm_unpackhi_epi16(r[i], r[i + 1]);
					}
					// a[2j], a[2j+1]: rows 2j, 2j+1 interleaved, columns 0–3 and 4–7.
					for (int i = 0; i < 2; i++) {
						b[4 * i + 0] = _mm_unpacklo_epi32(a[i], a[i + 2]);
						b[4 * i + 1] = _mm_unpackhi_epi32(a[i], a[i + 2]);
						b[4 * i + 2] = _mm_unpacklo_epi32(a[i + 4], a[i + 6]);
						b[4 * i + 3] = _mm_unpackhi_epi32(a[i + 4], a[i + 6]);
					}
					// b[4i+0]: columns 4i, 4i+1 of rows 0–3; b[4i+1]: 4i+2, 4i+3
					// of rows 0–3; b[4i+2], b[4i+3]: the same of rows 4–7.
					for (int i = 0; i < 2; i++)
						for (int j = 0; j < 2; j++) {
							int col = 4 * i + 2 * j;
							__m128i lo = b[4 * i + j], hi = b[4 * i + 2 + j];
							_mm_storeu_si128((void *)(pq + (long)(k0 + col) * 16 + h), _mm_unpacklo_epi64(lo, hi));
							_mm_storeu_si128((void *)(pq + (long)(k0 + col + 1) * 16 + h), _mm_unpackhi_epi64(lo, hi));
						}
				}
			}
		}
		for (int r = 0; r < 16; r++) {
			int row = q * 16 + r;
			for (int kk = k0; kk < k; kk++) pq[(long)kk * 16 + r] = row < n ? w[(long)row * ldw + kk] : 0;
		}
	}
}

// wg_layout writes the blocks [b0, b1) of DLMC_WG_NB rows of the weight
// w [n × k] of type t in dlmc_wg_layout's layout: each KC-column chunk as
// wg_block packs it (panel_pack_t; a 16-bit weight's values kept 16-bit,
// panel_pack16), at wg_at.
__attribute__((target("avx2,fma")))
static void wg_layout(int t, const void *w, long ldw, int n, int k, int b0, int b1, void *dst) {
	for (int b = b0; b < b1; b++) {
		int c0 = b * DLMC_WG_NB, nc = n - c0 < DLMC_WG_NB ? n - c0 : DLMC_WG_NB;
		for (int pc = 0; pc < k; pc += DLMC_WG_KC) {
			int kc = k - pc < DLMC_WG_KC ? k - pc : DLMC_WG_KC;
			long at = wg_at(k, c0, nc, pc);
			if (t == WT_F32)
				panel_pack_t(WT_F32, (const float *)w + (long)c0 * ldw + pc, ldw, nc, kc, (float *)dst + at);
			else
				panel_pack16((const uint16_t *)w + (long)c0 * ldw + pc, ldw, nc, kc, (uint16_t *)dst + at);
		}
	}
}

// attn_softmax2: attn_softmax for AVX2 on scores in units of log₂e (the
// scale folded into the score product: 2^(s − max), one product fewer an
// element than e^x), rows whose stride lds is a multiple of 8 and whose
// scores past n up to it are finite (attn_rows2 computes them on the
// panels' zero padding): the last n mod 8 scores go
// through the vector code with the lanes past n set to −∞ for the max
// and to 0 after e^x (a scalar e^x calls floorf, as slow as a vector).
// Two vectors at a time; float partial sums over at most 256 scores,
// then double.
__attribute__((target("avx2,fma")))
static void attn_softmax2(int m, int n, float *s, long lds, float *inv) {
	const int nf = n & ~7;
	const __m256 live = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(n - nf),
		_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
	const __m256 ninf = _mm256_set1_ps(-INFINITY);
	for (int i = 0; i < m; i++) {
		float *row = s + (long)i * lds;
		__m256 m0 = ninf, m1 = ninf;
		int j = 0;
		for (; j + 16 <= nf; j += 16) {
			m0 = _mm256_max_ps(m0, _mm256_loadu_ps(row + j));
			m1 = _mm256_max_ps(m1, _mm256_loadu_ps(row + j + 8));
		}
		if (j < nf) m0 = _mm256_max_ps(m0, _mm256_loadu_ps(row + j));
		if (nf < n) m1 = _mm256_max_ps(m1, _mm256_blendv_ps(ninf, _mm256_loadu_ps(row + nf), live));
		__m256 vmx = _mm256_set1_ps(hmax256(_mm256_max_ps(m0, m1)));
		double sum = 0;
		for (j = 0; j < nf;) {
			int je = j + 256 < nf ? j + 256 : nf;
			__m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
			for (; j + 16 <= je; j += 16) {
				__m256 e0 = exp2_le0(_mm256_sub_ps(_mm256_loadu_ps(row + j), vmx));
				__m256 e1 = exp2_le0(_mm256_sub_ps(_mm256_loadu_ps(row + j + 8), vmx));
				_mm256_storeu_ps(row + j, e0);
				_mm256_storeu_ps(row + j + 8, e1);
				a0 = _mm256_add_ps(a0, e0);
				a1 = _mm256_add_ps(a1, e1);
			}
			if (j < je) {
				__m256 e0 = exp2_le0(_mm256_sub_ps(_mm256_loadu_ps(row + j), vmx));
				_mm256_storeu_ps(row + j, e0);
				a0 = _mm256_add_ps(a0, e0);
				j += 8;
			}
			sum += hsum256(_mm256_add_ps(a0, a1));
		}
		if (nf < n) {
			__m256 e = _mm256_and_ps(exp2_le0(_mm256_sub_ps(_mm256_loadu_ps(row + nf), vmx)), live);
			_mm256_storeu_ps(row + nf, e);
			sum += hsum256(e);
		}
		inv[i] = (float)(1.0 / sum);
	}
}

// attn_pack2 lays out keys [lo, hi) of one kv head (lo a multiple of 16)
// for attn_rows2 in layouts of pnk keys: kᵀ as the panel kernel's panels
// of 16 keys (kp[(j/16)·hd·16 + d·16 + j%16] = k[j·ldk + d], zero from hi
// up to a multiple of 16), each read front to back by the scores' tiles,
// and v as panels of 16 columns, key-major, zero past hd
// (vp[(c/16)·pnk·16 + j·16 + c%16] = v[j·ldv + c]): each tile of the
// values product reads one contiguous run. Rows of a head of 32 laid out
// whole (128 B apart) put a tile's 16 columns in half of L1's sets (2–3%
// slower, alternating in one process).
__attribute__((target("avx2,fma")))
static void attn_pack2(int lo, int hi, int pnk, int hd, const float *k, long ldk, const float *v, long ldv,
		float *kp, float *vp) {
	panel_pack(k + (long)lo * ldk, ldk, hi - lo, hd, kp + (long)lo * hd);
	for (int c0 = 0; c0 < hd; c0 += 16) {
		float *pc = vp + (long)(c0 / 16) * pnk * 16 + (long)lo * 16;
		const float *vc = v + (long)lo * ldv + c0;
		if (hd - c0 >= 16) {
			for (int j = lo; j < hi; j++, pc += 16, vc += ldv) {
				_mm256_storeu_ps(pc, _mm256_loadu_ps(vc));
				_mm256_storeu_ps(pc + 8, _mm256_loadu_ps(vc + 8));
			}
			continue;
		}
		for (int j = lo; j < hi; j++, pc += 16, vc += ldv)
			for (int c = 0; c < 16; c++) pc[c] = c < hd - c0 ? vc[c] : 0;
	}
}

// attn_rows2_block is how many query rows attn_rows2 takes through each
// stage at once: 48, fewer where their scores would pass 128 KB (long
// sequences), at least 6. Each 16-key panel of kᵀ then serves up to 8
// tiles while in L1, each 16 columns of v up to 8 (3–4% faster than a
// block of 6 rows at a time at the bundled model's sizes).
static int attn_rows2_block(long ldt) {
	long r = 32768 / ldt / ATTN_MR2 * ATTN_MR2;
	return r > 48 ? 48 : r < ATTN_MR2 ? ATTN_MR2 : (int)r;
}

// attn_rows2_scratch is the floats of attn_rows2's scratch: a block's
// scores, their sums' inverses and its query rows side by side.
static long attn_rows2_scratch(long ldt, int hd) {
	return (long)attn_rows2_block(ldt) * (ldt + 1 + ((hd + 7) & ~7));
}

// attn_rows2: attn_rows for AVX2, kᵀ and v in attn_pack2's panels (ldt a
// multiple of 16; v's column panels ldv apart: 16 times the keys laid
// out, of which the first nk are read), s a scratch of
// attn_rows2_scratch(ldt, hd) floats.
// The scores are computed on whole panels, the zero padding's too: stores
// without masks (a masked store costs a dozen cycles on AMD's cores), the
// padding left out by the softmax.
__attribute__((target("avx2,fma")))
static void attn_rows2(int m, int nk, int hd, float scale, const float *q, long ldq,
		const float *kt, long ldt, const float *v, long ldv, float *o, long ldo, float *s) {
	int rb = attn_rows2_block(ldt), hd8 = (hd + 7) & ~7;
	float *inv = s + (long)rb * ldt, *qb = inv + rb;
	const float sc = scale * LOG2E;
	const __m256 vsc = _mm256_set1_ps(sc);
	for (int i0 = 0; i0 < m; i0 += rb) {
		int r = m - i0 < rb ? m - i0 : rb;
		// The block's query rows, scaled, side by side: rows ldq apart
		// (512 B for the bundled model) fall in a few of L1's sets.
		for (int i = 0; i < r; i++) {
			const float *qi = q + (long)(i0 + i) * ldq;
			float *bi = qb + (long)i * hd8;
			int d = 0;
			for (; d + 8 <= hd; d += 8) _mm256_storeu_ps(bi + d, _mm256_mul_ps(vsc, _mm256_loadu_ps(qi + d)));
			for (; d < hd; d++) bi[d] = qi[d] * sc;
		}
		panel_gemm(r, (nk + 15) & ~15, hd, qb, hd8, kt, s, ldt, 1.0f);
		attn_softmax2(r, nk, s, ldt, inv);
		for (int j = 0; j < hd; j += 16)
			for (int T = row_tiles(r, ATTN_MR2), ti = 0, i = 0, h; ti < T; ti++, i += h) {
				h = row_tile_h(r, T, ti);
				tile2(h, hd - j < 16 ? hd - j : 16, 1, nk, s + (long)i * ldt, ldt, v + (long)(j / 16) * ldv, 16,
					o + (long)(i0 + i) * ldo + j, ldo, 1.0f, inv + i);
			}
	}
}
#else
// Not x86-64: dlmc_have_* are 0, so the Go side never runs these.
static void attn_pack(int lo, int hi, int hd, const float *k, long ldk, const float *v, long ldv,
		float *kt, long ldt, float *vp) {
	(void)lo, (void)hi, (void)hd, (void)k, (void)ldk, (void)v, (void)ldv, (void)kt, (void)ldt, (void)vp;
}
static void attn_rows(int m, int nk, int hd, float scale, const float *q, long ldq,
		const float *kt, long ldt, const float *v, long ldv, float *o, long ldo, float *s) {
	(void)m, (void)nk, (void)hd, (void)scale, (void)q, (void)ldq, (void)kt, (void)ldt, (void)v, (void)ldv;
	(void)o, (void)ldo, (void)s;
}
static void attn_rows2(int m, int nk, int hd, float scale, const float *q, long ldq,
		const float *kt, long ldt, const float *v, long ldv, float *o, long ldo, float *s) {
	(void)m, (void)nk, (void)hd, (void)scale, (void)q, (void)ldq, (void)kt, (void)ldt, (void)v, (void)ldv;
	(void)o, (void)ldo, (void)s;
}
static long attn_rows2_scratch(long ldt, int hd) { (void)ldt, (void)hd; return 0; }
static void panel_pack(const float *w, long ldw, int n, int k, float *p) { (void)w, (void)ldw, (void)n, (void)k, (void)p; }
static void panel_gemm(int m, int n, int k, const float *a, long lda, const float *p, float *c, long ldc, float alpha) {
	(void)m, (void)n, (void)k, (void)a, (void)lda, (void)p, (void)c, (void)ldc, (void)alpha;
}
static void attn_pack2(int lo, int hi, int pnk, int hd, const float *k, long ldk, const float *v, long ldv,
		float *kp, float *vp) {
	(void)lo, (void)hi, (void)pnk, (void)hd, (void)k, (void)ldk, (void)v, (void)ldv, (void)kp, (void)vp;
}
static void wg_block(int t, int m, int k, const float *a, long lda, const void *w, long ldw, int c0, int nc,
		float *c, long ldc, float *p, const void *laid) {
	(void)t, (void)m, (void)k, (void)a, (void)lda, (void)w, (void)ldw, (void)c0, (void)nc, (void)c, (void)ldc, (void)p,
		(void)laid;
}
static void wg_layout(int t, const void *w, long ldw, int n, int k, int b0, int b1, void *dst) {
	(void)t, (void)w, (void)ldw, (void)n, (void)k, (void)b0, (void)b1, (void)dst;
}
#endif

#if !defined(__x86_64__)
void dlmc_panel_set_avx512(int on) { (void)on; }
#endif

void dlmc_wg_block(int type, int m, int k, const float *a, long lda, const void *w, long ldw, int c0, int nc,
		float *c, long ldc, float *p, const void *laid) {
	wg_block(type, m, k, a, lda, w, ldw, c0, nc, c, ldc, p, laid);
}

void dlmc_wg_layout(int type, const void *w, long ldw, int n, int k, int b0, int b1, void *dst) {
	wg_layout(type, w, ldw, n, k, b0, b1, dst);
}

void dlmc_panel_pack(const float *w, long ldw, int n, int k, float *p) { panel_pack(w, ldw, n, k, p); }

void dlmc_panel_gemm(int m, int n, int k, const float *a, long lda, const float *p, float *c, long ldc) {
	panel_gemm(m, n, k, a, lda, p, c, ldc, 1.0f);
}

void dlmc_attn_pack(int avx2, int lo, int hi, int pnk, int hd, const float *k, long ldk, const float *v, long ldv,
		float *kt, long ldt, float *vp) {
	if (lo >= hi) return;
	if (avx2) attn_pack2(lo, hi, pnk, hd, k, ldk, v, ldv, kt, vp);
	else attn_pack(lo, hi, hd, k, ldk, v, ldv, kt, ldt, vp);
}

// dlmc_attn_scratch: the floats of scratch dlmc_attn_rows needs at ldt, hd.
long dlmc_attn_scratch(int avx2, long ldt, int hd) {
	return avx2 ? attn_rows2_scratch(ldt, hd) : 8 * ldt + 8;
}

// dlmc_attn_rows: attn_rows2 on dlmc_attn_pack's layouts where avx2 (v in
// its panels, ldv apart), else attn_rows (v rows ldv apart).
void dlmc_attn_rows(int avx2, int m, int nk, int hd, float scale, const float *q, long ldq,
		const float *kt, long ldt, const float *v, long ldv, float *o, long ldo, float *s) {
	if (avx2) attn_rows2(m, nk, hd, scale, q, ldq, kt, ldt, v, ldv, o, ldo, s);
	else attn_rows(m, nk, hd, scale, q, ldq, kt, ldt, v, ldv, o, ldo, s);
}
