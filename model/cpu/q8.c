// q8.c: ggml's Q8_0 weights (blocks of 32 int8 quants sharing one float16
// scale d, 34 bytes) decoded to float32 rows, for the products that keep a
// Q8_0 weight quantized and decode it a panel at a time (matmul.go).
#include <stdint.h>
#include <string.h>

#include "kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

// half_to_float is IEEE binary16 → binary32, exactly (subnormals, ±Inf,
// NaN included); one per block, so scalar.
static inline float half_to_float(uint16_t h) {
	uint32_t sign = (uint32_t)(h >> 15) << 31;
	uint32_t exp = (h >> 10) & 0x1f;
	uint32_t man = h & 0x3ff;
	uint32_t bits;
	if (exp == 0) {
		if (man == 0) {
			bits = sign;
		} else {
			int e = -14;
			while (!(man & 0x400)) {
				man <<= 1;
				e--;
			}
			bits = sign | (uint32_t)(e + 127) << 23 | (man & 0x3ff) << 13;
		}
	} else if (exp == 0x1f) {
		bits = sign | 0x7f800000u | man << 13;
	} else {
		bits = sign | (exp + 127 - 15) << 23 | man << 13;
	}
	float f;
	memcpy(&f, &bits, 4);
	return f;
}

static void q8_0_rows_generic(float *dst, const uint8_t *src, long rows, long cols, long stride) {
	for (long i = 0; i < rows; i++, dst += cols, src += stride) {
		const uint8_t *b = src;
		for (long j = 0; j < cols; j += 32, b += 34) {
			float d = half_to_float((uint16_t)(b[0] | b[1] << 8));
			for (int t = 0; t < 32; t++) dst[j + t] = (float)(int8_t)b[2 + t] * d;
		}
	}
}

#if defined(__x86_64__)
// 32 quants: sign-extend 8 at a time to int32, convert, scale.
__attribute__((target("avx2")))
static void q8_0_rows_avx2(float *dst, const uint8_t *src, long rows, long cols, long stride) {
	for (long i = 0; i < rows; i++, dst += cols, src += stride) {
		const uint8_t *b = src;
		for (long j = 0; j < cols; j += 32, b += 34) {
			__m256 d = _mm256_set1_ps(half_to_float((uint16_t)(b[0] | b[1] << 8)));
			for (int t = 0; t < 32; t += 8) {
				__m256i q = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(b + 2 + t)));
				_mm256_storeu_ps(dst + j + t, _mm256_mul_ps(_mm256_cvtepi32_ps(q), d));
			}
		}
	}
}
#else
static void q8_0_rows_avx2(float *dst, const uint8_t *src, long rows, long cols, long stride) {
	q8_0_rows_generic(dst, src, rows, cols, stride);
}
#endif

void dlmc_q8_0_rows(int simd, float *dst, const uint8_t *src, long rows, long cols, long stride) {
	if (simd) q8_0_rows_avx2(dst, src, rows, cols, stride);
	else q8_0_rows_generic(dst, src, rows, cols, stride);
}
