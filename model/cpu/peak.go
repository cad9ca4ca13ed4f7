package cpu

/*
#include "kernels.h"
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
func HasBF16Dot() bool { return isaCap >= ISANative && C.dlmc_have_avx512bf16() != 0 }

// PeakF32 measures F32 FMA throughput in GFLOP/s on threads OS threads
// running at once, each for about d: 16-lane AVX-512 FMAs where the CPU
// has AVX-512F, else 8-lane AVX2 ones. On CPUs that run a 512-bit FMA as
// two 256-bit halves the two widths measure the same; where they differ,
// the wider one is the processor's peak.
func PeakF32(threads int, d time.Duration) (float64, error) {
	if HasAVX512() {
		return peakRun(threads, d, peakF32x16OpsPer, func(n int64) { C.dlmc_peak_f32_fma512(C.long(n)) })
	}
	return PeakF32AVX2(threads, d)
}

// PeakF32AVX2 is PeakF32 with 8-lane AVX2 FMAs only: the ceiling of
// OpenBLAS's Haswell kernels.
func PeakF32AVX2(threads int, d time.Duration) (float64, error) {
	if !simd {
		return 0, fmt.Errorf("%w: AVX2 and FMA", ErrNoPeakKernel)
	}
	return peakRun(threads, d, peakF32OpsPerIter, func(n int64) { C.dlmc_peak_f32_fma(C.long(n)) })
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
func HasAVX512() bool { return avx512 }

// PeakBF16 measures BF16 dot-product throughput (AVX512-BF16 vdpbf16ps, BF16
// products accumulated in F32) in GFLOP/s; ErrNoPeakKernel where the CPU
// lacks it.
func PeakBF16(threads int, d time.Duration) (float64, error) {
	if !HasBF16Dot() {
		return 0, fmt.Errorf("%w: AVX512-BF16", ErrNoPeakKernel)
	}
	return peakRun(threads, d, peakBF16OpsPerIter, func(n int64) { C.dlmc_peak_bf16_dp(C.long(n)) })
}

// The int8 peak loops' chains and the seed of their lanes (peak.c), and
// their operations a round: chains × byte pairs × 2.
const (
	peakI8VNNIChains = C.DLMC_PEAK_I8_VNNI_CHAINS
	peakI8AVX2Chains = C.DLMC_PEAK_I8_AVX2_CHAINS
	peakI8Seed       = C.PEAK_I8_SEED
	peakI8VNNI512Ops = peakI8VNNIChains * 64 * 2
	peakI8AVXVNNIOps = peakI8VNNIChains * 32 * 2
	peakI8AVX2Ops    = peakI8AVX2Chains * 32 * 2
)

// PeakInt8 measures the int8 dot-product throughput (unsigned × signed
// bytes summed into 32-bit lanes, as the Q8_0 and Q4_0 products run them)
// in GOP/s, multiply and add counted apart as for the FLOP peaks, on the
// instructions the int8 products use here (PeakInt8ISA): vpdpbusd on
// zmm (AVX512-VNNI) or ymm (AVX-VNNI), else AVX2's vpmaddubsw, vpmaddwd
// and vpaddd; ErrNoPeakKernel without AVX2.
func PeakInt8(threads int, d time.Duration) (float64, error) {
	switch quantISA {
	case isaAVX512VNNI:
		return peakRun(threads, d, peakI8VNNI512Ops, func(n int64) { C.dlmc_peak_i8_vnni512(C.long(n)) })
	case isaAVXVNNI:
		return peakRun(threads, d, peakI8AVXVNNIOps, func(n int64) { C.dlmc_peak_i8_avxvnni(C.long(n)) })
	case isaAVX2:
		return peakRun(threads, d, peakI8AVX2Ops, func(n int64) { C.dlmc_peak_i8_avx2(C.long(n)) })
	}
	return 0, fmt.Errorf("%w: AVX2 int8 dot products", ErrNoPeakKernel)
}

// PeakInt8ISA names the instructions PeakInt8 times (the int8 products').
func PeakInt8ISA() string { return isaNames[quantISA] }

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
		wg.Go(func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			<-start
			t := time.Now()
			loop(iters)
			times[i] = time.Since(t)
		})
	}
	close(start)
	wg.Wait()
	slowest := slices.Max(times)
	ops := opsPerIter * float64(iters) * float64(threads)
	return ops / slowest.Seconds() / 1e9, nil
}

// peakF32Value runs the F32 peak loop for iters rounds and returns its
// result, for tests that check the loop does the work it is timed for.
func peakF32Value(iters int64) float32 { return float32(C.dlmc_peak_f32_fma(C.long(iters))) }

// peakF32x16Value is peakF32Value for the 16-lane loop (AVX-512F only).
func peakF32x16Value(iters int64) float32 { return float32(C.dlmc_peak_f32_fma512(C.long(iters))) }

// peakI8Value runs the int8 peak loop of isa (isaAVX2, isaAVXVNNI,
// isaAVX512VNNI) for iters rounds and returns its sum over chains and
// lanes, for tests that check the loop does the work it is timed for.
func peakI8Value(isa int, iters int64) int64 {
	switch isa {
	case isaAVX512VNNI:
		return int64(C.dlmc_peak_i8_vnni512(C.long(iters)))
	case isaAVXVNNI:
		return int64(C.dlmc_peak_i8_avxvnni(C.long(iters)))
	}
	return int64(C.dlmc_peak_i8_avx2(C.long(iters)))
}
