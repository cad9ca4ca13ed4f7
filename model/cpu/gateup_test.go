package cpu

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/dlmcache/dlmcache/model/backend"
)

// TestGateUp: GateUp with BF16 weights laid out for bf16mm.c's kernel and
// with Q8_0, Q4_0 and K-quant weights (gate and up of one type, and Q4_K
// beside Q6_K, as a Q4_K_M file mixes them) gives, bit for bit, what MatMul, MatMul and
// SiLUMul give (a chunk of rows is the same sums as the whole product),
// for hidden sizes of one chunk and a partial one, several, and row
// counts around the kernels' tiles, on one thread and two; F32 weights,
// and weights of at most one chunk, are declined with dst untouched.
func TestGateUp(t *testing.T) {
	r := rand.New(rand.NewPCG(31, 32))
	weights := map[string]func(b *Backend, h, d int) (backend.Tensor, backend.Tensor){
		"bf16": func(b *Backend, h, d int) (backend.Tensor, backend.Tensor) {
			return randBF16Weight(t, b, r, h, d), randBF16Weight(t, b, r, h, d)
		},
	}
	mk := func(b *Backend, typ backend.QuantType, h, d int) backend.Tensor {
		var raw []byte
		if typ.KQuant() || typ == backend.Q5_0 {
			raw, _ = kquantWeight(t, r, typ, h, d)
		} else {
			raw, _ = quantWeight(t, r, typ, h, d)
		}
		w, err := b.WeightQuant(typ, h, d, raw)
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	for _, pair := range [][2]backend.QuantType{{backend.Q8_0, backend.Q8_0}, {backend.Q4_0, backend.Q4_0},
		{backend.Q4_K, backend.Q4_K}, {backend.Q5_K, backend.Q5_K}, {backend.Q6_K, backend.Q6_K}, {backend.Q4_K, backend.Q6_K},
		{backend.Q3_K, backend.Q3_K}, {backend.Q3_K, backend.Q4_K},
		{backend.Q5_0, backend.Q5_0}} {
		name := pair[0].String()
		if pair[1] != pair[0] {
			name += "+" + pair[1].String()
		}
		weights[name] = func(b *Backend, h, d int) (backend.Tensor, backend.Tensor) {
			return mk(b, pair[0], h, d), mk(b, pair[1], h, d)
		}
	}
	for _, threads := range []int{1, 2} {
		b := New(threads)
		for name, mk := range weights {
			if name == "bf16" && !b.dotBF16 {
				continue
			}
			if name != "bf16" && b.quantISA < 0 {
				continue
			}
			shapes := []struct{ n, d, h int }{{1, 544, 1100}, {7, 640, 2048}, {33, 1056, 2600}}
			if strings.Contains(name, "_K") { // rows of whole super-blocks
				shapes = []struct{ n, d, h int }{{1, 768, 1100}, {7, 1024, 2600}}
			}
			for _, s := range shapes {
				t.Run(fmt.Sprintf("t%d/%s/%dx%dx%d", threads, name, s.n, s.d, s.h), func(t *testing.T) {
					gate, up := mk(b, s.h, s.d)
					x := b.FromHost(s.n, s.d, randMat(r, s.n, s.d, 1))
					got := b.New(s.n, s.h)
					if !b.GateUp(got, x, gate, up) {
						t.Fatal("declined")
					}
					g, u := b.New(s.n, s.h), b.New(s.n, s.h)
					b.MatMul(g, x, gate)
					b.MatMul(u, x, up)
					b.SiLUMul(g, g, u)
					gh, wh := b.ToHost(got, nil), b.ToHost(g, nil)
					for i := range gh {
						if gh[i] != wh[i] {
							t.Fatalf("element %d: %g, the products' %g", i, gh[i], wh[i])
						}
					}
				})
			}
		}
		// Declined: F32 weights, and one chunk of rows.
		f32 := func(h, d int) backend.Tensor { return b.FromHost(h, d, randMat(r, h, d, 1)) }
		x := b.FromHost(3, 544, randMat(r, 3, 544, 1))
		dst := b.New(3, 2048)
		if b.GateUp(dst, x, f32(2048, 544), f32(2048, 544)) {
			t.Error("F32 weights: not declined")
		}
		if b.dotBF16 {
			small := b.New(3, gateUpChunk)
			if b.GateUp(small, x, randBF16Weight(t, b, r, gateUpChunk, 544), randBF16Weight(t, b, r, gateUpChunk, 544)) {
				t.Error("one chunk of rows: not declined")
			}
		}
		for i, v := range b.ToHost(dst, nil) {
			if v != 0 {
				t.Fatalf("declined GateUp wrote element %d", i)
			}
		}
	}
}
