package sumexp

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestSumMatchesMathExp: the AVX2 sum against math.Exp's, term by term and summed, over
// logit-like rows, rows reaching the ends of e^x's range, and a NaN.
func TestSumMatchesMathExp(t *testing.T) {
	if !vector {
		t.Skip("no AVX2: Sum is math.Exp's sum")
	}
	r := rand.New(rand.NewPCG(1, 2))
	rows := [][]float32{}
	for _, n := range []int{16, 17, 2048, 2051} {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(r.NormFloat64() * 8)
		}
		rows = append(rows, x)
	}
	wide := make([]float32, 64)
	for i := range wide {
		wide[i] = float32(-760 + 25*float64(i)) // −760 … +815
	}
	rows = append(rows, wide)
	for k, x := range rows {
		m := math.Inf(-1)
		for _, v := range x {
			m = max(m, float64(v))
		}
		for _, shift := range []float64{m, 0, -1} {
			got, want := Sum(x, shift), sumGo(x, shift)
			if !(math.Abs(got-want) <= 1e-14*want) && !(math.IsInf(got, 1) && math.IsInf(want, 1)) {
				t.Errorf("row %d (n %d), m %g: Sum %v, math.Exp's %v (relative %.3g)", k, len(x), shift, got, want, math.Abs(got-want)/want)
			}
		}
	}
	// Term by term: each e^x within 2 ulp of math.Exp (0 where it is subnormal).
	for x := -708.0; x < 709.7; x += 0.37 {
		one := make([]float32, 16)
		v := float32(x)
		one[0] = v
		for i := 1; i < 16; i++ {
			one[i] = -1000 // e^(−1000 − m) = 0 in both
		}
		got, want := Sum(one, 0), math.Exp(float64(v))
		if math.Abs(got-want) > 2*ulp(want) {
			t.Fatalf("e^%v = %v, math.Exp %v", v, got, want)
		}
	}
	nan := make([]float32, 20)
	nan[5] = float32(math.NaN())
	if s := Sum(nan, 0); !math.IsNaN(s) {
		t.Errorf("a NaN term summed to %v", s)
	}
}

func ulp(x float64) float64 { return math.Nextafter(x, math.Inf(1)) - x }

func BenchmarkSum(b *testing.B) {
	x := make([]float32, 2048)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range x {
		x[i] = float32(r.NormFloat64() * 8)
	}
	for _, impl := range []struct {
		name string
		f    func([]float32, float64) float64
	}{{"avx2", Sum}, {"math.Exp", sumGo}} {
		b.Run(impl.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				impl.f(x, 10)
			}
		})
	}
}
