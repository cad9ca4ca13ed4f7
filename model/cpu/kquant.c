// kquant.c: ggml's K-quants (super-blocks of 256 values in sub-blocks with
// their own scales: Q4_K and Q5_K, 8 sub-blocks of 32 with a 6-bit scale and
// minimum each, value (d·sc)·q − dmin·m; Q6_K, 16 sub-blocks of 16 with an
// int8 scale each, value (d·sc)·(q − 32); Q3_K, 16 sub-blocks of 16 with a
// 6-bit scale each, value d·(sc − 32)·q, q ∈ [−4, 4); and IQ4_XS, 8
// sub-blocks of 32 with a 6-bit scale each and 4-bit quants standing for
// 16 int8 levels, value d·(sc − 32)·level) decoded to float32 rows, exactly
// as ggml's dequantize_row_*, for Embed, ToHost and the products that
// decode a panel of rows and run sgemm on it (matmul.go's convertedMatMul);
// and as the int8 products take them (dlmc_kq_block: quants, integer
// sub-scales and minima, for quant.c's packs).
//
// The products d·sc·q are exact in float32 (at most 23 significant bits),
// so the plain C and the AVX2 loops agree bit for bit whether a compiler
// fuses the subtraction of the minimum or not.
#include <stdint.h>
#include <string.h>

#include "half.h"
#include "kernels.h"
#include "simd.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

long dlmc_kquant_block_bytes(int wt) {
	switch (wt) {
	case DLMC_Q4_K: return 144;
	case DLMC_Q5_K: return 176;
	case DLMC_Q6_K: return 210;
	case DLMC_Q3_K: return 110;
	case DLMC_IQ4_XS: return 136;
	}
	return 0;
}

// scale_min_k4i is sub-block j's 6-bit scale and minimum from the 12 bytes
// q of a Q4_K or Q5_K block (ggml's get_scale_min_k4); scale_min_k4 the
// same as floats.
static inline void scale_min_k4i(int j, const uint8_t *q, int *sc, int *m) {
	if (j < 4) {
		*sc = q[j] & 63;
		*m = q[j + 4] & 63;
	} else {
		*sc = (q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4);
		*m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
	}
}

static inline void scale_min_k4(int j, const uint8_t *q, float *sc, float *m) {
	int s, n;
	scale_min_k4i(j, q, &s, &n);
	*sc = (float)s;
	*m = (float)n;
}

// Q4_K (144 bytes): d, dmin (float16), scales[12], qs[128]; Q5_K (176):
// the same, then qh[32] (fifth bits) before qs. Runs of 64 values: the low
// nibbles of 32 bytes of qs (sub-block 2j), then their high nibbles (2j+1).
static void q45k_block_generic(int five, float *y, const uint8_t *b) {
	float d = half_at(b), dmin = half_at(b + 2);
	const uint8_t *sc = b + 4, *qh = b + 16, *qs = b + (five ? 48 : 16);
	for (int j = 0; j < 4; j++, qs += 32, y += 64) {
		float s1, m1, s2, m2;
		scale_min_k4(2 * j, sc, &s1, &m1);
		scale_min_k4(2 * j + 1, sc, &s2, &m2);
		float d1 = d * s1, mm1 = dmin * m1, d2 = d * s2, mm2 = dmin * m2;
		for (int l = 0; l < 32; l++) {
			int lo = qs[l] & 0xf, hi = qs[l] >> 4;
			if (five) {
				lo |= ((qh[l] >> (2 * j)) & 1) << 4;
				hi |= ((qh[l] >> (2 * j + 1)) & 1) << 4;
			}
			y[l] = d1 * (float)lo - mm1;
			y[l + 32] = d2 * (float)hi - mm2;
		}
	}
}

