package cpu

import (
	"math/rand/v2"
	"strings"
	"testing"
	"unsafe"

	"github.com/dlmcache/dlmcache/model/backend"
	"github.com/dlmcache/dlmcache/model/safetensors"
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

// TestWGLayout: an F32, F16 or BF16 weight laid out at load for the
// blocked panel kernel (wgLayout; a 16-bit one kept 16-bit) multiplies bit
// for bit as the same weight packed per product does, over shapes that
// cut its blocks (rows not a multiple of 16, 8 or DLMC_WG_NB, columns not
// of DLMC_WG_KC or of 8) and through a view (which reads the mapped
// values); its bytes are released (AliasesRaw), a weight in the map
// permuted keeps its layout and a copy permuted is laid out again, the
// products moved to the new row order either way, and MarkTable drops
// the layout.
func TestWGLayout(t *testing.T) {
	if !simd {
		t.Skip("no AVX2+FMA: the blocked panel kernel does not run here")
	}
	laid := NewWithOptions(Options{Threads: 2, GEMM: GEMMOpenBLAS, PackWeights: true})
	plain := NewWithOptions(Options{Threads: 2, GEMM: GEMMOpenBLAS})
	if !laid.panel {
		t.Skip("the panel kernel is off")
	}
	// BF16 weights on the blocked panel kernel, as on a CPU without
	// AVX512-BF16 (where bf16mm.c's kernel takes them).
	laid.dotBF16, plain.dotBF16 = false, false
	rng := rand.New(rand.NewPCG(23, 24))
	for _, typ := range []backend.DType{backend.F32, backend.F16, backend.BF16} {
		for _, sh := range [][3]int{{1, 1040, 16}, {7, 1100, 65}, {52, 1536, 130}, {200, 2080, 64}, {3, 1029, 37}} {
			n, in, out := sh[0], sh[1], sh[2]
			wf := randMat(rng, out, in, 1)
			raw := weightBytes(typ, wf)
			wl, err := laid.Weight(typ, out, in, raw)
			if err != nil {
				t.Fatal(err)
			}
			wp, _ := plain.Weight(typ, out, in, raw)
			lt := wl.(*Tensor)
			if lt.wgl == nil || lt.AliasesRaw() || wp.(*Tensor).wgl != nil || (typ == backend.F16) != lt.F16() || (typ == backend.BF16) != lt.BF16() {
				t.Fatalf("%v %v: laid out %v (aliases raw %v), without PackWeights %v; kept F16 %v, BF16 %v",
					typ, sh, lt.wgl != nil, lt.AliasesRaw(), wp.(*Tensor).wgl != nil, lt.F16(), lt.BF16())
			}
			x := randMat(rng, n, in, 1)
			product := func(b *Backend, w backend.Tensor, cols int) []float32 {
				d := b.New(n, cols)
				b.MatMul(d, b.FromHost(n, in, x), w)
				return b.ToHost(d, nil)
			}
			if !equalF32(product(laid, wl, out), product(plain, wp, out)) {
				t.Fatalf("%v %v: the laid-out product differs from the packed one", typ, sh)
			}
			if v := laid.RowView(wl, 1, out); !equalF32(product(laid, v, out-1), product(plain, plain.RowView(wp, 1, out), out-1)) {
				t.Fatalf("%v %v: a view's product differs", typ, sh)
			}
			perm := make([]int32, out)
			for i, p := range rng.Perm(out) {
				perm[i] = int32(p)
			}
			moved := make([]float32, len(wf))
			for s, p := range perm {
				copy(moved[int(p)*in:(int(p)+1)*in], wf[s*in:(s+1)*in])
			}
			if typ == backend.F32 {
				// A copy (an unaligned weight's) permuted: its rows
				// reordered in place and laid out again.
				cp := laid.FromHost(out, in, wf).(*Tensor)
				laid.layOutWG(cp)
				if !laid.PermuteRows(cp, perm) || cp.wgl == nil {
					t.Fatalf("%v: a laid-out copy not permuted, or not laid out again", sh)
				}
				if !equalF32(product(laid, cp, out), product(plain, plain.FromHost(out, in, moved), out)) {
					t.Fatalf("%v: the permuted copy's product differs", sh)
				}
			} else {
				// A weight in the map permuted: the layout kept, the
				// products' columns moved (the 16-bit values convert
				// exactly, so the F32 product of the moved rows is the same).
				pw, _ := laid.Weight(typ, out, in, raw)
				if !laid.PermuteRows(pw, perm) || pw.(*Tensor).wgl == nil {
					t.Fatalf("%v %v: a laid-out weight not permuted, or its layout dropped", typ, sh)
				}
				wantH := product(plain, plain.FromHost(out, in, plain.ToHost(mustWeight(t, plain, typ, out, in, weightBytes(typ, moved)), nil)), out)
				if !equalF32(product(laid, pw, out), wantH) {
					t.Fatalf("%v %v: the permuted weight's product differs", typ, sh)
				}
			}
			laid.MarkTable(wl)
			if lt.wgl != nil || !lt.AliasesRaw() {
				t.Fatalf("%v %v: MarkTable kept the layout", typ, sh)
			}
		}
	}
}

// weightBytes is f as a checkpoint of type typ (F32, F16 or BF16) holds
// it: f's own bytes for F32, rounded to nearest for the 16-bit types.
func weightBytes(typ backend.DType, f []float32) []byte {
	switch typ {
	case backend.F16:
		return safetensors.F32ToF16(f)
	case backend.BF16:
		return safetensors.F32ToBF16(f)
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&f[0])), 4*len(f))
}

// mustWeight is b.Weight, failing t on an error.
func mustWeight(t *testing.T, b *Backend, typ backend.DType, rows, cols int, raw []byte) backend.Tensor {
	t.Helper()
	w, err := b.Weight(typ, rows, cols, raw)
	if err != nil {
		t.Fatal(err)
	}
	return w
}
