package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/dlmcache/dlmcache/model/backend"
	"github.com/dlmcache/dlmcache/model/safetensors"
)

// TestBF16MM checks bf16mm.c's vdpbf16ps product on weights laid out by
// layOutBF16 against a float64 reference on the same BF16 values, for row
// counts of x around the kernel's 6-row tile (and its even tiles: 7 rows
// as 4 + 3, 32 as 6, 6, 5, 5, 5, 5), weights around its 16-row
// groups and 64-row blocks (from row 0 and from row 64), depths around its
// 256-value packs and the 16-pair register transpose of the layout, and row
// strides wider than the rows. The sums are F32 over exact BF16 products,
// so the bound is 1e-5·√k absolute plus 1e-5 relative (the outputs' size
// is √k).
func TestBF16MM(t *testing.T) {
	b := New(2)
	if !bf16Dot {
		t.Skip("no AVX512-BF16 (or capped below it): bf16mm.c's kernel does not run here")
	}
	r := rand.New(rand.NewPCG(21, 22))
	for _, s := range []struct{ m, n, k, padX, padW int }{
		{1, 1, 2, 0, 0}, {6, 16, 32, 0, 0}, {7, 17, 34, 3, 5}, {13, 64, 256, 0, 0}, {5, 65, 258, 1, 0},
		{12, 130, 512, 0, 7}, {31, 200, 1030, 8, 2}, {64, 48, 2048, 0, 0}, {2, 3, 30, 0, 1}, {30, 1, 512, 0, 0},
		{32, 40, 512, 2, 0},
	} {
		t.Run(fmt.Sprintf("%dx%dx%d", s.m, s.n, s.k), func(t *testing.T) {
			ldx, ldw := s.k+s.padX, s.k+s.padW
			x, w := randBF16(r, s.m*ldx), randBF16(r, s.n*ldw)
			wt := &Tensor{rows: s.n, cols: s.k, stride: ldw, bf16: w, readOnly: true}
			b.layOutBF16(wt)
			if wt.bfl == nil {
				t.Fatal("not laid out")
			}
			for _, j0 := range []int{0, 64} {
				if j0 >= s.n {
					continue
				}
				n := s.n - j0
				const ldc = 1000
				c := make([]float32, (s.m-1)*ldc+n)
				for i := range c {
					c[i] = float32(math.NaN()) // every output is written, none read
				}
				bf16MM(s.m, n, s.k, x, ldx, wt, j0, c, ldc)
				got, want := make([]float32, s.m*n), make([]float64, s.m*n)
				for i := 0; i < s.m; i++ {
					for j := 0; j < n; j++ {
						var sum float64
						for l := 0; l < s.k; l++ {
							sum += bf16f64(x[i*ldx+l]) * bf16f64(w[(j0+j)*ldw+l])
						}
						got[i*n+j], want[i*n+j] = c[i*ldc+j], sum
					}
				}
				closeTo(t, fmt.Sprintf("from row %d", j0), got, want, 1e-5*math.Sqrt(float64(s.k)), 1e-5)
			}
		})
	}
	odd := &Tensor{rows: 100, cols: 3, stride: 3, bf16: make([]uint16, 300), readOnly: true}
	if b.layOutBF16(odd); odd.bfl != nil {
		t.Error("a weight of odd k was laid out")
	}
}