// Q6_K (210 bytes): ql[128], qh[64], scales[16] (int8), d (float16). Each
// half of 128 values: ql 64 bytes, qh 32, 8 scales; value l + 32·r is a
// nibble of ql[l + 32·(r&1)] (low for r < 2) with bits 2r, 2r+1 of qh[l].
static void q6k_block_generic(float *y, const uint8_t *b) {
	float d = half_at(b + 208);
	const uint8_t *ql = b, *qh = b + 128;
	const int8_t *sc = (const int8_t *)(b + 192);
	for (int n = 0; n < 2; n++, y += 128, ql += 64, qh += 32, sc += 8) {
		for (int l = 0; l < 32; l++) {
			int is = l / 16;
			int q1 = ((ql[l] & 0xf) | ((qh[l] & 3) << 4)) - 32;
			int q2 = ((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) - 32;
			int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
			int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
			y[l] = d * (float)sc[is] * (float)q1;
			y[l + 32] = d * (float)sc[is + 2] * (float)q2;
			y[l + 64] = d * (float)sc[is + 4] * (float)q3;
			y[l + 96] = d * (float)sc[is + 6] * (float)q4;
		}
	}
}

// The super-blocks without minima whose quants and scales come apart from
// their layouts (nomin_int8): Q3_K and IQ4_XS, 16 scales of 16 values each
// (IQ4_XS's in pairs, one a sub-block of 32) less their bias, d per block.
//
// Q3_K (110 bytes): hmask[32] (high bits), qs[64] (low 2 bits), scales[12]
// (sixteen 6-bit scales, biased by 32), d (float16). Value v's low bits
// are bits 2·(v%128/32) of qs[32·(v/128) + v%32], its high bit bit v/32 of
// hmask[v%32]; q is the low bits less 4 where that bit is clear. Scale j's
// low nibble is byte j%8's (its high nibble for j ≥ 8), its top two bits
// bits 2·(j/4), 2·(j/4)+1 of byte 8 + j%4.
//
// IQ4_XS (136 bytes): d (float16), scales_h (uint16: bits 2s, 2s+1 the top
// of sub-block s's scale), scales_l[4] (its low nibble in byte s/2, the low
// one for even s), qs[128]; eight sub-blocks of 32, each the low nibbles
// of its 16 bytes then their high nibbles, a nibble q standing for
// iq4_levels[q] (simd.h); scales biased by 32 too.

// nomin_scales writes a Q3_K or IQ4_XS block's 16 scales, less 32, into
// s and returns its d.
static float nomin_scales(int wt, const uint8_t *b, int *s) {
	if (wt == DLMC_Q3_K) {
		const uint8_t *sc = b + 96;
		for (int j = 0; j < 16; j++)
			s[j] = (((sc[j % 8] >> (4 * (j / 8))) & 0xf) | (((sc[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - 32;
		return half_at(b + 108);
	}
	unsigned sh = b[2] | (unsigned)b[3] << 8;
	for (int ib = 0; ib < 8; ib++)
		s[2 * ib] = s[2 * ib + 1] = (((b[4 + ib / 2] >> (4 * (ib % 2))) & 0xf) | (((sh >> (2 * ib)) & 3) << 4)) - 32;
	return half_at(b);
}

static void q3k_quants_generic(int8_t *q, const uint8_t *b) {
	for (int v = 0; v < 256; v++) {
		int l = v % 32, lo = (b[32 + 32 * (v / 128) + l] >> (2 * (v % 128 / 32))) & 3;
		q[v] = (int8_t)((b[l] >> (v / 32)) & 1 ? lo : lo - 4);
	}
}

static void iq4xs_quants_generic(int8_t *q, const uint8_t *b) {
	const uint8_t *qs = b + 8;
	for (int ib = 0; ib < 8; ib++, qs += 16, q += 32)
		for (int j = 0; j < 16; j++) {
			q[j] = iq4_levels[qs[j] & 0xf];
			q[j + 16] = iq4_levels[qs[j] >> 4];
		}
}

// q45k_int8_generic and q6k_int8_generic decode one super-block b as the
// int8 products take it (dlmc_kq_block): the quants q[256], each value's
// integer sub-scale isc[v/16] and (Q4_K, Q5_K) minimum im[v/32], and the
// block's float16 d and dmin in dd[0], dd[1]; value v is
// dd[0]·isc·q[v] − dd[1]·im.
// q45k_scales reads a Q4_K or Q5_K block's d, dmin and 6-bit scales and
// minima (scale_min_k4i), entry k of isc and im at k·ls.
static inline void q45k_scales(const uint8_t *b, int16_t *isc, int16_t *im, long ls, float *dd) {
	dd[0] = half_at(b);
	dd[1] = half_at(b + 2);
	for (int v = 0; v < 8; v++) {
		int s, m;
		scale_min_k4i(v, b + 4, &s, &m);
		isc[2 * v * ls] = isc[(2 * v + 1) * ls] = (int16_t)s;
		im[v * ls] = (int16_t)m;
	}
}

static void q45k_int8_generic(int five, int8_t *q, int16_t *isc, int16_t *im, long ls, float *dd, const uint8_t *b) {
	q45k_scales(b, isc, im, ls, dd);
	const uint8_t *qh = b + 16, *qs = b + (five ? 48 : 16);
	for (int j = 0; j < 4; j++, qs += 32, q += 64) {
		for (int l = 0; l < 32; l++) {
			int lo = qs[l] & 0xf, hi = qs[l] >> 4;
			if (five) {
				lo |= ((qh[l] >> (2 * j)) & 1) << 4;
				hi |= ((qh[l] >> (2 * j + 1)) & 1) << 4;
			}
			q[l] = (int8_t)lo;
			q[l + 32] = (int8_t)hi;
		}
	}
}

static void q6k_int8_generic(int8_t *q, int16_t *isc, int16_t *im, long ls, float *dd, const uint8_t *b) {
	dd[0] = half_at(b + 208);
	dd[1] = 0;
	const uint8_t *ql = b, *qh = b + 128;
	const int8_t *sc = (const int8_t *)(b + 192);
	for (int k = 0; k < 16; k++) isc[k * ls] = sc[k];
	for (int k = 0; k < 8; k++) im[k * ls] = 0;
	for (int n = 0; n < 2; n++, q += 128, ql += 64, qh += 32) {
		for (int l = 0; l < 32; l++) {
			q[l] = (int8_t)(((ql[l] & 0xf) | ((qh[l] & 3) << 4)) - 32);
			q[l + 32] = (int8_t)(((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) - 32);
			q[l + 64] = (int8_t)(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
			q[l + 96] = (int8_t)(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
		}
	}
}

// nomin_int8 is dlmc_kq_block for Q3_K and IQ4_XS (no minimum: im and
// dd[1] 0), the quants from quants (plain C or AVX2).
typedef void (*nomin_quants)(int8_t *q, const uint8_t *b);
static void nomin_int8(nomin_quants quants, int wt, int8_t *q, int16_t *isc, int16_t *im, long ls, float *dd,
	const uint8_t *b) {
	int s[16];
	dd[0] = nomin_scales(wt, b, s);
	dd[1] = 0;
	for (int k = 0; k < 16; k++) isc[k * ls] = (int16_t)s[k];
	for (int k = 0; k < 8; k++) im[k * ls] = 0;
	quants(q, b);
}

// nomin_block decodes a Q3_K or IQ4_XS block to float32, each value
// d·sc·q (exact in float32: at most 11 + 6 + 7 significant bits).
static void nomin_block(nomin_quants quants, int wt, float *y, const uint8_t *b) {
	int8_t q[256];
	int s[16];
	float d = nomin_scales(wt, b, s);
	quants(q, b);
	for (int v = 0; v < 256; v++) y[v] = d * (float)s[v / 16] * (float)q[v];
}

// kquant_rows decodes rows of wt's blocks with one ISA's block decoders:
// q6 for Q6_K, q45 (five set for Q5_K) for Q4_K and Q5_K, q3 and iq4 (the
// quants, nomin_block) for Q3_K and IQ4_XS.
static void kquant_rows(void (*q6)(float *, const uint8_t *), void (*q45)(int, float *, const uint8_t *),
	nomin_quants q3, nomin_quants iq4, int wt, float *dst, const uint8_t *src, long rows, long cols, long stride) {
	long bb = dlmc_kquant_block_bytes(wt);
	for (long i = 0; i < rows; i++, dst += cols, src += stride) {
		const uint8_t *b = src;
		for (long j = 0; j < cols; j += 256, b += bb) {
			if (wt == DLMC_Q6_K) q6(dst + j, b);
			else if (wt == DLMC_Q3_K) nomin_block(q3, wt, dst + j, b);
			else if (wt == DLMC_IQ4_XS) nomin_block(iq4, wt, dst + j, b);
			else q45(wt == DLMC_Q5_K, dst + j, b);
		}
	}
}

#if defined(__x86_64__)
#define TARGET_AVX2 __attribute__((target("avx2,fma")))

// put32 stores the 32 bytes v (unsigned when !sgn, else int8) as float32
// into y: y[t] = s0·v[t] − m0 for t < 16, s1·v[t] − m1 after.
TARGET_AVX2 static inline void put32(float *y, __m256i v, int sgn, float s0, float m0, float s1, float m1) {
	__m128i h[2] = {_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1)};
	for (int k = 0; k < 2; k++) {
		__m256 sv = _mm256_set1_ps(k ? s1 : s0), mv = _mm256_set1_ps(k ? m1 : m0);
		__m128i lo = h[k], hi = _mm_srli_si128(h[k], 8);
		__m256i a = sgn ? _mm256_cvtepi8_epi32(lo) : _mm256_cvtepu8_epi32(lo);
		__m256i c = sgn ? _mm256_cvtepi8_epi32(hi) : _mm256_cvtepu8_epi32(hi);
		// The products are exact: fused or not, one rounding.
		_mm256_storeu_ps(y + 16 * k, _mm256_fmsub_ps(sv, _mm256_cvtepi32_ps(a), mv));
		_mm256_storeu_ps(y + 16 * k + 8, _mm256_fmsub_ps(sv, _mm256_cvtepi32_ps(c), mv));
	}
}

// q45k_quants_avx2 is run j (0…3) of a Q4_K or Q5_K block's quants
// (qs: its 32 bytes; qh: the block's fifth bits, five set): values
// 64j … 64j+31 in *lo, 64j+32 … 64j+63 in *hi, q ∈ [0, 32).
TARGET_AVX2 static inline void q45k_quants_avx2(int five, int j, const uint8_t *qs, __m256i qh, __m256i *lo, __m256i *hi) {
	const __m256i m4 = _mm256_set1_epi8(0x0f), one = _mm256_set1_epi8(1);
	__m256i q = _mm256_loadu_si256((const __m256i *)qs);
	*lo = _mm256_and_si256(q, m4);
	*hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
	if (five) {
		// Bit 2j (2j+1) of each byte of qh, moved to bit 4.
		__m256i b0 = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * j)), one);
		__m256i b1 = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * j + 1)), one);
		*lo = _mm256_or_si256(*lo, _mm256_slli_epi16(b0, 4));
		*hi = _mm256_or_si256(*hi, _mm256_slli_epi16(b1, 4));
	}
}

// q6k_quants_avx2 is half of a Q6_K block's quants (ql: its 64 bytes of
// low nibbles, qh: its 32 of high bits) as int8 q − 32: values
// 32r … 32r+31 of the half in v[r].
TARGET_AVX2 static inline void q6k_quants_avx2(const uint8_t *ql, const uint8_t *qh, __m256i v[4]) {
	const __m256i m4 = _mm256_set1_epi8(0x0f), m2 = _mm256_set1_epi8(3), off = _mm256_set1_epi8(32);
	__m256i l0 = _mm256_loadu_si256((const __m256i *)ql), l1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
	__m256i h = _mm256_loadu_si256((const __m256i *)qh);
	v[0] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_slli_epi16(_mm256_and_si256(h, m2), 4));
	v[1] = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2), m2), 4));
	v[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
		_mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 4), m2), 4));
	v[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
		_mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 6), m2), 4));
	for (int r = 0; r < 4; r++) v[r] = _mm256_sub_epi8(v[r], off);
}

