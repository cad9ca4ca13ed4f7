// quant.c: ggml's quantized weights (Q8_0: a float16 scale d and 32 int8
// quants per block of 32 values, 34 bytes; Q4_0: d and 32 4-bit quants
// q ∈ [0, 16) standing for (q − 8)·d, 18 bytes; Q5_0: d, 32 fifth bits and
// 4-bit quants, (q − 16)·d, 22 bytes; Q4_1 and Q5_1, llama-quantize's
// fallbacks with a minimum m: q·d + m, 20 and 24 bytes, decoded only) in
// the products that keep them quantized (matmul.go, quant.go):
//
//   - decoded to float32 rows (exactly as ggml dequantizes them), for Embed,
//     ToHost and the product that keeps activations F32 (a panel of rows
//     decoded, then sgemm);
//   - multiplied as integers with activations quantized per row to Q8_0
//     blocks (float32 scales here), as llama.cpp's CPU backend multiplies
//     them (ggml_vec_dot_q8_0_q8_0, ggml_vec_dot_q4_0_q8_0): each block's
//     32 int8 products summed in int32 (AVX2: vpmaddubsw + vpmaddwd; the
//     VNNI paths: vpdpbusd), scaled by d_w·d_x into float32 accumulators.
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "half.h"
#include "kernels.h"
#include "simd.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

static inline float block_d(const uint8_t *b) { return half_at(b); }

// block_bytes is the size of one block of the weight type wt.
static inline long block_bytes(int wt) {
	switch (wt) {
	case DLMC_Q4_0: return 18;
	case DLMC_IQ4_NL: return 18;
	case DLMC_Q4_1: return 20;
	case DLMC_Q5_0: return 22;
	case DLMC_Q5_1: return 24;
	}
	return 34;
}

// block_min reports whether blocks of wt carry a minimum m (Q4_1, Q5_1):
// value q·d + m, q unsigned.
static inline int block_min(int wt) { return wt == DLMC_Q4_1 || wt == DLMC_Q5_1; }

// kq_min reports whether a super-block type's sub-blocks carry minima
// (Q4_K, Q5_K), which the products take off with the activations' sums;
// Q6_K, Q3_K and IQ4_XS have none. kq_scales16 reports whether its scales
// are per 16 values (Q6_K, Q3_K: two a block of 32) rather than per 32.
static inline int kq_min(int wt) { return wt == DLMC_Q4_K || wt == DLMC_Q5_K; }
static inline int kq_scales16(int wt) { return wt == DLMC_Q6_K || wt == DLMC_Q3_K; }

// qprefetch asks for the weight bytes the next pack reads (rows r0 … r1−1
// of w, bytes [lo, hi) of each) while the current pack is multiplied, per
// lines a call: the packs read 16 rows of w a group in short runs of
// each (34 bytes a block of Q8_0), which the hardware's prefetchers do
// not follow, so each pack waited on memory.
typedef struct {
	const uint8_t *row; // the next line's row, at byte lo
	long stride, lpr;   // lpr: lines a row
	long l, left, per;  // the next line in its row; lines left; lines a call
} qprefetch;

static inline void qprefetch_init(qprefetch *f, const uint8_t *w, long stride, int r0, int r1, long lo, long hi,
	long calls) {
	f->row = w, f->stride = stride, f->l = 0, f->lpr = 0, f->left = 0, f->per = 0;
	if (r1 <= r0 || hi <= lo) return;
	// A line more than the bytes span: lo need not be a line's start.
	f->row = w + r0 * stride + lo, f->lpr = (hi - lo + 63) / 64 + 1, f->left = f->lpr * (r1 - r0);
	f->per = calls > 0 ? (f->left + calls - 1) / calls : f->left;
}

static inline void qprefetch_step(qprefetch *f) {
	for (long i = 0; i < f->per && f->left > 0; i++, f->left--) {
		__builtin_prefetch(f->row + f->l * 64, 0, 2);
		if (++f->l == f->lpr) f->l = 0, f->row += f->stride;
	}
}

// qblock_offset is the byte offset in a row of w of block b (32 values).
static inline long qblock_offset(int wt, long b) {
	long kb = dlmc_kquant_block_bytes(wt);
	return kb ? b / 8 * kb : b * block_bytes(wt);
}

// qprefetch_next sets f to the bytes of the pack after the one of rows j0…
// and blocks b0… of w [n × nb blocks] (packs of rows rows and blocks
// blocks): the next blocks of these rows, else the first blocks of the
// next rows; calls steps take them all.
static inline void qprefetch_next(qprefetch *f, int wt, const uint8_t *w, long wstride, int n, long nb, int j0,
	long b0, int rows, long blocks, long calls) {
	long nb0 = b0 + blocks < nb ? b0 + blocks : 0, nb1 = nb0 + blocks < nb ? nb0 + blocks : nb;
	int nj0 = nb0 ? j0 : j0 + rows, nj1 = nj0 + rows < n ? nj0 + rows : n;
	qprefetch_init(f, w, wstride, nj0, nj1, qblock_offset(wt, nb0), qblock_offset(wt, nb1), calls);
}

// nibbles_q writes the 32 4-bit quants of the 16 bytes qs (low nibbles,
// then high ones) with their fifth bits from qh (bit t for value t; 0 for
// none) and off subtracted, as int8.
static inline void nibbles_q(int8_t *q, const uint8_t *qs, uint32_t qh, int off) {
	for (int t = 0; t < 16; t++) {
		q[t] = (int8_t)(((qs[t] & 0x0f) | ((qh >> t) & 1) << 4) - off);
		q[t + 16] = (int8_t)(((qs[t] >> 4) | ((qh >> (t + 16)) & 1) << 4) - off);
	}
}

const int8_t iq4_levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// block_quants writes the 32 quants of block b as int8: its values over
// d, or (block_min) less m.
static inline void block_quants(int wt, int8_t *q, const uint8_t *b) {
	uint32_t qh;
	switch (wt) {
	case DLMC_Q4_0: nibbles_q(q, b + 2, 0, 8); return;
	case DLMC_IQ4_NL:
		nibbles_q(q, b + 2, 0, 0);
		for (int t = 0; t < 32; t++) q[t] = iq4_levels[q[t]];
		return;
	case DLMC_Q4_1: nibbles_q(q, b + 4, 0, 0); return;
	case DLMC_Q5_0: memcpy(&qh, b + 2, 4); nibbles_q(q, b + 6, qh, 16); return;
	case DLMC_Q5_1: memcpy(&qh, b + 4, 4); nibbles_q(q, b + 8, qh, 0); return;
	}
	memcpy(q, b + 2, 32);
}

static void quant_rows_generic(int wt, float *dst, const uint8_t *src, long rows, long cols, long stride) {
	long bb = block_bytes(wt);
	int mins = block_min(wt);
	int8_t q[32];
	for (long i = 0; i < rows; i++, dst += cols, src += stride) {
		const uint8_t *b = src;
		for (long j = 0; j < cols; j += 32, b += bb) {
			float d = block_d(b), m = mins ? half_at(b + 2) : 0;
			block_quants(wt, q, b);
			// q·d is exact: fused or not, the sum with m rounds once.
			if (mins) for (int t = 0; t < 32; t++) dst[j + t] = (float)q[t] * d + m;
			else for (int t = 0; t < 32; t++) dst[j + t] = (float)q[t] * d;
		}
	}
}

// The forms of quantized activations: int8 q, int16 q (the AVX2
// product's), u8 q + 128 (the AVX512-VNNI product's unsigned operand).
enum { ACT_I8, ACT_I16, ACT_U8 };

static inline int act_form(int isa) { return isa == DLMC_ISA_AVX2 ? ACT_I16 : isa == DLMC_ISA_AVX512VNNI ? ACT_U8 : ACT_I8; }