// TestMarkTable: Weight lays a BF16 weight out where products with it run
// on bf16mm.c's kernel, its file's pages then released (AliasesRaw false),
// and a row view does not carry the layout; marked as a table, the weight
// drops its layout (and its count), reads the checkpoint's bytes again,
// and still multiplies: on oneDNN's BF16 matmul, which rounds x the same
// way, or, built without oneDNN, on the F32 path with x as it is.
func TestMarkTable(t *testing.T) {
	b := New(2)
	if !b.dotBF16 {
		t.Skip("BF16 weights are not laid out here")
	}
	r := rand.New(rand.NewPCG(25, 26))
	hs := randBF16(r, 100*600)
	w := bf16Weight(t, b, hs, 100, 600)
	wt := w.(*Tensor)
	if wt.bfl == nil || wt.AliasesRaw() || b.bf16LaidOut.Load() == 0 {
		t.Fatalf("a BF16 weight in place: laid out %v, aliases raw %v", wt.bfl != nil, wt.AliasesRaw())
	}
	if v := b.RowView(w, 64, 96); v.bfl != nil {
		t.Error("a row view carries the layout")
	}
	x := b.FromHost(3, 600, randMat(r, 3, 600, 1))
	before, after := b.New(3, 100), b.New(3, 100)
	b.MatMul(before, x, w)
	b.MarkTable(w)
	if wt.bfl != nil || !wt.AliasesRaw() || b.bf16LaidOut.Load() != 0 {
		t.Fatalf("after MarkTable: layout %v, aliases raw %v, %d bytes laid out", wt.bfl != nil, wt.AliasesRaw(), b.bf16LaidOut.Load())
	}
	b.MatMul(after, x, w)
	want := f64(b.ToHost(before, nil))
	if !b.dnnlPick().dnnlBF16 {
		wf := make([]float32, len(hs))
		for i, h := range hs {
			wf[i] = float32(bf16f64(h))
		}
		want = refMatMul(b.ToHost(x, nil), wf, 3, 600, 100)
	}
	closeTo(t, "product after MarkTable", b.ToHost(after, nil), want, 1e-5*math.Sqrt(600), 1e-5)
	// Free unmaps a layout at once.
	w2 := randBF16Weight(t, b, r, 100, 600)
	if b.bf16LaidOut.Load() == 0 {
		t.Fatal("second weight not laid out")
	}
	b.Free(w2)
	if w2.(*Tensor).bfl != nil || b.bf16LaidOut.Load() != 0 {
		t.Errorf("after Free: layout %v, %d bytes laid out", w2.(*Tensor).bfl != nil, b.bf16LaidOut.Load())
	}
}

// TestF16Layout checks that an F16 weight in the memory map, where F16
// weights are rounded to BF16 (F16Auto with BF16 products on bf16mm.c's
// kernel), is rounded straight into the kernel's layout with no copy of
// its own: it keeps its F16 halves in place for views, its pages are
// released, and its products are bit for bit those of a BF16 weight of
// the same values rounded (ties to even) and within 1e-5·√k of a float64
// reference on them; a row view multiplies as F16 (no layout).
func TestF16Layout(t *testing.T) {
	b := New(2)
	if !b.dotBF16 || !b.f16BF16 {
		t.Skip("F16 weights are not laid out for bf16mm.c's kernel here")
	}
	r := rand.New(rand.NewPCG(27, 28))
	const rows, cols = 130, 600 // two full 64-row blocks and a partial one; k past the panel kernel's
	f := make([]float32, rows*cols)
	safetensors.F16ToF32(safetensors.F32ToF16(randMat(r, rows, cols, 1)), f)
	w, err := b.Weight(backend.F16, rows, cols, safetensors.F32ToF16(f))
	if err != nil {
		t.Fatal(err)
	}
	wt := w.(*Tensor)
	if wt.bfl == nil || wt.f16 == nil || wt.bf16 != nil || wt.AliasesRaw() {
		t.Fatalf("an F16 weight in place: laid out %v, f16 %v, bf16 copy %v, aliases raw %v",
			wt.bfl != nil, wt.f16 != nil, wt.bf16 != nil, wt.AliasesRaw())
	}
	rounded := make([]float32, len(f))
	for i, v := range f {
		rounded[i] = math.Float32frombits(uint32(refBF16(v)) << 16)
	}
	wb, err := b.Weight(backend.BF16, rows, cols, safetensors.F32ToBF16(rounded))
	if err != nil || wb.(*Tensor).bfl == nil {
		t.Fatalf("the BF16 weight: %v, laid out %v", err, err == nil && wb.(*Tensor).bfl != nil)
	}
	for _, n := range []int{1, 7, 40} {
		x := randMat(r, n, cols, 1)
		xt := b.FromHost(n, cols, x)
		got, want := b.New(n, rows), b.New(n, rows)
		b.MatMul(got, xt, w)
		b.MatMul(want, xt, wb)
		g, h := b.ToHost(got, nil), b.ToHost(want, nil)
		for i := range g {
			if g[i] != h[i] {
				t.Fatalf("%d rows: output %d is %g, the BF16 weight's %g", n, i, g[i], h[i])
			}
		}
		closeTo(t, fmt.Sprintf("%d rows vs float64", n), g, refMatMul(bf16Activations(b, x), rounded, n, cols, rows), 1e-5*math.Sqrt(cols), 1e-5)
	}
	// A view reads the F16 halves in place, exactly converted (x as is).
	v := b.RowView(w, 64, 100)
	if v.bfl != nil || v.f16 == nil {
		t.Fatalf("row view: laid out %v, f16 %v", v.bfl != nil, v.f16 != nil)
	}
	x := randMat(r, 5, cols, 1)
	got := b.New(5, 36)
	b.MatMul(got, b.FromHost(5, cols, x), v)
	closeTo(t, "row view vs float64", b.ToHost(got, nil), refMatMul(x, f[64*cols:100*cols], 5, cols, 36), 1e-5*math.Sqrt(cols), 1e-5)
}