TARGET_AVX2 static void q45k_block_avx2(int five, float *y, const uint8_t *b) {
	float d = half_at(b), dmin = half_at(b + 2);
	const uint8_t *sc = b + 4, *qs = b + (five ? 48 : 16);
	__m256i qh = five ? _mm256_loadu_si256((const __m256i *)(b + 16)) : _mm256_setzero_si256();
	for (int j = 0; j < 4; j++, qs += 32, y += 64) {
		float s1, m1, s2, m2;
		scale_min_k4(2 * j, sc, &s1, &m1);
		scale_min_k4(2 * j + 1, sc, &s2, &m2);
		float d1 = d * s1, mm1 = dmin * m1, d2 = d * s2, mm2 = dmin * m2;
		__m256i lo, hi;
		q45k_quants_avx2(five, j, qs, qh, &lo, &hi);
		put32(y, lo, 0, d1, mm1, d1, mm1);
		put32(y + 32, hi, 0, d2, mm2, d2, mm2);
	}
}

TARGET_AVX2 static void q6k_block_avx2(float *y, const uint8_t *b) {
	float d = half_at(b + 208);
	const uint8_t *ql = b, *qh = b + 128;
	const int8_t *sc = (const int8_t *)(b + 192);
	for (int n = 0; n < 2; n++, y += 128, ql += 64, qh += 32, sc += 8) {
		__m256i v[4];
		q6k_quants_avx2(ql, qh, v);
		for (int r = 0; r < 4; r++) {
			float s0 = d * (float)sc[2 * r], s1 = d * (float)sc[2 * r + 1];
			put32(y + 32 * r, v[r], 1, s0, 0, s1, 0);
		}
	}
}

