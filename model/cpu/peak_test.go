package cpu

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"testing"
	"time"
)

func TestPeakArgs(t *testing.T) {
	for _, tc := range []struct {
		name    string
		threads int
		d       time.Duration
	}{
		{"zero threads", 0, time.Millisecond},
		{"zero duration", 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := PeakF32(tc.threads, tc.d); err == nil {
				t.Fatal("want an error")
			}
		})
	}
}

// TestPeakF32Work checks that the timed loop really runs iters rounds of
// every chain: its result must match the same recurrence c ← c·a + b
// computed in Go (lane 0 plus lane 7 of the ten-chain sum, each lane holding
// the same values). Throughput itself is not asserted (no timing thresholds).
func TestPeakF32Work(t *testing.T) {
	if _, err := PeakF32(1, time.Millisecond); errors.Is(err, ErrNoPeakKernel) {
		t.Skip(err)
	}
	for _, iters := range []int64{0, 1, 7, 1000, 100000} {
		t.Run(fmt.Sprint(iters), func(t *testing.T) {
			const a, b = float32(0.999999), float32(1e-7)
			var sum float32
			for _, c0 := range []float32{0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9} {
				c := float64(c0)
				for range iters {
					c = float64(float32(math.FMA(c, float64(a), float64(b))))
				}
				sum += float32(c)
			}
			want := 2 * sum
			got := peakF32Value(iters)
			if math.Abs(float64(got-want)) > 1e-5*math.Abs(float64(want))+1e-6 {
				t.Fatalf("peak loop after %d rounds = %g, want %g", iters, got, want)
			}
			if !HasAVX512() {
				return
			}
			// The 16-lane loop sums all its lanes.
			want = 16 * sum
			if got := peakF32x16Value(iters); math.Abs(float64(got-want)) > 1e-5*math.Abs(float64(want))+1e-6 {
				t.Fatalf("16-lane peak loop after %d rounds = %g, want %g", iters, got, want)
			}
		})
	}
	g, err := PeakF32(1, 20*time.Millisecond)
	if err != nil || !(g > 0) || math.IsInf(g, 0) {
		t.Fatalf("PeakF32 = %v, %v", g, err)
	}
}

// TestPeakInt8Work checks each int8 peak loop this CPU runs against the
// recurrence it is meant to run (every lane adds the sum of its four
// signed bytes to itself, wrapping), its chains summed lane by lane
// (wrapping), then its lanes.
func TestPeakInt8Work(t *testing.T) {
	loops := []struct {
		isa           int
		chains, lanes int
	}{{isaAVX2, peakI8AVX2Chains, 8}, {isaAVXVNNI, peakI8VNNIChains, 8}, {isaAVX512VNNI, peakI8VNNIChains, 16}}
	for _, l := range loops {
		if !quantISASupported(l.isa) {
			t.Logf("SKIPPED: the %s int8 peak loop: this CPU lacks it", isaNames[l.isa])
			continue
		}
		for _, iters := range []int64{0, 1, 5, 1000} {
			var lane int32 // every lane of the chains' sum
			for j := range l.chains {
				v := int32(uint32(peakI8Seed) * uint32(j+1))
				for range iters {
					u := uint32(v)
					v += int32(int8(u)) + int32(int8(u>>8)) + int32(int8(u>>16)) + int32(int8(u>>24))
				}
				lane += v
			}
			want := int64(l.lanes) * int64(lane)
			if got := peakI8Value(l.isa, iters); got != want {
				t.Fatalf("%s int8 peak loop after %d rounds: %d, want %d", isaNames[l.isa], iters, got, want)
			}
		}
	}
	if g, err := PeakInt8(1, 20*time.Millisecond); (err == nil) != (quantISA != isaGeneric) || err == nil && !(g > 0) {
		t.Fatalf("PeakInt8 = %v, %v (int8 products on %s)", g, err, isaNames[quantISA])
	}
}

func TestPeakBF16(t *testing.T) {
	g, err := PeakBF16(1, 20*time.Millisecond)
	if !HasBF16Dot() {
		if !errors.Is(err, ErrNoPeakKernel) {
			t.Fatalf("want ErrNoPeakKernel without AVX512-BF16, got %v", err)
		}
		return
	}
	if err != nil || g <= 0 {
		t.Fatalf("PeakBF16 = %v, %v", g, err)
	}
}

// BenchmarkPeak reports the peak on one thread and on GOMAXPROCS threads
// (names f32/threads1, f32/threadsN), the best of b.N runs, which
// scripts/bench.sh divides by: F32 FMAs, BF16 dot products (GFLOP/s) and
// the int8 products' dot products (int8, GOP/s).
func BenchmarkPeak(b *testing.B) {
	counts := slices.Compact([]int{1, runtime.GOMAXPROCS(0)})
	for _, tc := range []struct {
		name string
		f    func(int, time.Duration) (float64, error)
		unit string
	}{{"f32", PeakF32, "GFLOP/s"}, {"f32avx2", PeakF32AVX2, "GFLOP/s"}, {"bf16", PeakBF16, "GFLOP/s"}, {"int8", PeakInt8, "GOP/s"}} {
		for _, threads := range counts {
			b.Run(fmt.Sprintf("%s/threads%d", tc.name, threads), func(b *testing.B) {
				// The best of b.N runs: on a shared VM a run can lose its
				// threads' cores for a while (two threads measured one
				// core's peak in one run of four here), and a peak is
				// the most the CPU was seen to do.
				var g float64
				for range b.N {
					v, err := tc.f(threads, 200*time.Millisecond)
					if err != nil {
						b.Skip(err)
					}
					g = max(g, v)
				}
				b.ReportMetric(g, tc.unit)
			})
		}
	}
}

func TestSgemmRaw(t *testing.T) {
	before := blasThreads()
	g, err := SgemmRaw(2, 10*time.Millisecond)
	if err != nil || !(g > 0) || math.IsInf(g, 0) {
		t.Fatalf("SgemmRaw = %g, %v", g, err)
	}
	if after := blasThreads(); after != before {
		t.Errorf("OpenBLAS threads %d after, %d before", after, before)
	}
	for _, c := range []struct {
		threads int
		d       time.Duration
	}{{0, time.Millisecond}, {1, 0}} {
		if _, err := SgemmRaw(c.threads, c.d); err == nil {
			t.Errorf("SgemmRaw(%d, %v): no error", c.threads, c.d)
		}
	}
}
