// peak.c: the peak-FLOP probes, chains of independent vector operations
// long enough to keep the FMA (or vdpbf16ps) ports busy.
#include <stdint.h>
#include <string.h>

#include "kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>

// PEAK_CHAINS declares ten accumulators c0..c9 of type VEC, runs iters
// rounds of OP(c, a, b) on each (independent chains, enough to cover a
// 4–5-cycle latency on two ports) and leaves their sum, which depends on
// every chain so the compiler cannot drop the work, in s.
#define PEAK_CHAINS(VEC, SET1, OP, ADD) \
	VEC c0 = SET1(0.0f), c1 = SET1(0.1f), c2 = SET1(0.2f), c3 = SET1(0.3f), \
		c4 = SET1(0.4f), c5 = SET1(0.5f), c6 = SET1(0.6f), c7 = SET1(0.7f), \
		c8 = SET1(0.8f), c9 = SET1(0.9f); \
	for (long i = 0; i < iters; i++) { \
		c0 = OP(c0, a, b); c1 = OP(c1, a, b); c2 = OP(c2, a, b); \
		c3 = OP(c3, a, b); c4 = OP(c4, a, b); c5 = OP(c5, a, b); \
		c6 = OP(c6, a, b); c7 = OP(c7, a, b); c8 = OP(c8, a, b); \
		c9 = OP(c9, a, b); \
	} \
	VEC s = ADD(ADD(ADD(c0, c1), ADD(c2, c3)), \
		ADD(ADD(c4, c5), ADD(ADD(c6, c7), ADD(c8, c9))));

// dlmc_peak_f32_fma: 8-wide FMA chains, 10 × 8 × 2 = 160 operations a round.
__attribute__((target("avx2,fma")))
float dlmc_peak_f32_fma(long iters) {
	__m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
	PEAK_CHAINS(__m256, _mm256_set1_ps, _mm256_fmadd_ps, _mm256_add_ps)
	float out[8];
	_mm256_storeu_ps(out, s);
	return out[0] + out[7];
}

// dlmc_peak_f32_fma512: 16-wide FMA chains, 10 × 16 × 2 = 320 operations a
// round.
__attribute__((target("avx512f")))
float dlmc_peak_f32_fma512(long iters) {
	__m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
	PEAK_CHAINS(__m512, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_add_ps)
	return _mm512_reduce_add_ps(s);
}

// dlmc_peak_bf16_dp: 512-bit vdpbf16ps chains; each instruction does 32 BF16 pair
// products summed into 16 F32 lanes, 64 operations. Twice PEAK_CHAINS's
// ten (the pair of blocks below is interleaved by the compiler): with
// ten, Zen 5 measured 320 GFLOP/s a core, less than oneDNN's BF16 matmul
// reached on two, so ten chains do not cover vdpbf16ps's latency there.
// 1280 operations a round.
__attribute__((target("avx512f,avx512bf16")))
float dlmc_peak_bf16_dp(long iters) {
	__m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80), b = (__m512bh)_mm512_set1_epi16(0x3380);
	__m512 c[20];
	for (int j = 0; j < 20; j++) c[j] = _mm512_set1_ps(0.05f * j);
	for (long i = 0; i < iters; i++) {
#pragma GCC unroll 20
		for (int j = 0; j < 20; j++) c[j] = _mm512_dpbf16_ps(c[j], a, b);
	}
	__m512 s = c[0];
	for (int j = 1; j < 20; j++) s = _mm512_add_ps(s, c[j]);
	return _mm512_reduce_add_ps(s);
}

