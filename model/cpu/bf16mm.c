// bf16mm.c: products of BF16 weights, kept as the file stores them, with
// activations rounded to BF16, on AVX512-BF16's vdpbf16ps (32 multiply-adds
// an instruction, F32 accumulation).
#include "kernels.h"
#include "simd.h"

#if defined(__x86_64__)
#include <immintrin.h>
#include <string.h>

#define TARGET_BF16 __attribute__((target("avx2,fma,avx512f,avx512bw,avx512vl,avx512bf16")))

// The weight is laid out once, at load (dlmc_bf16_pack): 16 rows of w a
// group, vector t of a group holding each row's pair of values (2t,
// 2t+1) in its 32-bit lane r, and BPACK_GROUPS groups (a block of 64
// rows) interleaved vector by vector. A row of x multiplies a vector by
// broadcasting its own pair t (vpbroadcastd): 16 outputs an instruction,
// each lane one row's sum, no horizontal sums. BPACK_PAIRS pairs of a
// block (32 KB) stay in L1 while every row of x runs against them, MR
// rows at a time.
#define BPACK_PAIRS 128
#define BPACK_GROUPS 4
#define BMR 6

// bpack16 lays rows (≤ 16; the rest zero) rows of w (ldw values apart)
// out as one group's np pairs: v[t·vs + r] is row r's pair t. Full groups
// go 16 × 16 lanes at a time through a register transpose.
TARGET_BF16 static void bpack16(int rows, long np, const uint16_t *w, long ldw, uint32_t *v, long vs) {
	long t = 0;
	if (rows == 16) {
		for (; t + 16 <= np; t += 16) {
			__m512i r[16], s[16];
			for (int i = 0; i < 16; i++) {
				const uint16_t *wi = w + i * ldw + 2 * t;
				r[i] = _mm512_loadu_si512(wi);
				// The row's line BPACK_PAIRS pairs on: 16 rows are read
				// side by side, more streams than the prefetcher follows.
				_mm_prefetch((const char *)(wi + 2 * BPACK_PAIRS), _MM_HINT_T0);
			}
			// 32-bit pairs, 64-bit quads, then 128-bit lanes across registers.
			for (int i = 0; i < 16; i += 2) {
				s[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
				s[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
			}
			for (int i = 0; i < 16; i += 4) {
				r[i] = _mm512_unpacklo_epi64(s[i], s[i + 2]);
				r[i + 1] = _mm512_unpackhi_epi64(s[i], s[i + 2]);
				r[i + 2] = _mm512_unpacklo_epi64(s[i + 1], s[i + 3]);
				r[i + 3] = _mm512_unpackhi_epi64(s[i + 1], s[i + 3]);
			}
			// r[4q + j] now holds, in 128-bit lane l, rows 4q … 4q+3 of
			// column 4l + j.
			for (int j = 0; j < 4; j++) {
				// Lanes 0 and 2 of each (0x88), 1 and 3 (0xdd).
				s[j] = _mm512_shuffle_i32x4(r[j], r[4 + j], 0x88);
				s[4 + j] = _mm512_shuffle_i32x4(r[j], r[4 + j], 0xdd);
				s[8 + j] = _mm512_shuffle_i32x4(r[8 + j], r[12 + j], 0x88);
				s[12 + j] = _mm512_shuffle_i32x4(r[8 + j], r[12 + j], 0xdd);
			}
			for (int j = 0; j < 4; j++) {
				// Columns j, 8 + j, 4 + j and 12 + j, all 16 rows.
				__m512i a0 = _mm512_shuffle_i32x4(s[j], s[8 + j], 0x88);
				__m512i a2 = _mm512_shuffle_i32x4(s[j], s[8 + j], 0xdd);
				__m512i a1 = _mm512_shuffle_i32x4(s[4 + j], s[12 + j], 0x88);
				__m512i a3 = _mm512_shuffle_i32x4(s[4 + j], s[12 + j], 0xdd);
				_mm512_storeu_si512(v + (t + j) * vs, a0);
				_mm512_storeu_si512(v + (t + 4 + j) * vs, a1);
				_mm512_storeu_si512(v + (t + 8 + j) * vs, a2);
				_mm512_storeu_si512(v + (t + 12 + j) * vs, a3);
			}
		}
	}
	for (; t < np; t++)
		for (int r = 0; r < 16; r++) {
			uint32_t pair = 0;
			if (r < rows) memcpy(&pair, w + r * ldw + 2 * t, 4);
			v[t * vs + r] = pair;
		}
}

// bmm adds to (first: stores in) c[MR × 64] the products of MR rows of x
// (BF16, ldx values apart; pairs [0, np) of the packs) with the
// BPACK_GROUPS packed groups at v; cols[g] of group g's 16 outputs are
// written.
TARGET_BF16 static inline __attribute__((always_inline)) void bmm(const int MR, long np, const uint16_t *x, long ldx,
	const uint32_t *v, float *c, long ldc, int first, const int *cols) {
	__m512 acc[BMR][BPACK_GROUPS];
	_Pragma("GCC unroll 6") for (int i = 0; i < MR; i++) _Pragma("GCC unroll 4") for (int g = 0; g < BPACK_GROUPS; g++)
		acc[i][g] = _mm512_setzero_ps();
	for (long t = 0; t < np; t++) {
		__m512i W[BPACK_GROUPS];
		_Pragma("GCC unroll 4") for (int g = 0; g < BPACK_GROUPS; g++) W[g] = _mm512_load_si512(v + (t * BPACK_GROUPS + g) * 16);
		_Pragma("GCC unroll 6") for (int i = 0; i < MR; i++) {
			int32_t pair;
			memcpy(&pair, x + i * ldx + 2 * t, 4);
			__m512i X = _mm512_set1_epi32(pair);
			_Pragma("GCC unroll 4") for (int g = 0; g < BPACK_GROUPS; g++)
				acc[i][g] = _mm512_dpbf16_ps(acc[i][g], (__m512bh)W[g], (__m512bh)X);
		}
	}
	_Pragma("GCC unroll 6") for (int i = 0; i < MR; i++) _Pragma("GCC unroll 4") for (int g = 0; g < BPACK_GROUPS; g++) {
		acc_store16(c + i * ldc + 16 * g, cols[g], acc[i][g], first);
	}
}

// bf16_mm_avx512 runs every row of x against each pack of the laid-out
// w in turn (BPACK_PAIRS pairs of a block of 64 rows: 32 KB, in L1), in
// tiles of at most BMR rows (row_tiles: even heights); the layout is in
// the loops' order, so each tile prefetches its share of the next pack.
TARGET_BF16 static void bf16_mm_avx512(int m, int n, int k, const uint16_t *x, long ldx, const uint32_t *pre, float *c,
	long ldc) {
	long np = k / 2;
	for (int j0 = 0; j0 < n; j0 += 16 * BPACK_GROUPS) {
		int cols[BPACK_GROUPS];
		for (int g = 0; g < BPACK_GROUPS; g++) {
			int left = n - j0 - 16 * g;
			cols[g] = left < 0 ? 0 : left < 16 ? left : 16;
		}
		for (long p0 = 0; p0 < np; p0 += BPACK_PAIRS) {
			long pp = np - p0 < BPACK_PAIRS ? np - p0 : BPACK_PAIRS;
			const uint32_t *v = pre + ((long)j0 * np + p0 * 16 * BPACK_GROUPS);
			int calls = row_tiles(m, BMR);
			long lines = pp * 16 * BPACK_GROUPS * 4 / 64, share = (lines + calls - 1) / calls;
			for (int ti = 0, i = 0, h; ti < calls; ti++, i += h) {
				h = row_tile_h(m, calls, ti);
				const char *next = (const char *)(v + pp * 16 * BPACK_GROUPS) + (long)ti * share * 64;
				for (long l = 0; l < share; l++) _mm_prefetch(next + 64 * l, _MM_HINT_T0);
				const uint16_t *xi = x + (long)i * ldx + 2 * p0;
				float *ci = c + (long)i * ldc + j0;
				switch (h) {
				case 6: bmm(6, pp, xi, ldx, v, ci, ldc, p0 == 0, cols); break;
				case 5: bmm(5, pp, xi, ldx, v, ci, ldc, p0 == 0, cols); break;
				case 4: bmm(4, pp, xi, ldx, v, ci, ldc, p0 == 0, cols); break;
				case 3: bmm(3, pp, xi, ldx, v, ci, ldc, p0 == 0, cols); break;
				case 2: bmm(2, pp, xi, ldx, v, ci, ldc, p0 == 0, cols); break;
				default: bmm(1, pp, xi, ldx, v, ci, ldc, p0 == 0, cols); break;
				}
			}
		}
	}
}

int dlmc_bf16_mm_packed(int m, int n, int k, const uint16_t *x, long ldx, const uint32_t *p, float *c, long ldc) {
	if (!dlmc_have_avx512bf16() || k % 2 != 0) return -1;
	if (m > 0 && n > 0 && k > 0) bf16_mm_avx512(m, n, k, x, ldx, p, c, ldc);
	return 0;
}

// dlmc_bf16_pack's layout: blocks of BPACK_GROUPS·16 rows, pair t of the
// block's group g at (t·BPACK_GROUPS + g)·16, so that BPACK_PAIRS pairs of
// a block are contiguous, the 32 KB bf16_mm_avx512 keeps in L1.
TARGET_BF16 static void bf16_pack_avx512(int n, int k, const uint16_t *w, long ldw, uint32_t *out) {
	long np = k / 2;
	for (int j0 = 0; j0 < n; j0 += 16) {
		int rows = n - j0 < 16 ? n - j0 : 16;
		int g = (j0 / 16) % BPACK_GROUPS;
		uint32_t *block = out + (long)(j0 - 16 * g) * np;
		bpack16(rows, np, w + (long)j0 * ldw, ldw, block + 16 * g, 16 * BPACK_GROUPS);
	}
	// Groups past n in the last block: zero.
	int ng = (n + 15) / 16;
	for (int g = ng; g % BPACK_GROUPS != 0; g++) {
		uint32_t *block = out + (long)(g - g % BPACK_GROUPS) * 16 * np;
		for (long t = 0; t < np; t++) memset(block + (t * BPACK_GROUPS + g % BPACK_GROUPS) * 16, 0, 64);
	}
}

int dlmc_bf16_pack(int n, int k, const uint16_t *w, long ldw, uint32_t *out) {
	if (!dlmc_have_avx512bf16() || k % 2 != 0) return -1;
	if (n > 0 && k > 0) bf16_pack_avx512(n, k, w, ldw, out);
	return 0;
}
#else
int dlmc_bf16_mm_packed(int m, int n, int k, const uint16_t *x, long ldx, const uint32_t *p, float *c, long ldc) {
	(void)m; (void)n; (void)k; (void)x; (void)ldx; (void)p; (void)c; (void)ldc;
	return -1;
}
int dlmc_bf16_pack(int n, int k, const uint16_t *w, long ldw, uint32_t *out) {
	(void)n; (void)k; (void)w; (void)ldw; (void)out;
	return -1;
}
#endif