// quantize_act_generic: per block of 32, d = max|x|/127 and q = x·(1/d)
// rounded to nearest, ties to even (as ggml's AVX2 quantize_row_q8_0);
// d = 0 for an all-zero block; stored in form.
// With sums set, sums[block] = d·Σq (the K-quants' minima need it).
static void quantize_act_generic(int form, void *qv, float *d, float *sums, const float *x, long rows, long cols,
	long ldx) {
	int8_t *q = qv;
	int16_t *q16 = qv;
	for (long i = 0; i < rows; i++, x += ldx) {
		for (long j = 0; j < cols; j += 32, q += 32, q16 += 32) {
			float amax = 0;
			for (int t = 0; t < 32; t++) amax = fmaxf(amax, fabsf(x[j + t]));
			float s = amax / 127.0f;
			float id = s != 0 ? 127.0f / amax : 0;
			*d++ = s;
			int32_t sum = 0;
			for (int t = 0; t < 32; t++) {
				// Clamped first, so that a NaN (which fmaxf drops) or
				// an infinite x converts to a defined value.
				int8_t v = (int8_t)nearbyintf(fminf(fmaxf(x[j + t] * id, -127.0f), 127.0f));
				sum += v;
				if (form == ACT_I16) q16[t] = v;
				else q[t] = form == ACT_U8 ? (int8_t)(v ^ 0x80) : v;
			}
			if (sums) *sums++ = s * (float)sum;
		}
	}
}

// qmatmul_kquant_generic is qmatmul_generic for a K-quant: per block of
// 32 values, the int32 sums of each 16 scaled by d·isc·d_x, less
// dmin·im·(d_x·Σx) (xs, dlmc_quantize_act's sums).
static void qmatmul_kquant_generic(int wt, int m, int n, int k, const int8_t *xq, const float *xd, const float *xs,
	const uint8_t *w, long wstride, float *c, long ldc) {
	long nb = k / 32, bb = dlmc_kquant_block_bytes(wt);
	int8_t q[256];
	int16_t isc[16], im[8];
	float dd[2];
	for (int j = 0; j < n; j++) {
		for (int i = 0; i < m; i++) c[(long)i * ldc + j] = 0;
		for (long sb = 0; sb < nb / 8; sb++) {
			dlmc_kq_block(0, wt, q, isc, im, 1, dd, w + j * wstride + sb * bb);
			for (int i = 0; i < m; i++) {
				const int8_t *xr = xq + (long)i * k + sb * 256;
				float acc = c[(long)i * ldc + j];
				for (int v = 0; v < 8; v++) {
					float dx = xd[i * nb + sb * 8 + v];
					for (int h = 0; h < 2; h++) {
						int32_t s = 0;
						for (int t = 16 * h; t < 16 * h + 16; t++) s += (int32_t)q[32 * v + t] * xr[32 * v + t];
						acc += (float)s * (dd[0] * (float)isc[2 * v + h] * dx);
					}
					if (im[v]) acc -= dd[1] * (float)im[v] * xs[i * nb + sb * 8 + v];
				}
				c[(long)i * ldc + j] = acc;
			}
		}
	}
}

static void qmatmul_generic(int wt, int m, int n, int k, const int8_t *xq, const float *xd, const uint8_t *w,
	long wstride, float *c, long ldc) {
	long nb = k / 32, bb = block_bytes(wt);
	int8_t q[32];
	for (int j = 0; j < n; j++) {
		const uint8_t *wr = w + j * wstride;
		for (int i = 0; i < m; i++) {
			const int8_t *xr = xq + (long)i * k;
			const float *dr = xd + i * nb;
			float acc = 0;
			for (long b = 0; b < nb; b++) {
				block_quants(wt, q, wr + b * bb);
				int32_t s = 0;
				for (int t = 0; t < 32; t++) s += (int32_t)q[t] * xr[b * 32 + t];
				acc += (float)s * (block_d(wr + b * bb) * dr[b]);
			}
			c[(long)i * ldc + j] = acc;
		}
	}
}

#if defined(__x86_64__)
#define TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))

TARGET_AVX2 static void quant_rows_avx2(int wt, float *dst, const uint8_t *src, long rows, long cols, long stride) {
	if (wt != DLMC_Q8_0) {
		quant_rows_generic(wt, dst, src, rows, cols, stride);
		return;
	}
	// 32 quants: sign-extend 8 at a time to int32, convert, scale.
	for (long i = 0; i < rows; i++, dst += cols, src += stride) {
		const uint8_t *b = src;
		for (long j = 0; j < cols; j += 32, b += 34) {
			__m256 d = _mm256_set1_ps(block_d(b));
			for (int t = 0; t < 32; t += 8) {
				__m256i q = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(b + 2 + t)));
				_mm256_storeu_ps(dst + j + t, _mm256_mul_ps(_mm256_cvtepi32_ps(q), d));
			}
		}
	}
}

TARGET_AVX2 static void quantize_act_avx2(int form, void *qv, float *d, float *sums, const float *x, long rows, long cols,
	long ldx) {
	const __m256 sign = _mm256_set1_ps(-0.0f);
	int8_t *q = qv;
	int16_t *q16 = qv;
	for (long i = 0; i < rows; i++, x += ldx) {
		for (long j = 0; j < cols; j += 32, q += 32, q16 += 32) {
			__m256 v[4];
			__m256 amax = _mm256_setzero_ps();
			for (int t = 0; t < 4; t++) {
				v[t] = _mm256_loadu_ps(x + j + 8 * t);
				amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v[t]));
			}
			__m128 h = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
			h = _mm_max_ps(h, _mm_movehl_ps(h, h));
			h = _mm_max_ss(h, _mm_movehdup_ps(h));
			float a = _mm_cvtss_f32(h), s = a / 127.0f;
			*d++ = s;
			__m256 id = _mm256_set1_ps(a != 0 ? 127.0f / a : 0);
			__m256i r[4];
			for (int t = 0; t < 4; t++)
				r[t] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v[t], id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
			// int32 → int16 → int8 packs interleave 128-bit lanes; the
			// permutes put the values back in order.
			__m256i h0 = _mm256_packs_epi32(r[0], r[1]), h1 = _mm256_packs_epi32(r[2], r[3]);
			if (sums) {
				// Σq of the rounded values (within ±127, so the int16
				// sums of pairs are exact).
				__m256i t = _mm256_madd_epi16(_mm256_add_epi16(h0, h1), _mm256_set1_epi16(1));
				__m128i u = _mm_add_epi32(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
				u = _mm_add_epi32(u, _mm_shuffle_epi32(u, 0x4e));
				u = _mm_add_epi32(u, _mm_shuffle_epi32(u, 0xb1));
				*sums++ = s * (float)_mm_cvtsi128_si32(u);
			}
			if (form == ACT_I16) {
				_mm256_storeu_si256((__m256i *)q16, _mm256_permute4x64_epi64(h0, 0xd8));
				_mm256_storeu_si256((__m256i *)(q16 + 16), _mm256_permute4x64_epi64(h1, 0xd8));
				continue;
			}
			__m256i p = _mm256_packs_epi16(h0, h1);
			p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
			if (form == ACT_U8) p = _mm256_xor_si256(p, _mm256_set1_epi8((char)0x80));
			_mm256_storeu_si256((__m256i *)q, p);
		}
	}
}

// load_w returns block b's 32 quants as int8 (Q4_0: q − 8; Q5_0: q − 16;
// IQ4_NL: its levels, by vpshufb)
// and sets *d.
TARGET_AVX2 static inline __m256i load_w(int wt, const uint8_t *b, float *d) {
	*d = _cvtsh_ss((unsigned short)(b[0] | b[1] << 8));
	if (wt == DLMC_Q4_0 || wt == DLMC_Q5_0 || wt == DLMC_IQ4_NL) {
		const uint8_t *qs = b + (wt == DLMC_Q5_0 ? 6 : 2);
		__m128i t = _mm_loadu_si128((const __m128i *)qs);
		__m256i q = _mm256_insertf128_si256(_mm256_castsi128_si256(t), _mm_srli_epi16(t, 4), 1);
		q = _mm256_and_si256(q, _mm256_set1_epi8(0x0f));
		if (wt == DLMC_Q4_0) return _mm256_sub_epi8(q, _mm256_set1_epi8(8));
		if (wt == DLMC_IQ4_NL)
			return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)iq4_levels)), q);
		// Value t's fifth bit, bit t of qh: byte t takes qh's byte t/8,
		// keeps bit t%8 and becomes 0x10 where it is set.
		uint32_t qh;
		memcpy(&qh, b + 2, 4);
		__m256i by = _mm256_shuffle_epi8(_mm256_set1_epi32((int)qh),
			_mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303));
		const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
		__m256i hi = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(by, bit), bit), _mm256_set1_epi8(0x10));
		return _mm256_sub_epi8(_mm256_or_si256(q, hi), _mm256_set1_epi8(16));
	}
	return _mm256_loadu_si256((const __m256i *)(b + 2));
}