// The int8 decoders' AVX2 loops: the quants as kquant's float decoders
// build them, stored as bytes; the scales as the plain C ones read them.
TARGET_AVX2 static void q45k_int8_avx2(int five, int8_t *q, int16_t *isc, int16_t *im, long ls, float *dd, const uint8_t *b) {
	q45k_scales(b, isc, im, ls, dd);
	const uint8_t *qs = b + (five ? 48 : 16);
	__m256i qh = five ? _mm256_loadu_si256((const __m256i *)(b + 16)) : _mm256_setzero_si256();
	for (int j = 0; j < 4; j++, qs += 32, q += 64) {
		__m256i lo, hi;
		q45k_quants_avx2(five, j, qs, qh, &lo, &hi);
		_mm256_storeu_si256((__m256i *)q, lo);
		_mm256_storeu_si256((__m256i *)(q + 32), hi);
	}
}

TARGET_AVX2 static void q6k_int8_avx2(int8_t *q, int16_t *isc, int16_t *im, long ls, float *dd, const uint8_t *b) {
	dd[0] = half_at(b + 208);
	dd[1] = 0;
	const int8_t *sc = (const int8_t *)(b + 192);
	for (int k = 0; k < 16; k++) isc[k * ls] = sc[k];
	for (int k = 0; k < 8; k++) im[k * ls] = 0;
	for (int n = 0; n < 2; n++, q += 128) {
		__m256i v[4];
		q6k_quants_avx2(b + 64 * n, b + 128 + 32 * n, v);
		for (int r = 0; r < 4; r++) _mm256_storeu_si256((__m256i *)(q + 32 * r), v[r]);
	}
}

