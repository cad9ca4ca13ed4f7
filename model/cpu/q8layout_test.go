package cpu

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/dlmcache/dlmcache/model/backend"
)

// TestQ8Layout: a Q8_0 weight laid out at load (q8Layout) multiplies bit
// for bit as the same blocks packed per product do, from the first
// column and from a later group of 16, over shapes that cut the tiles
// (rows of w not a multiple of 16 or 64, rows of x not of 4, rows longer
// than one pack of ZPACK_BLOCKS); its file bytes are no longer read by
// products (AliasesRaw), ToHost, Embed and views still read them, and
// MarkTable drops the layout.
func TestQ8Layout(t *testing.T) {
	b := NewWithOptions(Options{Threads: 2, PackWeights: true})
	if b.quantISA != isaAVX512VNNI {
		t.Skipf("the layout is AVX512-VNNI's; int8 products here: %s", isaNames[max(b.quantISA, 0)])
	}
	rng := rand.New(rand.NewPCG(21, 22))
	for _, sh := range [][3]int{{1, 544, 16}, {5, 1056, 33}, {13, 2048, 100}, {4, 4096, 130}, {52, 1088, 64}} {
		n, in, out := sh[0], sh[1], sh[2]
		raw, deq := quantWeight(t, rng, backend.Q8_0, out, in)
		wt, err := b.WeightQuant(backend.Q8_0, out, in, raw)
		if err != nil {
			t.Fatal(err)
		}
		w := wt.(*Tensor)
		if w.q8l == nil || w.AliasesRaw() {
			t.Fatalf("%v: not laid out (aliases raw %v)", sh, w.AliasesRaw())
		}
		plain := &Tensor{rows: out, cols: in, stride: in, q: raw, qStride: w.qStride, qType: backend.Q8_0, readOnly: true}
		x := make([]float32, n*in)
		for i := range x {
			x[i] = float32(rng.NormFloat64() * 2)
		}
		q, d := make([]byte, n*in), make([]float32, n*in/32)
		quantizeAct(isaAVX512VNNI, q, d, nil, x, n, in, in)
		for _, j0 := range []int{0, 16} {
			if j0 >= out {
				continue
			}
			cols := out - j0
			want, got := make([]float32, n*cols), make([]float32, n*cols)
			qMatMul(isaAVX512VNNI, n, cols, in, q, d, nil, plain, j0, want, cols, make([]byte, qPackBytes))
			qMatMul(isaAVX512VNNI, n, cols, in, q, d, nil, w, j0, got, cols, make([]byte, qPackBytes+3)[3:])
			if !equalF32(got, want) {
				t.Fatalf("%v from column %d: the laid-out product differs from the packed one", sh, j0)
			}
		}
		// Through MatMul, split over the backend's threads.
		xs := b.FromHost(n, in, x)
		g1, g2 := b.New(n, out), b.New(n, out)
		b.MatMul(g1, xs, w)
		b.MatMul(g2, xs, plain)
		if !equalF32(b.ToHost(g1, nil), b.ToHost(g2, nil)) {
			t.Fatalf("%v: MatMul on the layout differs", sh)
		}
		c := quantCase{typ: backend.Q8_0, sh: sh, in: in, out: out, deq: deq, wq: w}
		c.checkValues(t, b)
		b.MarkTable(w)
		if w.q8l != nil || !w.AliasesRaw() || b.q8LaidOut.Load() != 0 {
			t.Fatalf("%v: after MarkTable: layout %v, aliases raw %v, %d bytes laid out", sh, w.q8l != nil, w.AliasesRaw(), b.q8LaidOut.Load())
		}
	}
	// Not laid out: under DLMCACHE_CPU_WEIGHTS=mapped, and Q4_0.
	m := NewWithOptions(Options{Threads: 2})
	raw, _ := quantWeight(t, rng, backend.Q8_0, 32, 1024)
	if w, _ := m.WeightQuant(backend.Q8_0, 32, 1024, raw); w.(*Tensor).q8l != nil {
		t.Error("laid out without PackWeights")
	}
	raw, _ = quantWeight(t, rng, backend.Q4_0, 32, 1024)
	if w, _ := b.WeightQuant(backend.Q4_0, 32, 1024, raw); w.(*Tensor).q8l != nil {
		t.Error("a Q4_0 weight laid out")
	}
	raw, _ = quantWeight(t, rng, backend.Q8_0, 32, 1024)
	if _, err := b.WeightQuant(backend.Q8_0, 32, 1024, raw); err != nil || !strings.Contains(b.GEMM(), "Q8_0 weights laid out") {
		t.Errorf("GEMM %q does not say Q8_0 weights are laid out (%v)", b.GEMM(), err)
	}
}