// dot32 is the 8 int32 partial sums of the 32 products w·x: |w| (unsigned)
// times x with w's sign (signed), so that vpmaddubsw's int16 pair sums stay
// within ±2·128·127 and never saturate.
TARGET_AVX2 static inline __m256i dot32_avx2(__m256i aw, __m256i w, __m256i x) {
	__m256i p = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(x, w));
	return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}

TARGET_AVX2 static inline float hsum8(__m256 v) {
	__m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
	h = _mm_add_ps(h, _mm_movehl_ps(h, h));
	h = _mm_add_ss(h, _mm_movehdup_ps(h));
	return _mm_cvtss_f32(h);
}

// QTILE defines tile_<isa>: c[MR × NR] for MR rows of x and NR rows of w
// of type WT (all three compile-time constants where it is inlined), in
// MR·NR float32 accumulators of 8 lanes; DOT is the int32 block product.
// Each block's scale d_x·d_w is a scalar product broadcast, so that the
// 4 × 2 tile's accumulators, weights and |weights| fit the 16 registers.
#define QTILE(name, target, DOT)                                                                                \
	target static inline __attribute__((always_inline)) void name(const int WT, const int MR, const int NR,      \
		long nb, const int8_t *xq, long k, const float *xd, const uint8_t *w, long wstride, float *c, long ldc) { \
		__m256 acc[4][2];                                                                                   \
		_Pragma("GCC unroll 4") for (int i = 0; i < MR; i++) _Pragma("GCC unroll 2") for (int j = 0; j < NR; j++) \
			acc[i][j] = _mm256_setzero_ps();                                                                  \
		const long bb = block_bytes(WT);                                                                    \
		for (long b = 0; b < nb; b++) {                                                                     \
			__m256i wv[2], aw[2];                                                                           \
			float dw[2];                                                                                    \
			_Pragma("GCC unroll 2") for (int j = 0; j < NR; j++) {                                          \
				wv[j] = load_w(WT, w + j * wstride + b * bb, &dw[j]);                                       \
				aw[j] = _mm256_sign_epi8(wv[j], wv[j]);                                                     \
			}                                                                                               \
			_Pragma("GCC unroll 4") for (int i = 0; i < MR; i++) {                                          \
				__m256i xv = _mm256_loadu_si256((const __m256i *)(xq + i * k + b * 32));                     \
				float dx = xd[i * nb + b];                                                                  \
				_Pragma("GCC unroll 2") for (int j = 0; j < NR; j++) {                                      \
					__m256 p = _mm256_cvtepi32_ps(DOT(aw[j], wv[j], xv));                                   \
					acc[i][j] = _mm256_fmadd_ps(p, _mm256_set1_ps(dx * dw[j]), acc[i][j]);                  \
				}                                                                                           \
			}                                                                                               \
		}                                                                                                   \
		_Pragma("GCC unroll 4") for (int i = 0; i < MR; i++) _Pragma("GCC unroll 2") for (int j = 0; j < NR; j++) \
			c[i * ldc + j] = hsum8(acc[i][j]);                                                              \
	}

// QROWS runs MR rows of x from row i against the rows j0..j1 of w, two
// rows of w at a time, then a last one.
#define QROWS(tile, WT, MR)                                                                             \
	const int8_t *x = xq + (long)i * k;                                                                 \
	const float *d = xd + (long)i * nb;                                                                 \
	int j = j0;                                                                                         \
	for (; j + 2 <= j1; j += 2) tile(WT, MR, 2, nb, x, k, d, w + j * wstride, wstride, c + i * ldc + j, ldc); \
	if (j < j1) tile(WT, MR, 1, nb, x, k, d, w + j * wstride, wstride, c + i * ldc + j, ldc);

// QMATMUL defines qmatmul_<isa> from its tile: the rows of w in blocks
// that stay in L1 (QBLOCK_BYTES), each against every row of x, 4 rows of x
// by 2 of w at a time; one copy of the loops per weight type.
#define QBLOCK_BYTES 16384
#define QLOOPS(tile, WT)                                                                                \
	for (int j0 = 0; j0 < n; j0 += jb) {                                                                \
		int j1 = j0 + jb < n ? j0 + jb : n;                                                             \
		int i = 0;                                                                                      \
		for (; i + 4 <= m; i += 4) {                                                                    \
			QROWS(tile, WT, 4)                                                                          \
		}                                                                                               \
		for (; i < m; i++) {                                                                            \
			QROWS(tile, WT, 1)                                                                          \
		}                                                                                               \
	}
#define QMATMUL(name, target, tile)                                                                         \
	target static void name(int wt, int m, int n, int k, const int8_t *xq, const float *xd, const uint8_t *w, \
		long wstride, float *c, long ldc) {                                                                 \
		long nb = k / 32;                                                                                   \
		int jb = (int)(QBLOCK_BYTES / wstride) & ~1;                                                        \
		if (jb < 2) jb = 2;                                                                                 \
		if (wt == DLMC_Q4_0) {                                                                              \
			QLOOPS(tile, DLMC_Q4_0)                                                                         \
		} else if (wt == DLMC_Q5_0) {                                                                       \
			QLOOPS(tile, DLMC_Q5_0)                                                                         \
		} else if (wt == DLMC_IQ4_NL) {                                                                     \
			QLOOPS(tile, DLMC_IQ4_NL)                                                                       \
		} else {                                                                                            \
			QLOOPS(tile, DLMC_Q8_0)                                                                         \
		}                                                                                                   \
	}

// The AVX2 product: vpmaddwd on int16, on weights repacked 8 rows at a
// time so that each int32 lane is one row's (one output's) sum. Per block
// of 32 values and group of 8 rows of w, the pack holds the 8 float32
// scales and 16 vectors of 16 int16: vector t is, for each row r, its
// values 2t and 2t+1. A row of x (int16, dlmc_quantize_act's wide form)
// multiplies a vector by broadcasting its values 2t, 2t+1 to every lane
// (vpbroadcastd): one vpmaddwd and one vpaddd per 16 products, exact, and
// one conversion and FMA per block and 8 outputs; no horizontal sums. A
// group's pack covers QPACK_BLOCKS blocks (16 KB of int16), made on the fly
// from the weight's own blocks: nothing is kept.
#define QPACK_BLOCKS 32

// tr8x8 stores 8 rows of 8 int32 (r[i]) as 8 vectors of the pack:
// vb[8·t + i] = r[i][t] (unpacks within 128-bit lanes, then the lanes
// exchanged).
TARGET_AVX2 static inline void tr8x8(const __m256i *r, uint32_t *vb) {
	__m256i t[8], u[8];
	for (int k = 0; k < 8; k += 2) {
		t[k] = _mm256_unpacklo_epi32(r[k], r[k + 1]);
		t[k + 1] = _mm256_unpackhi_epi32(r[k], r[k + 1]);
	}
	// t[2m]: rows 2m, 2m+1 at columns 0, 1 (4, 5 in lane 1); t[2m+1]: 2, 3 (6, 7).
	for (int k = 0; k < 8; k += 4) {
		for (int j = 0; j < 2; j++) {
			u[k + 2 * j] = _mm256_unpacklo_epi64(t[k + j], t[k + j + 2]);
			u[k + 2 * j + 1] = _mm256_unpackhi_epi64(t[k + j], t[k + j + 2]);
		}
	}
	// u[4h + c]: rows 4h … 4h+3 at column c (c + 4 in lane 1).
	for (int c = 0; c < 4; c++) {
		_mm256_store_si256((__m256i *)(vb + 8 * c), _mm256_permute2x128_si256(u[c], u[4 + c], 0x20));
		_mm256_store_si256((__m256i *)(vb + 8 * (c + 4)), _mm256_permute2x128_si256(u[c], u[4 + c], 0x31));
	}
}

// pack8_block writes one block of the pack from its 8 rows' 32 int16
// each (lo[r]: values 0 … 15, hi[r]: 16 … 31, as pairs of int16 in int32
// lanes).
TARGET_AVX2 static inline void pack8_block(const __m256i *lo, const __m256i *hi, int16_t *v) {
	tr8x8(lo, (uint32_t *)v);
	tr8x8(hi, (uint32_t *)v + 64);
}