// q3k_quants_avx2 is q3k_quants_generic 32 values at a time: run r's low
// bits from bits 2·(r%4) of qs[32·(r/4) …], its high bits bit r of hmask,
// shifted in 16-bit lanes and masked to each byte.
TARGET_AVX2 static void q3k_quants_avx2(int8_t *q, const uint8_t *b) {
	const __m256i three = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
	__m256i hm = _mm256_loadu_si256((const __m256i *)b);
	for (int r = 0; r < 8; r++) {
		__m256i qs = _mm256_loadu_si256((const __m256i *)(b + 32 + 32 * (r / 4)));
		__m256i lo = _mm256_and_si256(_mm256_srl_epi16(qs, _mm_cvtsi32_si128(2 * (r % 4))), three);
		__m256i clear = _mm256_xor_si256(_mm256_and_si256(_mm256_srl_epi16(hm, _mm_cvtsi32_si128(r)), one), one);
		_mm256_storeu_si256((__m256i *)(q + 32 * r), _mm256_sub_epi8(lo, _mm256_slli_epi16(clear, 2)));
	}
}

// iq4xs_quants_avx2 is iq4xs_quants_generic two sub-blocks at a time: the
// nibbles of 32 bytes (16 of each sub-block) looked up in the levels by
// vpshufb, the low ones of a sub-block then its high ones.
TARGET_AVX2 static void iq4xs_quants_avx2(int8_t *q, const uint8_t *b) {
	const __m256i levels = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)iq4_levels));
	const __m256i nib = _mm256_set1_epi8(0xf);
	for (int p = 0; p < 4; p++) {
		__m256i qs = _mm256_loadu_si256((const __m256i *)(b + 8 + 32 * p));
		__m256i lo = _mm256_shuffle_epi8(levels, _mm256_and_si256(qs, nib));
		__m256i hi = _mm256_shuffle_epi8(levels, _mm256_and_si256(_mm256_srli_epi16(qs, 4), nib));
		// lo, hi: sub-block 2p's low and high nibbles in the lower lanes,
		// 2p+1's in the upper.
		_mm256_storeu_si256((__m256i *)(q + 64 * p), _mm256_permute2x128_si256(lo, hi, 0x20));
		_mm256_storeu_si256((__m256i *)(q + 64 * p + 32), _mm256_permute2x128_si256(lo, hi, 0x31));
	}
}

