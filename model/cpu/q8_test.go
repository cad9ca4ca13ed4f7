package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/dlmcache/dlmcache/model/backend"
	"github.com/dlmcache/dlmcache/model/gguf"
)

// q8Weight quantizes a random [rows, cols] matrix to Q8_0 and returns the
// raw blocks and their exact float32 values.
func q8Weight(t *testing.T, rng *rand.Rand, rows, cols int) ([]byte, []float32) {
	t.Helper()
	w := make([]float32, rows*cols)
	for i := range w {
		w[i] = float32(rng.NormFloat64())
	}
	raw, err := gguf.QuantizeQ8_0(w)
	if err != nil {
		t.Fatal(err)
	}
	deq, err := gguf.ToF32(gguf.Q8_0, raw, len(w))
	if err != nil {
		t.Fatal(err)
	}
	return raw, deq
}

// TestQ8_0Weight: products, Embed, ToHost and row views of a Q8_0 weight
// give what the same weight dequantized to float32 gives.
func TestQ8_0Weight(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, threads := range []int{1, 2} {
		b := New(threads)
		for _, sh := range [][3]int{{1, 64, 5}, {7, 96, 40}, {300, 256, 384}, {33, 4096, 20}} {
			n, in, out := sh[0], sh[1], sh[2]
			raw, deq := q8Weight(t, rng, out, in)
			wq, err := b.WeightQ8_0(out, in, raw)
			if err != nil {
				t.Fatal(err)
			}
			wf := b.FromHost(out, in, deq)
			x := make([]float32, n*in)
			for i := range x {
				x[i] = float32(rng.NormFloat64())
			}
			xs := b.FromHost(n, in, x)
			got, want := b.New(n, out), b.New(n, out)
			b.MatMul(got, xs, wq)
			b.MatMul(want, xs, wf)
			g, w := b.ToHost(got, nil), b.ToHost(want, nil)
			var scale, diff float64
			for i := range w {
				scale = max(scale, math.Abs(float64(w[i])))
				diff = max(diff, math.Abs(float64(g[i]-w[i])))
			}
			if diff > 1e-5*scale {
				t.Errorf("threads %d, %v: MatMul differs from the dequantized weight's by %g (max |y| %g)", threads, sh, diff, scale)
			}
			if h := b.ToHost(wq, nil); !equalF32(h, deq) {
				t.Errorf("%v: ToHost differs from the dequantized values", sh)
			}
			ids := []int32{int32(out - 1), 0, int32(out / 2)}
			e := b.New(len(ids), in)
			b.Embed(e, wq, ids)
			eh := b.ToHost(e, nil)
			for i, id := range ids {
				if !equalF32(eh[i*in:(i+1)*in], deq[int(id)*in:(int(id)+1)*in]) {
					t.Errorf("%v: Embed row %d differs", sh, id)
				}
			}
			if out > 2 {
				v := b.RowView(wq, 1, out-1)
				if h := b.ToHost(v, nil); !equalF32(h, deq[in:(out-1)*in]) {
					t.Errorf("%v: RowView differs", sh)
				}
			}
		}
	}
	b := New(1)
	for _, bad := range [][2]int{{2, 48}, {2, 0}, {-1, 32}} {
		if _, err := b.WeightQ8_0(bad[0], bad[1], make([]byte, 100)); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
	if _, err := b.WeightQ8_0(2, 32, make([]byte, 67)); err == nil {
		t.Error("short data: no error")
	}
	var _ backend.Q8Weighter = b
}

// TestQ8_0RowsGeneric: the AVX2 decoder and the plain C one agree bit for
// bit (the Go test machine runs the one it has; this runs both).
func TestQ8_0RowsGeneric(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	raw, deq := q8Weight(t, rng, 5, 128)
	w := &Tensor{rows: 5, cols: 128, stride: 128, q8: raw, q8Stride: 4 * 34}
	for _, s := range []bool{false, true} {
		dst := make([]float32, 5*128)
		q8RowsWith(s, dst, w, 0, 5)
		if !equalF32(dst, deq) {
			t.Errorf("simd %v: decoded values differ from gguf's", s)
		}
	}
}

func equalF32(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}