TARGET_AVX2 static void pack8(int wt, int rows, long b0, long nb, const uint8_t *w, long wstride, int16_t *v,
	float *sc) {
	long bb = block_bytes(wt);
	for (long b = 0; b < nb; b++) {
		__m256i lo[8], hi[8];
		for (int r = 0; r < 8; r++) {
			if (r >= rows) {
				sc[b * 8 + r] = 0;
				lo[r] = hi[r] = _mm256_setzero_si256();
				continue;
			}
			__m256i q8 = load_w(wt, w + r * wstride + (b0 + b) * bb, &sc[b * 8 + r]);
			lo[r] = _mm256_cvtepi8_epi16(_mm256_castsi256_si128(q8));
			hi[r] = _mm256_cvtepi8_epi16(_mm256_extracti128_si256(q8, 1));
		}
		pack8_block(lo, hi, v + b * 256);
	}
}

// pack8k is pack8 for a K-quant (b0 and nb whole super-blocks of 8
// blocks): each int16 is q·isc, at most 32·128 in magnitude (vpmaddwd's
// pair sums of 127·4096 stay far inside int32), the block's scale d and,
// for Q4_K and Q5_K, its minimum dmin·im in mn (per block and row, as sc).
TARGET_AVX2 static void pack8k(int wt, int rows, long b0, long nb, const uint8_t *w, long wstride, int16_t *v,
	float *sc, float *mn) {
	long bb = dlmc_kquant_block_bytes(wt);
	_Alignas(32) int8_t q[8][256];
	_Alignas(32) int16_t isc[16][8], im[8][8]; // [sub-block][row]
	_Alignas(32) float d0[8], d1[8];
	float dd[2];
	for (long sb = 0; sb < nb / 8; sb++) {
		for (int r = 0; r < 8; r++) {
			if (r < rows) {
				dlmc_kq_block(1, wt, q[r], &isc[0][r], &im[0][r], 8, dd, w + r * wstride + (b0 / 8 + sb) * bb);
			} else {
				// Zero quants, scales and minima: the row's sums are 0.
				memset(q[r], 0, sizeof q[r]);
				for (int k = 0; k < 16; k++) isc[k][r] = 0;
				for (int k = 0; k < 8; k++) im[k][r] = 0;
				dd[0] = dd[1] = 0;
			}
			d0[r] = dd[0];
			d1[r] = dd[1];
		}
		__m256 D0 = _mm256_load_ps(d0), D1 = _mm256_load_ps(d1);
		for (int u = 0; u < 8; u++) {
			long b = sb * 8 + u;
			__m256i lo[8], hi[8];
			for (int r = 0; r < 8; r++) {
				lo[r] = _mm256_mullo_epi16(_mm256_cvtepi8_epi16(_mm_load_si128((const __m128i *)(q[r] + 32 * u))),
					_mm256_set1_epi16(isc[2 * u][r]));
				hi[r] = _mm256_mullo_epi16(_mm256_cvtepi8_epi16(_mm_load_si128((const __m128i *)(q[r] + 32 * u + 16))),
					_mm256_set1_epi16(isc[2 * u + 1][r]));
			}
			pack8_block(lo, hi, v + b * 256);
			_mm256_store_ps(sc + b * 8, D0);
			__m256 M = _mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(_mm_load_si128((const __m128i *)im[u])));
			_mm256_store_ps(mn + b * 8, _mm256_mul_ps(D1, M));
		}
	}
}

// mm8 adds to (first: stores in) c[MR × 8] the products of MR rows of x
// (int16, row stride k, scales xd row stride nb; blocks [0, nb_) of the
// pack) with the packed group; cols of the 8 are written. With MIN (Q4_K,
// Q5_K), each block also takes off its minima mn times x's sums xs
// (row stride nb).
TARGET_AVX2 static inline __attribute__((always_inline)) void mm8(const int MR, const int MIN, long nb_, const int16_t *x,
	long k, const float *xd, const float *xs, long nb, const int16_t *v, const float *sc, const float *mn, float *c,
	long ldc, int first, int cols) {
	__m256 fa[4];
	_Pragma("GCC unroll 4") for (int i = 0; i < MR; i++) fa[i] = _mm256_setzero_ps();
	for (long b = 0; b < nb_; b++) {
		__m256i acc[4];
		_Pragma("GCC unroll 4") for (int i = 0; i < MR; i++) acc[i] = _mm256_setzero_si256();
		const __m256i *vb = (const __m256i *)(v + b * 256);
		_Pragma("GCC unroll 2") for (int t = 0; t < 16; t++) {
			__m256i V = _mm256_load_si256(vb + t);
			_Pragma("GCC unroll 4") for (int i = 0; i < MR; i++) {
				int32_t pair;
				memcpy(&pair, x + i * k + b * 32 + 2 * t, 4);
				acc[i] = _mm256_add_epi32(acc[i], _mm256_madd_epi16(V, _mm256_set1_epi32(pair)));
			}
		}
		__m256 S = _mm256_load_ps(sc + b * 8);
		_Pragma("GCC unroll 4") for (int i = 0; i < MR; i++)
			fa[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[i]), _mm256_mul_ps(S, _mm256_set1_ps(xd[i * nb + b])), fa[i]);
		if (MIN) {
			__m256 M = _mm256_load_ps(mn + b * 8);
			_Pragma("GCC unroll 4") for (int i = 0; i < MR; i++)
				fa[i] = _mm256_fnmadd_ps(M, _mm256_set1_ps(xs[i * nb + b]), fa[i]);
		}
	}
	_Pragma("GCC unroll 4") for (int i = 0; i < MR; i++) {
		float *o = c + i * ldc;
		if (cols == 8) {
			if (!first) fa[i] = _mm256_add_ps(fa[i], _mm256_loadu_ps(o));
			_mm256_storeu_ps(o, fa[i]);
		} else {
			float t[8];
			_mm256_storeu_ps(t, fa[i]);
			for (int j = 0; j < cols; j++) o[j] = first ? t[j] : o[j] + t[j];
		}
	}
}

// mm8x2 is mm8 on two adjacent packed groups (v, sc: the first; the
// second follows it), c[MR × 16]: each broadcast pair of x feeds two
// vpmaddwd. The float32 sums wait in fa (one load, FMA and store per row and group each
// block of 256 products) to leave the registers to the 8 int32
// accumulators; they are the same operations in the same order as mm8's,
// so a row's result does not depend on the rows beside it.
TARGET_AVX2 static inline __attribute__((always_inline)) void mm8x2(const int MR, const int MIN, long nb_,
	const int16_t *x, long k, const float *xd, const float *xs, long nb, const int16_t *v, const float *sc,
	const float *mn, float *c, long ldc, int first) {
	const int16_t *v1 = v + QPACK_BLOCKS * 256;
	const float *sc1 = sc + QPACK_BLOCKS * 8, *mn1 = mn + QPACK_BLOCKS * 8;
	_Alignas(32) float fa[4][16] = {{0}};
	for (long b = 0; b < nb_; b++) {
		__m256i a0[4], a1[4];
		_Pragma("GCC unroll 4") for (int i = 0; i < MR; i++) a0[i] = a1[i] = _mm256_setzero_si256();
		const __m256i *p0 = (const __m256i *)(v + b * 256), *p1 = (const __m256i *)(v1 + b * 256);
		_Pragma("GCC unroll 4") for (int t = 0; t < 16; t++) {
			__m256i V0 = _mm256_load_si256(p0 + t), V1 = _mm256_load_si256(p1 + t);
			_Pragma("GCC unroll 4") for (int i = 0; i < MR; i++) {
				int32_t pair;
				memcpy(&pair, x + i * k + b * 32 + 2 * t, 4);
				__m256i B = _mm256_set1_epi32(pair);
				a0[i] = _mm256_add_epi32(a0[i], _mm256_madd_epi16(V0, B));
				a1[i] = _mm256_add_epi32(a1[i], _mm256_madd_epi16(V1, B));
			}
		}
		__m256 S0 = _mm256_load_ps(sc + b * 8), S1 = _mm256_load_ps(sc1 + b * 8);
		_Pragma("GCC unroll 4") for (int i = 0; i < MR; i++) {
			__m256 dx = _mm256_set1_ps(xd[i * nb + b]);
			_mm256_store_ps(fa[i], _mm256_fmadd_ps(_mm256_cvtepi32_ps(a0[i]), _mm256_mul_ps(S0, dx), _mm256_load_ps(fa[i])));
			_mm256_store_ps(fa[i] + 8,
				_mm256_fmadd_ps(_mm256_cvtepi32_ps(a1[i]), _mm256_mul_ps(S1, dx), _mm256_load_ps(fa[i] + 8)));
		}
		if (MIN) {
			__m256 M0 = _mm256_load_ps(mn + b * 8), M1 = _mm256_load_ps(mn1 + b * 8);
			_Pragma("GCC unroll 4") for (int i = 0; i < MR; i++) {
				__m256 sx = _mm256_set1_ps(xs[i * nb + b]);
				_mm256_store_ps(fa[i], _mm256_fnmadd_ps(M0, sx, _mm256_load_ps(fa[i])));
				_mm256_store_ps(fa[i] + 8, _mm256_fnmadd_ps(M1, sx, _mm256_load_ps(fa[i] + 8)));
			}
		}
	}
	_Pragma("GCC unroll 4") for (int i = 0; i < MR; i++) {
		float *o = c + i * ldc;
		__m256 f0 = _mm256_load_ps(fa[i]), f1 = _mm256_load_ps(fa[i] + 8);
		if (!first) {
			f0 = _mm256_add_ps(f0, _mm256_loadu_ps(o));
			f1 = _mm256_add_ps(f1, _mm256_loadu_ps(o + 8));
		}
		_mm256_storeu_ps(o, f0);
		_mm256_storeu_ps(o + 8, f1);
	}
}

