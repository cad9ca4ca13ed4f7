package model

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/dlmcache/dlmcache/model/backend"
	"github.com/dlmcache/dlmcache/model/cpu"
)

// The attention weights the forward shows a plan: the backend path equals
// the plain Go reference, each row sums to one, and each head's weights
// times V give the backend's fused Attention output.
func TestAttentionWeights(t *testing.T) {
	b := cpu.New(1)
	rng := rand.New(rand.NewPCG(1, 2))
	r, n, hd := 5, 9, 8
	for _, heads := range [][2]int{{1, 1}, {4, 2}, {4, 4}} {
		nh, nkv := heads[0], heads[1]
		q := randSlice(rng, r*nh*hd)
		k := randSlice(rng, n*nkv*hd)
		v := randSlice(rng, n*nkv*hd)
		want := AttentionWeights(q, k, r, n, nh, nkv, hd)
		qt, kt := b.FromHost(r, nh*hd, q), b.FromHost(n, nkv*hd, k)
		// The CPU backend's kernel, and the host path other backends take.
		for _, bk := range []backend.Backend{b, struct{ backend.Backend }{b}} {
			got := attentionProbs(bk, qt, kt, nh, nkv, hd)
			for i := range want {
				if math.Abs(float64(got[i]-want[i])) > 1e-5 {
					t.Fatalf("heads %v, %T: weight %d: %g, reference %g", heads, bk, i, got[i], want[i])
				}
			}
		}
		for i := 0; i < r; i++ {
			var s float64
			for _, w := range want[i*n : (i+1)*n] {
				s += float64(w)
			}
			if math.Abs(s-1) > 1e-5 {
				t.Errorf("heads %v: row %d sums to %g", heads, i, s)
			}
		}
		// Head by head against the fused kernel.
		att := b.New(r, nh*hd)
		b.Attention(att, qt, kt, b.FromHost(n, nkv*hd, v), nh, nkv)
		out := b.ToHost(att, nil)
		for h := 0; h < nh; h++ {
			g := h / (nh / nkv)
			w := AttentionWeights(columns(q, r, nh*hd, h*hd, hd), columns(k, n, nkv*hd, g*hd, hd), r, n, 1, 1, hd)
			for i := 0; i < r; i++ {
				for c := 0; c < hd; c++ {
					var s float64
					for j := 0; j < n; j++ {
						s += float64(w[i*n+j]) * float64(v[j*nkv*hd+g*hd+c])
					}
					if got := out[i*nh*hd+h*hd+c]; math.Abs(s-float64(got)) > 1e-4 {
						t.Fatalf("heads %v: head %d row %d col %d: weights·V %g, Attention %g", heads, h, i, c, s, got)
					}
				}
			}
		}
	}
}

func randSlice(rng *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	return x
}
