package cpu

import (
	"errors"
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

// TestPeakF32AboveSgemm: the register-only FMA loop must run at least as fast
// as a real sgemm (which is bounded by the same FMA units plus memory), a
// check that fails if the loop's operation count or timing is wrong.
func TestPeakF32AboveSgemm(t *testing.T) {
	peak, err := PeakF32(1, 50*time.Millisecond)
	if errors.Is(err, ErrNoPeakKernel) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	const m, n, k = 128, 256, 256
	a, b, c := make([]float32, m*k), make([]float32, n*k), make([]float32, m*n)
	defer blasSetThreads(blasThreads())
	blasSetThreads(1)
	const reps = 20
	start := time.Now()
	for range reps {
		sgemmNT(m, n, k, 1, a, k, b, k, 0, c, n)
	}
	sgemm := 2 * m * n * k * reps / time.Since(start).Seconds() / 1e9
	// A 10% margin for noise on a shared machine.
	if peak < 0.9*sgemm {
		t.Fatalf("peak %.1f GFLOP/s below sgemm %.1f GFLOP/s", peak, sgemm)
	}
	t.Logf("peak F32 %.1f GFLOP/s, sgemm %.1f GFLOP/s (1 thread)", peak, sgemm)
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

func BenchmarkPeak(b *testing.B) {
	for _, tc := range []struct {
		name string
		f    func(int, time.Duration) (float64, error)
	}{{"f32", PeakF32}, {"bf16", PeakBF16}} {
		b.Run(tc.name, func(b *testing.B) {
			var g float64
			for range b.N {
				var err error
				if g, err = tc.f(1, 200*time.Millisecond); err != nil {
					b.Skip(err)
				}
			}
			b.ReportMetric(g, "GFLOP/s")
		})
	}
}