// qmatmul_avx2 packs QPACK_GROUPS groups of 8 rows of w (QPACK_BLOCKS
// blocks each: 128 KB, in L2) at a time and runs every 3 rows of x (6 KB
// per 1,024 values, in L1) against the whole pack, two groups at a time
// (mm8x2: 6 int32 accumulators, 5 loads per 6 vpmaddwd, where 4 rows by
// one group loaded 5 per 4; 4 by 2 spills an accumulator to the stack),
// so that x streams from memory once per 64 rows of w rather than once
// per 8.
#define QPACK_GROUPS 8
TARGET_AVX2 static inline __attribute__((always_inline)) void qmm_avx2(const int MIN, int wt, int m, int n, int k,
	const int16_t *xq, const float *xd, const float *xs, const uint8_t *w, long wstride, float *c, long ldc,
	uint8_t *pack) {
	int16_t(*v)[QPACK_BLOCKS * 256] = (int16_t(*)[QPACK_BLOCKS * 256])pack;
	float(*sc)[QPACK_BLOCKS * 8] = (float(*)[QPACK_BLOCKS * 8])(pack + sizeof(int16_t) * QPACK_GROUPS * QPACK_BLOCKS * 256);
	float(*mn)[QPACK_BLOCKS * 8] = sc + QPACK_GROUPS;
	int kq = dlmc_kquant_block_bytes(wt) != 0;
	long nb = k / 32;
	for (int j0 = 0; j0 < n; j0 += 8 * QPACK_GROUPS) {
		int ng = (n - j0 + 7) / 8 < QPACK_GROUPS ? (n - j0 + 7) / 8 : QPACK_GROUPS;
		for (long b0 = 0; b0 < nb; b0 += QPACK_BLOCKS) {
			long nb_ = nb - b0 < QPACK_BLOCKS ? nb - b0 : QPACK_BLOCKS;
			for (int g = 0; g < ng; g++) {
				int j = j0 + 8 * g, cols = n - j < 8 ? n - j : 8;
				if (kq) pack8k(wt, cols, b0, nb_, w + j * wstride, wstride, v[g], sc[g], mn[g]);
				else pack8(wt, cols, b0, nb_, w + j * wstride, wstride, v[g], sc[g]);
			}
			qprefetch pf;
			qprefetch_next(&pf, wt, w, wstride, n, nb, j0, b0, 8 * QPACK_GROUPS, QPACK_BLOCKS, m / 3 + m % 3);
			int i = 0;
			for (; i + 3 <= m; i += 3) {
				qprefetch_step(&pf);
				const int16_t *xi = xq + (long)i * k + b0 * 32;
				const float *di = xd + i * nb + b0, *si = xs ? xs + i * nb + b0 : 0;
				int g = 0;
				for (; g + 2 <= ng && n - (j0 + 8 * g) >= 16; g += 2)
					mm8x2(3, MIN, nb_, xi, k, di, si, nb, v[g], sc[g], mn[g], c + (long)i * ldc + j0 + 8 * g, ldc, b0 == 0);
				for (; g < ng; g++) {
					int j = j0 + 8 * g, cols = n - j < 8 ? n - j : 8;
					mm8(3, MIN, nb_, xi, k, di, si, nb, v[g], sc[g], mn[g], c + (long)i * ldc + j, ldc, b0 == 0, cols);
				}
			}
			for (; i < m; i++) {
				qprefetch_step(&pf);
				const int16_t *xi = xq + (long)i * k + b0 * 32;
				const float *di = xd + i * nb + b0, *si = xs ? xs + i * nb + b0 : 0;
				for (int g = 0; g < ng; g++) {
					int j = j0 + 8 * g, cols = n - j < 8 ? n - j : 8;
					mm8(1, MIN, nb_, xi, k, di, si, nb, v[g], sc[g], mn[g], c + (long)i * ldc + j, ldc, b0 == 0, cols);
				}
			}
		}
	}
}

// qmatmul_avx2 packs QPACK_GROUPS groups of 8 rows of w (QPACK_BLOCKS
// blocks each: 128 KB, in L2) at a time and runs every 3 rows of x (6 KB
// per 1,024 values, in L1) against the whole pack, two groups at a time
// (mm8x2: 6 int32 accumulators, 5 loads per 6 vpmaddwd, where 4 rows by
// one group loaded 5 per 4; 4 by 2 spills an accumulator to the stack),
// so that x streams from memory once per 64 rows of w rather than once
// per 8. A K-quant's packs come from pack8k (Q6_K's and Q3_K's sub-scales folded into
// the int16 weights; Q4_K's and Q5_K's minima taken off per block).
TARGET_AVX2 static void qmatmul_avx2(int wt, int m, int n, int k, const int16_t *xq, const float *xd, const float *xs,
	const uint8_t *w, long wstride, float *c, long ldc, uint8_t *pack) {
	if (kq_min(wt)) qmm_avx2(1, wt, m, n, k, xq, xd, xs, w, wstride, c, ldc, pack);
	else qmm_avx2(0, wt, m, n, k, xq, xd, xs, w, wstride, c, ldc, pack);
}

// The VNNI paths: vpdpbusd sums the four u8·s8 products of each int32 lane
// in one instruction (exactly, no int16 step), in place of vpmaddubsw +
// vpmaddwd. AVX-VNNI is its VEX form on ymm registers (Alder Lake), in the
// 4 × 2 tile of dot products; AVX512-VNNI its EVEX form, on zmm registers
// over a pack of the weights (Ice Lake, Zen 4, Zen 5).
#define TARGET_AVXVNNI __attribute__((target("avx2,fma,f16c,avxvnni")))
#define TARGET_AVX512VNNI __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512vnni")))

TARGET_AVXVNNI static inline __m256i dot32_avxvnni(__m256i aw, __m256i w, __m256i x) {
	return _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), aw, _mm256_sign_epi8(x, w));
}
QTILE(tile_avxvnni, TARGET_AVXVNNI, dot32_avxvnni)
QMATMUL(qmatmul_avxvnni, TARGET_AVXVNNI, tile_avxvnni)

// The AVX512-VNNI product: vpdpbusd on zmm registers, on weights repacked
// 16 rows at a time so that each int32 lane is one row's (one output's)
// sum, as the AVX2 product's pack8 but four values a lane. Activations
// come as u8, x + 128 (dlmc_quantize_act's offset form), so that
// vpdpbusd's unsigned operand is x and its signed one the weight as
// stored (Q4_0: q − 8); the offset's 128·Σw is taken off by starting each
// block's int32 sums at −128·Σw, which the pack holds beside the block's
// scales. Per block of 32 values and group of 16 rows the pack holds 8
// vectors of 16 int32 (vector t: each row's values 4t … 4t+3), 16 scales
// and 16 offsets; a row of x multiplies a vector by broadcasting its four
// values 4t … 4t+3 (vpbroadcastd): 64 exact products an instruction, one
// conversion and FMA per block and 16 outputs, no horizontal sums. A
// group's pack covers ZPACK_BLOCKS blocks, made on the fly from the
// weight's own blocks: nothing is kept — except for a Q8_0 weight laid out
// at load (dlmc_q8_layout: the vectors, and the scales as the blocks'
// F16 bits, the same bytes as its blocks), whose product (qmm_laid) makes
// only the offsets and F32 scales per call.
#define ZPACK_BLOCKS 32
#define ZPACK_GROUPS 4
#define ZPACK_INTS (ZPACK_BLOCKS * 128)