// BenchmarkBF16MM times products with a BF16 weight on all threads, on
// bf16mm.c's vdpbf16ps kernel with the weight laid out at load (dot) and
// on oneDNN's BF16 matmul with the weight in place (onednn), activations
// rounded to BF16 in both, for l16-d2048's shapes at the 256-slot step
// `make bench-llamacpp` times, a 512-row one and a 10%-rows step's 26
// rows.
func BenchmarkBF16MM(b *testing.B) {
	bk := New(0)
	if !bk.dotBF16 {
		b.Skip("needs AVX512-BF16 and oneDNN's BF16 matmul")
	}
	r := rand.New(rand.NewPCG(1, 1))
	for _, s := range []struct{ n, in, out int }{
		{256, 2048, 2048}, {256, 2048, 5632}, {256, 5632, 2048}, {512, 2048, 5632}, {26, 2048, 5632},
	} {
		x := bk.FromHost(s.n, s.in, randMat(r, s.n, s.in, 1))
		w := randBF16Weight(b, bk, r, s.out, s.in)
		mapped := *w.(*Tensor)
		mapped.bfl = nil
		dst := bk.New(s.n, s.out)
		for _, c := range []struct {
			name string
			w    backend.Tensor
		}{{"dot", w}, {"onednn", &mapped}} {
			b.Run(fmt.Sprintf("n%d_in%d_out%d/%s", s.n, s.in, s.out, c.name), func(b *testing.B) {
				for b.Loop() {
					bk.MatMul(dst, x, c.w)
				}
				gflops(b, 2*float64(s.n)*float64(s.in)*float64(s.out))
			})
		}
	}
}

// randBF16 returns n BF16 values of normal draws.
func randBF16(r *rand.Rand, n int) []uint16 {
	h := make([]uint16, n)
	for i := range h {
		h[i] = uint16(math.Float32bits(float32(r.NormFloat64())) >> 16)
	}
	return h
}

// randBF16Weight is a [rows, cols] BF16 weight of normal draws, loaded
// through b.Weight from bytes of its own (as a checkpoint's, in place).
func randBF16Weight(tb testing.TB, b *Backend, r *rand.Rand, rows, cols int) backend.Tensor {
	return bf16Weight(tb, b, randBF16(r, rows*cols), rows, cols)
}

// bf16Weight is the [rows, cols] BF16 weight of values hs, loaded through
// b.Weight from bytes of its own.
func bf16Weight(tb testing.TB, b *Backend, hs []uint16, rows, cols int) backend.Tensor {
	raw := make([]byte, 2*rows*cols)
	for i, h := range hs {
		raw[2*i], raw[2*i+1] = byte(h), byte(h>>8)
	}
	w, err := b.Weight(backend.BF16, rows, cols, raw)
	if err != nil {
		tb.Fatal(err)
	}
	return w
}

func bf16f64(h uint16) float64 { return float64(math.Float32frombits(uint32(h) << 16)) }
