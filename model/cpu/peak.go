package cpu

/*
#cgo CFLAGS: -O2
#include <immintrin.h>
#include <stdint.h>

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

// peak_f32_fma: 8-wide FMA chains, 10 × 8 × 2 = 160 operations a round.
__attribute__((target("avx2,fma")))
static float peak_f32_fma(long iters) {
	__m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
	PEAK_CHAINS(__m256, _mm256_set1_ps, _mm256_fmadd_ps, _mm256_add_ps)
	float out[8];
	_mm256_storeu_ps(out, s);
	return out[0] + out[7];
}

// peak_f32_fma512: 16-wide FMA chains, 10 × 16 × 2 = 320 operations a
// round.
__attribute__((target("avx512f")))
static float peak_f32_fma512(long iters) {
	__m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
	PEAK_CHAINS(__m512, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_add_ps)
	return _mm512_reduce_add_ps(s);
}

// peak_bf16_dp: 512-bit vdpbf16ps chains; each instruction does 32 BF16 pair
// products summed into 16 F32 lanes, 64 operations. Twice PEAK_CHAINS's
// ten (the pair of blocks below is interleaved by the compiler): with
// ten, Zen 5 measured 320 GFLOP/s a core, less than oneDNN's BF16 matmul
// reached on two, so ten chains do not cover vdpbf16ps's latency there.
// 1280 operations a round.
__attribute__((target("avx512f,avx512bf16")))
static float peak_bf16_dp(long iters) {
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

static int has_fma(void) {
	__builtin_cpu_init();
	return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

static int has_avx512(void) {
	__builtin_cpu_init();
	return __builtin_cpu_supports("avx512f");
}

static int has_bf16(void) {
	__builtin_cpu_init();
	return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16");
}
*/
import "C"

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"time"
)

// Peak floating-point throughput of this CPU, measured by tight register-only
// loops (no memory traffic): the ceiling that every figure of `make bench` is
// reported against.
const (
	peakF32OpsPerIter  = 10 * 8 * 2  // 10 FMA chains × 8 lanes × (mul + add)
	peakF32x16OpsPer   = 10 * 16 * 2 // the same with 16 lanes (AVX-512)
	peakBF16OpsPerIter = 20 * 32 * 2 // 20 vdpbf16ps chains × 32 pairs × (mul + add)
)

// ErrNoPeakKernel says the CPU lacks the instructions a peak loop needs.
var ErrNoPeakKernel = errors.New("cpu: this CPU lacks the instructions for the peak loop")

// HasBF16Dot reports whether the CPU has AVX512-BF16 (vdpbf16ps).
func HasBF16Dot() bool { return C.has_bf16() != 0 }

// PeakF32 measures F32 FMA throughput in GFLOP/s on threads OS threads
// running at once, each for about d: 16-lane AVX-512 FMAs where the CPU
// has AVX-512F, else 8-lane AVX2 ones. On CPUs that run a 512-bit FMA as
// two 256-bit halves the two widths measure the same; where they differ,
// the wider one is the processor's peak.
func PeakF32(threads int, d time.Duration) (float64, error) {
	if HasAVX512() {
		return peakRun(threads, d, peakF32x16OpsPer, func(n int64) { C.peak_f32_fma512(C.long(n)) })
	}
	return PeakF32AVX2(threads, d)
}

// PeakF32AVX2 is PeakF32 with 8-lane AVX2 FMAs only: the ceiling of
// OpenBLAS's Haswell kernels.
func PeakF32AVX2(threads int, d time.Duration) (float64, error) {
	if C.has_fma() == 0 {
		return 0, fmt.Errorf("%w: AVX2 and FMA", ErrNoPeakKernel)
	}
	return peakRun(threads, d, peakF32OpsPerIter, func(n int64) { C.peak_f32_fma(C.long(n)) })
}

// The raw sgemm's shape (SgemmRaw, BenchmarkSgemmRaw, make bench).
const sgemmRawM, sgemmRawK, sgemmRawN = 512, 2048, 2048