#endif

void dlmc_kquant_rows(int simd, int wt, float *dst, const uint8_t *src, long rows, long cols, long stride) {
#if defined(__x86_64__)
	if (simd) {
		kquant_rows(q6k_block_avx2, q45k_block_avx2, q3k_quants_avx2, iq4xs_quants_avx2, wt, dst, src, rows, cols, stride);
		return;
	}
#endif
	(void)simd;
	kquant_rows(q6k_block_generic, q45k_block_generic, q3k_quants_generic, iq4xs_quants_generic, wt, dst, src, rows, cols,
		stride);
}

void dlmc_kq_block(int simd, int wt, int8_t *q, int16_t *isc, int16_t *im, long ls, float *dd, const uint8_t *b) {
#if defined(__x86_64__)
	if (simd) {
		if (wt == DLMC_Q3_K) nomin_int8(q3k_quants_avx2, wt, q, isc, im, ls, dd, b);
		else if (wt == DLMC_IQ4_XS) nomin_int8(iq4xs_quants_avx2, wt, q, isc, im, ls, dd, b);
		else if (wt == DLMC_Q6_K) q6k_int8_avx2(q, isc, im, ls, dd, b);
		else q45k_int8_avx2(wt == DLMC_Q5_K, q, isc, im, ls, dd, b);
		return;
	}
#endif
	(void)simd;
	if (wt == DLMC_Q3_K) nomin_int8(q3k_quants_generic, wt, q, isc, im, ls, dd, b);
	else if (wt == DLMC_IQ4_XS) nomin_int8(iq4xs_quants_generic, wt, q, isc, im, ls, dd, b);
	else if (wt == DLMC_Q6_K) q6k_int8_generic(q, isc, im, ls, dd, b);
	else q45k_int8_generic(wt == DLMC_Q5_K, q, isc, im, ls, dd, b);
}