// tr16x8 stores 16 rows of 8 int32 (r[i]) as pack16's vectors:
// vb[16·t + i] = r[i][t]. Rows i and i+8 share a zmm; the 8 × 8
// transposes of its two halves run side by side (unpacks within 128-bit
// lanes, then 64-bit pairs picked across them).
TARGET_AVX512VNNI static inline void tr16x8(const __m256i *r, int32_t *vb) {
	__m512i a[8], b[8];
	for (int k = 0; k < 8; k++) a[k] = _mm512_inserti64x4(_mm512_castsi256_si512(r[k]), r[k + 8], 1);
	for (int k = 0; k < 8; k += 2) {
		b[k] = _mm512_unpacklo_epi32(a[k], a[k + 1]);
		b[k + 1] = _mm512_unpackhi_epi32(a[k], a[k + 1]);
	}
	// b[2m] holds rows 2m, 2m+1 at columns 0,1 (lane 0) and 4,5 (lane 1);
	// b[2m+1] columns 2,3 and 6,7.
	for (int k = 0; k < 8; k += 4) {
		for (int j = 0; j < 2; j++) {
			a[k + 2 * j] = _mm512_unpacklo_epi64(b[k + j], b[k + j + 2]);
			a[k + 2 * j + 1] = _mm512_unpackhi_epi64(b[k + j], b[k + j + 2]);
		}
	}
	// a[4h + c] (c = 0…3: columns 0, 1, 2, 3 in lane 0 and 4 … 7 in lane 1) holds
	// rows 4h … 4h+3 (4h+8 … in the upper half).
	const __m512i lo = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13), hi = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
	for (int c = 0; c < 4; c++) {
		_mm512_store_si512(vb + 16 * c, _mm512_permutex2var_epi64(a[c], lo, a[4 + c]));
		_mm512_store_si512(vb + 16 * (c + 4), _mm512_permutex2var_epi64(a[c], hi, a[4 + c]));
	}
}

// pack_offsets is −128·Σq over vectors t0 … t1−1 of a block's pack (vb),
// for each of its 16 rows: each row's bytes times 1, four to a lane.
TARGET_AVX512VNNI static inline __m512i pack_offsets(const int32_t *vb, int t0, int t1) {
	__m512i s = _mm512_setzero_si512();
	for (int t = t0; t < t1; t++) s = _mm512_dpbusd_epi32(s, _mm512_set1_epi8(1), _mm512_load_si512(vb + 16 * t));
	return _mm512_mullo_epi32(s, _mm512_set1_epi32(-128));
}

TARGET_AVX512VNNI static void pack16(int wt, int rows, long b0, long nb, const uint8_t *w, long wstride, int32_t *v,
	float *sc, int32_t *off) {
	long bb = block_bytes(wt);
	for (long b = 0; b < nb; b++) {
		int32_t *vb = v + b * 128;
		__m256i rv[16];
		for (int r = 0; r < 16; r++) {
			if (r >= rows) {
				rv[r] = _mm256_setzero_si256();
				sc[b * 16 + r] = 0;
				continue;
			}
			rv[r] = load_w(wt, w + r * wstride + (b0 + b) * bb, &sc[b * 16 + r]);
		}
		tr16x8(rv, vb);
		_mm512_store_si512(off + b * 16, pack_offsets(vb, 0, 8));
	}
}

// pack16k is pack16 for a K-quant (b0 and nb whole super-blocks of 8
// blocks), H scales and offsets per block and row (Q6_K, Q3_K: 2, one per
// sub-block of 16 values; Q4_K, Q5_K: 1), each scale d·isc; for Q4_K and
// Q5_K the block's minimum dmin·im in mn (per block and row). The quants
// (Q4_K, Q5_K: q ∈ [0, 32); Q6_K: q − 32; Q3_K: q ∈ [−4, 4); IQ4_XS: its
// levels) are vpdpbusd's signed operand
// as they are. The 16 rows of a super-block are decoded first, then each
// block transposed into the pack (tr16x8) and its scales, offsets and
// minima made 16 rows at a time.
TARGET_AVX512VNNI static void pack16k(int wt, int rows, long b0, long nb, const uint8_t *w, long wstride, int32_t *v,
	float *sc, int32_t *off, float *mn) {
	long bb = dlmc_kquant_block_bytes(wt);
	const int H = kq_scales16(wt) ? 2 : 1;
	_Alignas(64) int8_t q[16][256];
	_Alignas(64) int16_t isc[16][16], im[8][16]; // [sub-block][row]
	float dd[16][2];
	_Alignas(64) float d0[16], d1[16];
	for (long sb = 0; sb < nb / 8; sb++) {
		for (int r = 0; r < 16; r++) {
			if (r < rows) {
				dlmc_kq_block(1, wt, q[r], &isc[0][r], &im[0][r], 16, dd[r], w + r * wstride + (b0 / 8 + sb) * bb);
			} else {
				// Zero quants, scales and minima: the row's sums are 0.
				memset(q[r], 0, sizeof q[r]);
				for (int k = 0; k < 16; k++) isc[k][r] = 0;
				for (int k = 0; k < 8; k++) im[k][r] = 0;
				dd[r][0] = dd[r][1] = 0;
			}
			d0[r] = dd[r][0];
			d1[r] = dd[r][1];
		}
		__m512 D0 = _mm512_load_ps(d0), D1 = _mm512_load_ps(d1);
		for (int u = 0; u < 8; u++) {
			long b = sb * 8 + u;
			int32_t *vb = v + b * 128;
			__m256i rv[16];
			for (int r = 0; r < 16; r++) rv[r] = _mm256_load_si256((const __m256i *)(q[r] + 32 * u));
			tr16x8(rv, vb);
			// Each row's offsets and scales for each of the H parts.
			for (int h = 0; h < H; h++) {
				_mm512_store_si512(off + b * 16 * H + 16 * h, pack_offsets(vb, 8 / H * h, 8 / H * (h + 1)));
				__m512 S = _mm512_mul_ps(D0, _mm512_cvtepi32_ps(_mm512_cvtepi16_epi32(_mm256_load_si256((const __m256i *)isc[2 * u + h]))));
				_mm512_store_ps(sc + b * 16 * H + 16 * h, S);
			}
			__m512 M = _mm512_cvtepi32_ps(_mm512_cvtepi16_epi32(_mm256_load_si256((const __m256i *)im[u])));
			_mm512_store_ps(mn + b * 16, H == 2 ? _mm512_setzero_ps() : _mm512_mul_ps(D1, M));
		}
	}
}