// SgemmRaw measures the linked OpenBLAS's own sgemm, C = A·Bᵀ at
// 512 × 2048 × 2048 (BenchmarkSgemmRaw's shape), on threads of its threads,
// calls repeated for about d after one to warm up: total FLOPs over total
// time, in GFLOP/s. It is the reference the serving target divides
// the server's GFLOP/s by, measured next to the run it judges (this
// project's VMs move it by ±20% over minutes). OpenBLAS's thread count is
// process-wide: it is set back when done, so nothing else should run
// products meanwhile.
func SgemmRaw(threads int, d time.Duration) (float64, error) {
	if threads < 1 || d <= 0 {
		return 0, fmt.Errorf("cpu: sgemm needs a thread and a positive duration, got %d, %v", threads, d)
	}
	const m, k, n = sgemmRawM, sgemmRawK, sgemmRawN
	r := rand.New(rand.NewPCG(2, 2))
	a, b, c := make([]float32, m*k), make([]float32, n*k), make([]float32, m*n)
	for i := range a {
		a[i] = float32(r.NormFloat64())
	}
	for i := range b {
		b[i] = float32(r.NormFloat64())
	}
	defer blasSetThreads(blasThreads())
	blasSetThreads(threads)
	sgemmNT(m, n, k, 1, a, k, b, k, 0, c, n)
	calls, t := 0, time.Now()
	for calls == 0 || time.Since(t) < d {
		sgemmNT(m, n, k, 1, a, k, b, k, 0, c, n)
		calls++
	}
	return float64(calls) * 2 * m * n * k / time.Since(t).Seconds() / 1e9, nil
}

// HasAVX512 reports whether the CPU has AVX-512F.
func HasAVX512() bool { return C.has_avx512() != 0 }

// PeakBF16 measures BF16 dot-product throughput (AVX512-BF16 vdpbf16ps, BF16
// products accumulated in F32) in GFLOP/s; ErrNoPeakKernel where the CPU
// lacks it.
func PeakBF16(threads int, d time.Duration) (float64, error) {
	if !HasBF16Dot() {
		return 0, fmt.Errorf("%w: AVX512-BF16", ErrNoPeakKernel)
	}
	return peakRun(threads, d, peakBF16OpsPerIter, func(n int64) { C.peak_bf16_dp(C.long(n)) })
}

// peakRun calibrates the iteration count on one thread to last about d, then
// runs it on every thread at once (each locked to its OS thread) and divides
// the total operations by the slowest thread's wall time.
func peakRun(threads int, d time.Duration, opsPerIter float64, loop func(int64)) (float64, error) {
	if threads < 1 {
		return 0, fmt.Errorf("cpu: peak needs at least one thread, got %d", threads)
	}
	if d <= 0 {
		return 0, fmt.Errorf("cpu: peak duration must be positive, got %v", d)
	}
	iters := int64(1 << 16)
	for {
		t := time.Now()
		loop(iters)
		if el := time.Since(t); el >= d/4 {
			iters = int64(float64(iters) * float64(d) / float64(el))
			break
		}
		iters *= 4
	}
	var wg sync.WaitGroup
	start := make(chan struct{})
	times := make([]time.Duration, threads)
	for i := range threads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			<-start
			t := time.Now()
			loop(iters)
			times[i] = time.Since(t)
		}()
	}
	close(start)
	wg.Wait()
	slowest := slices.Max(times)
	ops := opsPerIter * float64(iters) * float64(threads)
	return ops / slowest.Seconds() / 1e9, nil
}

// peakF32Value runs the F32 peak loop for iters rounds and returns its
// result, for tests that check the loop does the work it is timed for.
func peakF32Value(iters int64) float32 { return float32(C.peak_f32_fma(C.long(iters))) }

// peakF32x16Value is peakF32Value for the 16-lane loop (AVX-512F only).
func peakF32x16Value(iters int64) float32 { return float32(C.peak_f32_fma512(C.long(iters))) }