// The int8 peaks: chains of the dot products the int8 weight products run
// (quant.c), unsigned bytes times signed bytes summed four at a time into
// 32-bit lanes, 2 operations (multiply, add) a byte pair. Each chain's
// own bytes are the signed operand (the unsigned one all ones), so no
// step can be hoisted or shared between chains: every lane adds the sum
// of its four signed bytes to itself, a recurrence the Go side checks
// (TestPeakInt8Work). The chains' sum (32-bit lanes, wrapping), summed
// over its lanes, is returned: it depends on every chain.
//
// PEAK_I8 defines the loop NAME for TARGET: CHAINS vectors VEC of LANES
// 32-bit lanes, STEP(x, ones) a step of one chain (ones: every byte 1).
#define PEAK_I8(NAME, TARGET, CHAINS, VEC, LANES, SET1_8, SET1_32, ADD, STEP) \
	__attribute__((target(TARGET))) long NAME(long iters) { \
		const VEC ones = SET1_8(1); \
		VEC c[CHAINS]; \
		for (int j = 0; j < CHAINS; j++) c[j] = SET1_32((int32_t)(PEAK_I8_SEED * (uint32_t)(j + 1))); \
		for (long i = 0; i < iters; i++) { \
			_Pragma("GCC unroll 20") \
			for (int j = 0; j < CHAINS; j++) c[j] = STEP(c[j], ones); \
		} \
		VEC acc = c[0]; \
		_Pragma("GCC unroll 20") \
		for (int j = 1; j < CHAINS; j++) acc = ADD(acc, c[j]); \
		int32_t lanes[LANES]; \
		memcpy(lanes, &acc, sizeof lanes); \
		long sum = 0; \
		for (int l = 0; l < LANES; l++) sum += lanes[l]; \
		return sum; \
	}

// dlmc_peak_i8_vnni512: 512-bit vpdpbusd, 64 byte pairs (128 operations)
// an instruction; dlmc_peak_i8_avxvnni: 256-bit vpdpbusd (AVX-VNNI), 32;
// dlmc_peak_i8_avx2: AVX2's three-instruction form of the same dot
// product (vpmaddubsw into 16-bit pair sums, vpmaddwd by ones into 32-bit
// lanes, vpaddd), 32 byte pairs a round of the three, on twelve chains
// (sixteen registers).
#define STEP_VNNI512(x, ones) _mm512_dpbusd_epi32(x, ones, x)
#define STEP_AVXVNNI(x, ones) _mm256_dpbusd_avx_epi32(x, ones, x)
#define STEP_AVX2(x, ones) _mm256_add_epi32(x, _mm256_madd_epi16(_mm256_maddubs_epi16(ones, x), _mm256_set1_epi16(1)))
PEAK_I8(dlmc_peak_i8_vnni512, "avx512f,avx512vnni", DLMC_PEAK_I8_VNNI_CHAINS, __m512i, 16, _mm512_set1_epi8, _mm512_set1_epi32, _mm512_add_epi32, STEP_VNNI512)
PEAK_I8(dlmc_peak_i8_avxvnni, "avx2,avxvnni", DLMC_PEAK_I8_VNNI_CHAINS, __m256i, 8, _mm256_set1_epi8, _mm256_set1_epi32, _mm256_add_epi32, STEP_AVXVNNI)
PEAK_I8(dlmc_peak_i8_avx2, "avx2", DLMC_PEAK_I8_AVX2_CHAINS, __m256i, 8, _mm256_set1_epi8, _mm256_set1_epi32, _mm256_add_epi32, STEP_AVX2)
#undef PEAK_I8
#else
// Not x86-64: dlmc_have_* are 0, so the Go side never runs these.
long dlmc_peak_i8_vnni512(long iters) { (void)iters; return 0; }
long dlmc_peak_i8_avxvnni(long iters) { (void)iters; return 0; }
long dlmc_peak_i8_avx2(long iters) { (void)iters; return 0; }
float dlmc_peak_f32_fma(long iters) { (void)iters; return 0; }
float dlmc_peak_f32_fma512(long iters) { (void)iters; return 0; }
float dlmc_peak_bf16_dp(long iters) { (void)iters; return 0; }
#endif