// mm16 adds to (first: stores in) c[MR × 16·NV] the products of MR rows of
// x (u8, row stride k; scales xd, row stride nb; blocks [0, nb_) of the
// packs) with NV packed groups (pack g at v + g·vgs, its H scales
// and offsets a block at g·ZPACK_BLOCKS·16·H, its minima at
// g·ZPACK_BLOCKS·16); cols[g] of group g's 16 are written. H is the
// scales per block (2: each 16 values' int32 sums scaled apart, Q6_K and Q3_K);
// with MIN (Q4_K, Q5_K) each block also takes off its minima times x's
// sums xs (row stride nb). For H 1 without MIN (Q8_0, Q4_0), one int32
// sum and one FMA per block and 16 outputs.
TARGET_AVX512VNNI static inline __attribute__((always_inline)) void mm16(const int MR, const int NV, const int H,
	const int MIN, long nb_, const uint8_t *x, long k, const float *xd, const float *xs, long nb, const int32_t *v,
	long vgs, const float *sc, const int32_t *off, const float *mn, float *c, long ldc, int first, const int *cols) {
	__m512 fa[4][2];
	_Pragma("GCC unroll 4") for (int i = 0; i < MR; i++) _Pragma("GCC unroll 2") for (int g = 0; g < NV; g++)
		fa[i][g] = _mm512_setzero_ps();
	for (long b = 0; b < nb_; b++) {
		const int32_t *vb = v + b * 128;
		_Pragma("GCC unroll 2") for (int h = 0; h < H; h++) {
			__m512i acc[4][2];
			_Pragma("GCC unroll 2") for (int g = 0; g < NV; g++) {
				__m512i o = _mm512_load_si512(off + (g * ZPACK_BLOCKS + b) * 16 * H + 16 * h);
				_Pragma("GCC unroll 4") for (int i = 0; i < MR; i++) acc[i][g] = o;
			}
			// No division by H: UBSan's check on it kept the trip count
			// from being a constant, and the unroll from applying.
			const int tn = H == 2 ? 4 : 8;
			_Pragma("GCC unroll 8") for (int u = 0; u < tn; u++) {
				const int t = tn * h + u;
				__m512i W[2];
				_Pragma("GCC unroll 2") for (int g = 0; g < NV; g++) W[g] = _mm512_load_si512(vb + g * vgs + t * 16);
				_Pragma("GCC unroll 4") for (int i = 0; i < MR; i++) {
					int32_t quad;
					memcpy(&quad, x + i * k + b * 32 + 4 * t, 4);
					__m512i X = _mm512_set1_epi32(quad);
					_Pragma("GCC unroll 2") for (int g = 0; g < NV; g++) acc[i][g] = _mm512_dpbusd_epi32(acc[i][g], X, W[g]);
				}
			}
			_Pragma("GCC unroll 2") for (int g = 0; g < NV; g++) {
				__m512 S = _mm512_load_ps(sc + (g * ZPACK_BLOCKS + b) * 16 * H + 16 * h);
				_Pragma("GCC unroll 4") for (int i = 0; i < MR; i++) fa[i][g] = _mm512_fmadd_ps(
					_mm512_cvtepi32_ps(acc[i][g]), _mm512_mul_ps(S, _mm512_set1_ps(xd[i * nb + b])), fa[i][g]);
			}
		}
		if (MIN) {
			_Pragma("GCC unroll 2") for (int g = 0; g < NV; g++) {
				__m512 M = _mm512_load_ps(mn + (g * ZPACK_BLOCKS + b) * 16);
				_Pragma("GCC unroll 4") for (int i = 0; i < MR; i++)
					fa[i][g] = _mm512_fnmadd_ps(M, _mm512_set1_ps(xs[i * nb + b]), fa[i][g]);
			}
		}
	}
	_Pragma("GCC unroll 4") for (int i = 0; i < MR; i++) _Pragma("GCC unroll 2") for (int g = 0; g < NV; g++) {
		acc_store16(c + i * ldc + 16 * g, cols[g], fa[i][g], first);
	}
}

// qmm_avx512vnni is qmatmul_avx512vnni for H scales per block, with or
// without minima (mm16's).
TARGET_AVX512VNNI static inline __attribute__((always_inline)) void qmm_avx512vnni(const int H, const int MIN, int wt,
	int m, int n, int k, const uint8_t *xq, const float *xd, const float *xs, const uint8_t *w, long wstride, float *c,
	long ldc, uint8_t *pack) {
	int32_t *v = (int32_t *)pack;
	float *sc = (float *)(v + ZPACK_GROUPS * ZPACK_INTS);
	int32_t *off = (int32_t *)(sc + ZPACK_GROUPS * ZPACK_BLOCKS * 16 * H);
	float *mn = (float *)(off + ZPACK_GROUPS * ZPACK_BLOCKS * 16 * H);
	int kq = dlmc_kquant_block_bytes(wt) != 0;
	long nb = k / 32;
	for (int j0 = 0; j0 < n; j0 += 16 * ZPACK_GROUPS) {
		int ng = (n - j0 + 15) / 16 < ZPACK_GROUPS ? (n - j0 + 15) / 16 : ZPACK_GROUPS;
		int cols[ZPACK_GROUPS];
		for (int g = 0; g < ng; g++) cols[g] = n - j0 - 16 * g < 16 ? n - j0 - 16 * g : 16;
		for (long b0 = 0; b0 < nb; b0 += ZPACK_BLOCKS) {
			long nb_ = nb - b0 < ZPACK_BLOCKS ? nb - b0 : ZPACK_BLOCKS;
			for (int g = 0; g < ng; g++) {
				long o = (long)g * ZPACK_BLOCKS * 16;
				const uint8_t *wg = w + (j0 + 16 * g) * wstride;
				if (kq) pack16k(wt, cols[g], b0, nb_, wg, wstride, v + g * ZPACK_INTS, sc + o * H, off + o * H, mn + o);
				else pack16(wt, cols[g], b0, nb_, wg, wstride, v + g * ZPACK_INTS, sc + o, off + o);
			}
			qprefetch pf;
			qprefetch_next(&pf, wt, w, wstride, n, nb, j0, b0, 16 * ZPACK_GROUPS, ZPACK_BLOCKS, (m + 3) / 4);
			for (int i = 0; i < m;) {
				int mr = m - i >= 4 ? 4 : 1;
				qprefetch_step(&pf);
				for (int g = 0; g < ng; g += 2) {
					const uint8_t *xi = xq + (long)i * k + b0 * 32;
					const float *di = xd + (long)i * nb + b0, *si = xs ? xs + (long)i * nb + b0 : 0;
					float *ci = c + (long)i * ldc + j0 + 16 * g;
					long o = (long)g * ZPACK_BLOCKS * 16;
					const int32_t *vg = v + g * ZPACK_INTS;
					if (g + 1 < ng && mr == 4)
						mm16(4, 2, H, MIN, nb_, xi, k, di, si, nb, vg, ZPACK_INTS, sc + o * H, off + o * H, mn + o, ci, ldc, b0 == 0, cols + g);
					else if (g + 1 < ng)
						mm16(1, 2, H, MIN, nb_, xi, k, di, si, nb, vg, ZPACK_INTS, sc + o * H, off + o * H, mn + o, ci, ldc, b0 == 0, cols + g);
					else if (mr == 4)
						mm16(4, 1, H, MIN, nb_, xi, k, di, si, nb, vg, ZPACK_INTS, sc + o * H, off + o * H, mn + o, ci, ldc, b0 == 0, cols + g);
					else
						mm16(1, 1, H, MIN, nb_, xi, k, di, si, nb, vg, ZPACK_INTS, sc + o * H, off + o * H, mn + o, ci, ldc, b0 == 0, cols + g);
				}
				i += mr;
			}
		}
	}
}

// qmatmul_avx512vnni packs ZPACK_GROUPS groups of 16 rows of w
// (ZPACK_BLOCKS blocks each: 80 KB with the scales and offsets, 104 KB for
// a K-quant's, in L2) at a time and runs every 4 rows of x (4 KB per
// 1,024 values, in L1) against the whole pack, two groups (32 outputs) at
// a time.
TARGET_AVX512VNNI static void qmatmul_avx512vnni(int wt, int m, int n, int k, const uint8_t *xq, const float *xd,
	const float *xs, const uint8_t *w, long wstride, float *c, long ldc, uint8_t *pack) {
	if (kq_scales16(wt)) qmm_avx512vnni(2, 0, wt, m, n, k, xq, xd, xs, w, wstride, c, ldc, pack);
	else if (kq_min(wt)) qmm_avx512vnni(1, 1, wt, m, n, k, xq, xd, xs, w, wstride, c, ldc, pack);
	else qmm_avx512vnni(1, 0, wt, m, n, k, xq, xd, xs, w, wstride, c, ldc, pack);
}

// q8_layout_avx512 writes groups [g0, g1) of 16 rows of the Q8_0 weight w
// (rows rows, k values, row stride wstride bytes) in the layout of
// dlmc_q8_layout: per group g and block b the 8 vectors pack16 makes
// (vector t: each row's values 4t … 4t+3) at q + (g·nb + b)·128, and the
// 16 rows' scales, the blocks' own F16 bits, at s + (g·nb + b)·16. Rows
// past the weight's end have zero quants and scales.
TARGET_AVX512VNNI static void q8_layout_avx512(const uint8_t *w, long wstride, long rows, long k, long g0, long g1,
	int32_t *q, uint16_t *s) {
	long nb = k / 32;
	for (long g = g0; g < g1; g++) {
		for (long b = 0; b < nb; b++) {
			__m256i rv[16];
			uint16_t *sb = s + (g * nb + b) * 16;
			for (int r = 0; r < 16; r++) {
				long row = 16 * g + r;
				if (row >= rows) {
					rv[r] = _mm256_setzero_si256();
					sb[r] = 0;
					continue;
				}
				const uint8_t *blk = w + row * wstride + b * 34;
				sb[r] = (uint16_t)(blk[0] | blk[1] << 8);
				rv[r] = _mm256_loadu_si256((const __m256i *)(blk + 2));
			}
			tr16x8(rv, q + (g * nb + b) * 128);
		}
	}
}

// qmm_laid is qmatmul_avx512vnni's Q8_0 product on a weight laid out at
// load (dlmc_q8_layout; its groups from the first of these n columns at
// lq and ls): the packs are read in place, and only each pack's offsets
// (−128·Σq per row and block, one vpdpbusd per vector: 1/m of the
// products') and its scales widened to F32 are made per call, into pack.
// The sums, scales and offsets are those qmatmul_avx512vnni makes from
// the weight's own blocks, so the results are bit for bit its results.
TARGET_AVX512VNNI static void qmm_laid(int m, int n, int k, const uint8_t *xq, const float *xd, const int32_t *lq,
	const uint16_t *ls, float *c, long ldc, uint8_t *pack) {
	float *sc = (float *)pack;
	int32_t *off = (int32_t *)(sc + ZPACK_GROUPS * ZPACK_BLOCKS * 16);
	long nb = k / 32, vgs = nb * 128;
	for (int j0 = 0; j0 < n; j0 += 16 * ZPACK_GROUPS) {
		int ng = (n - j0 + 15) / 16 < ZPACK_GROUPS ? (n - j0 + 15) / 16 : ZPACK_GROUPS;
		int cols[ZPACK_GROUPS];
		for (int g = 0; g < ng; g++) cols[g] = n - j0 - 16 * g < 16 ? n - j0 - 16 * g : 16;
		const int32_t *vj = lq + (long)(j0 / 16) * vgs;
		const uint16_t *sj = ls + (long)(j0 / 16) * nb * 16;
		for (long b0 = 0; b0 < nb; b0 += ZPACK_BLOCKS) {
			long nb_ = nb - b0 < ZPACK_BLOCKS ? nb - b0 : ZPACK_BLOCKS;
			for (int g = 0; g < ng; g++) {
				for (long b = 0; b < nb_; b++) {
					long o = ((long)g * ZPACK_BLOCKS + b) * 16;
					_mm512_store_si512(off + o, pack_offsets(vj + g * vgs + (b0 + b) * 128, 0, 8));
					_mm512_store_ps(sc + o, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(sj + (g * nb + b0 + b) * 16))));
				}
			}
			for (int i = 0; i < m;) {
				int mr = m - i >= 4 ? 4 : 1;
				for (int g = 0; g < ng; g += 2) {
					const uint8_t *xi = xq + (long)i * k + b0 * 32;
					const float *di = xd + (long)i * nb + b0;
					float *ci = c + (long)i * ldc + j0 + 16 * g;
					long o = (long)g * ZPACK_BLOCKS * 16;
					const int32_t *vg = vj + g * vgs + b0 * 128;
					if (g + 1 < ng && mr == 4)
						mm16(4, 2, 1, 0, nb_, xi, k, di, 0, nb, vg, vgs, sc + o, off + o, 0, ci, ldc, b0 == 0, cols + g);
					else if (g + 1 < ng)
						mm16(1, 2, 1, 0, nb_, xi, k, di, 0, nb, vg, vgs, sc + o, off + o, 0, ci, ldc, b0 == 0, cols + g);
					else if (mr == 4)
						mm16(4, 1, 1, 0, nb_, xi, k, di, 0, nb, vg, vgs, sc + o, off + o, 0, ci, ldc, b0 == 0, cols + g);
					else
						mm16(1, 1, 1, 0, nb_, xi, k, di, 0, nb, vg, vgs, sc + o, off + o, 0, ci, ldc, b0 == 0, cols + g);
				}
				i += mr;
			}
		}
	}
}

int dlmc_quant_isa(void) {
	__builtin_cpu_init();
	if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") || !__builtin_cpu_supports("f16c"))
		return DLMC_ISA_GENERIC;
	if (__builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vl")) return DLMC_ISA_AVX512VNNI;
	if (__builtin_cpu_supports("avxvnni")) return DLMC_ISA_AVXVNNI;
	return DLMC_ISA_AVX2;
}

int dlmc_quant_isa_supported(int isa) {
	__builtin_cpu_init();
	int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
	switch (isa) {
	case DLMC_ISA_GENERIC: return 1;
	case DLMC_ISA_AVX2: return avx2;
	case DLMC_ISA_AVXVNNI: return avx2 && __builtin_cpu_supports("avxvnni");
	case DLMC_ISA_AVX512VNNI: return avx2 && __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vl");
	}
	return 0;
}
#else
int dlmc_quant_isa(void) { return DLMC_ISA_GENERIC; }
int dlmc_quant_isa_supported(int isa) { return isa == DLMC_ISA_GENERIC; }
#endif

void dlmc_quant_rows(int simd, int wt, float *dst, const uint8_t *src, long rows, long cols, long stride) {
	if (dlmc_kquant_block_bytes(wt)) {
		dlmc_kquant_rows(simd, wt, dst, src, rows, cols, stride);
		return;
	}
#if defined(__x86_64__)
	if (simd) {
		quant_rows_avx2(wt, dst, src, rows, cols, stride);
		return;
	}
#endif
	(void)simd;
	quant_rows_generic(wt, dst, src, rows, cols, stride);
}

void dlmc_quantize_act(int isa, void *q, float *d, float *sums, const float *x, long rows, long cols, long ldx) {
#if defined(__x86_64__)
	if (isa != DLMC_ISA_GENERIC) {
		quantize_act_avx2(act_form(isa), q, d, sums, x, rows, cols, ldx);
		return;
	}
#endif
	quantize_act_generic(act_form(isa), q, d, sums, x, rows, cols, ldx);
}

// The packs are the caller's scratch, not _Thread_local arrays: those
// sat in every thread's static TLS (216 KB, cleared as each thread
// starts), the Go runtime's and the libraries' threads too — 2–3 MB of a
// process's memory for the two or three threads that run products.
int dlmc_qmatmul(int isa, int wt, int m, int n, int k, const void *xq, const float *xd, const float *xs,
	const uint8_t *w, long wstride, float *c, long ldc, void *pack) {
	uint8_t *p = (uint8_t *)(((uintptr_t)pack + 63) & ~(uintptr_t)63);
	int kq = dlmc_kquant_block_bytes(wt) != 0;
	if (block_min(wt) || (kq && (k % 256 != 0 || (kq_min(wt) && !xs) || isa == DLMC_ISA_AVXVNNI))) return -1;
	switch (isa) {
#if defined(__x86_64__)
	case DLMC_ISA_AVX2: qmatmul_avx2(wt, m, n, k, xq, xd, xs, w, wstride, c, ldc, p); return 0;
	case DLMC_ISA_AVXVNNI: qmatmul_avxvnni(wt, m, n, k, xq, xd, w, wstride, c, ldc); return 0;
	case DLMC_ISA_AVX512VNNI: qmatmul_avx512vnni(wt, m, n, k, xq, xd, xs, w, wstride, c, ldc, p); return 0;
#endif
	}
	if (kq) qmatmul_kquant_generic(wt, m, n, k, xq, xd, xs, w, wstride, c, ldc);
	else qmatmul_generic(wt, m, n, k, xq, xd, w, wstride, c, ldc);
	return 0;
}

int dlmc_q8_layout(const uint8_t *w, long wstride, long rows, long k, long g0, long g1, int32_t *q, uint16_t *s) {
#if defined(__x86_64__)
	if (k % 32 == 0 && dlmc_quant_isa_supported(DLMC_ISA_AVX512VNNI)) {
		q8_layout_avx512(w, wstride, rows, k, g0, g1, q, s);
		return 0;
	}
#endif
	(void)w, (void)wstride, (void)rows, (void)k, (void)g0, (void)g1, (void)q, (void)s;
	return -1;
}

int dlmc_qmatmul_laid(int m, int n, int k, const void *xq, const float *xd, const int32_t *lq, const uint16_t *ls,
	float *c, long ldc, void *pack) {
	uint8_t *p = (uint8_t *)(((uintptr_t)pack + 63) & ~(uintptr_t)63);
#if defined(__x86_64__)
	if (k % 32 == 0 && dlmc_quant_isa_supported(DLMC_ISA_AVX512VNNI)) {
		qmm_laid(m, n, k, xq, xd, lq, ls, c, ldc, p);
		return 0;
	}
#endif
	(void)m, (void)n, (void)xq, (void)xd, (void)lq, (void)ls, (void)c, (void)ldc, (void)p;
	return -1;
}
