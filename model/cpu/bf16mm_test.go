package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/dlmcache/dlmcache/model/backend"
)

// TestBF16MM checks bf16mm.c's vdpbf16ps product against a float64
// reference on the same BF16 values, for row counts around its 6-row
// tile, column counts around its 16-column groups and 64-column packs,
// depths around its 256-value pack blocks and the 16-pair register
// transpose, with row strides wider than the rows. The sums are F32 over
// exact BF16 products, so the bound is 1e-5·√k absolute plus 1e-5
// relative (the outputs' size is √k).
func TestBF16MM(t *testing.T) {
	if !bf16Dot {
		t.Skip("no AVX512-BF16 (or capped below it): bf16mm.c's kernel does not run here")
	}
	r := rand.New(rand.NewPCG(21, 22))
	for _, s := range []struct{ m, n, k, padX, padW int }{
		{1, 1, 2, 0, 0}, {6, 16, 32, 0, 0}, {7, 17, 34, 3, 5}, {13, 64, 256, 0, 0}, {5, 65, 258, 1, 0},
		{12, 130, 512, 0, 7}, {31, 200, 1030, 8, 2}, {64, 48, 2048, 0, 0}, {2, 3, 30, 0, 1},
	} {
		t.Run(fmt.Sprintf("%dx%dx%d", s.m, s.n, s.k), func(t *testing.T) {
			ldx, ldw := s.k+s.padX, s.k+s.padW
			x, w := randBF16(r, s.m*ldx), randBF16(r, s.n*ldw)
			wt := &Tensor{rows: s.n, cols: s.k, stride: ldw, bf16: w}
			const ldc = 1000
			c := make([]float32, (s.m-1)*ldc+s.n)
			for i := range c {
				c[i] = float32(math.NaN()) // every output is written, none read
			}
			if !bf16MM(s.m, s.n, s.k, x, ldx, wt, 0, c, ldc) {
				t.Fatal("bf16MM declined an even k")
			}
			got, want := make([]float32, s.m*s.n), make([]float64, s.m*s.n)
			for i := 0; i < s.m; i++ {
				for j := 0; j < s.n; j++ {
					var sum float64
					for l := 0; l < s.k; l++ {
						sum += bf16f64(x[i*ldx+l]) * bf16f64(w[j*ldw+l])
					}
					got[i*s.n+j], want[i*s.n+j] = c[i*ldc+j], sum
				}
			}
			closeTo(t, "vdpbf16ps product", got, want, 1e-5*math.Sqrt(float64(s.k)), 1e-5)
			// Rows j0 … of w.
			if s.n > 3 {
				c2 := make([]float32, (s.m-1)*ldc+s.n-3)
				bf16MM(s.m, s.n-3, s.k, x, ldx, wt, 3, c2, ldc)
				for i := 0; i < s.m; i++ {
					for j := 3; j < s.n; j++ {
						if c2[i*ldc+j-3] != c[i*ldc+j] {
							t.Fatalf("rows from 3: (%d, %d) = %g, want %g", i, j, c2[i*ldc+j-3], c[i*ldc+j])
						}
					}
				}
			}
		})
	}
	wt := &Tensor{rows: 1, cols: 3, stride: 3, bf16: make([]uint16, 3)}
	if bf16MM(1, 1, 3, make([]uint16, 3), 3, wt, 0, make([]float32, 1), 1) {
		t.Error("bf16MM ran an odd k")
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
	raw := make([]byte, 2*rows*cols)
	for i, h := range randBF16(r, rows*cols) {
		raw[2*i], raw[2*i+1] = byte(h), byte(h>>8)
	}
	w, err := b.Weight(backend.BF16, rows, cols, raw)
	if err != nil {
		tb.Fatal(err)
	}
	return w
}

func bf16f64(h uint16) float64 { return float64(math.Float32frombits(uint32(h) << 16)) }

// BenchmarkBF16MM times products with a BF16 weight on all threads, on
// bf16mm.c's vdpbf16ps kernel, on the weight laid out at load (dot) and
// packing it as it goes (dot_packing), and on oneDNN's BF16 matmul (onednn),
// activations rounded to BF16 in both, for l16-d2048's shapes at the
// 256-slot step `make bench-llamacpp` times, a 512-row one and a
// 10%-rows step's 26 rows; GFLOP/s beside PeakBF16's figure.
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
		dst := bk.New(s.n, s.out)
		mapped := *w.(*Tensor)
		mapped.bfl = nil
		for _, c := range []struct {
			name string
			dot  bool
			w    backend.Tensor
		}{{"dot", true, w}, {"dot_packing", true, &mapped}, {"onednn", false, w}} {
			b.Run(fmt.Sprintf("n%d_in%d_out%d/%s", s.n, s.in, s.out, c.name), func(b *testing.B) {
				bk.dotBF16 = c.dot
				for b.Loop() {
					bk.MatMul(dst, x, c.w)
				}
				gflops(b, 2*float64(s.n)*float64(s.in)*float64(s.out))
			})
		}
	}
}

// TestBF16Layout checks products with a BF16 weight laid out at load
// (dlmc_bf16_pack) against the same kernel packing the weight as it goes:
// the same sums in the same order, so equal to the bit, from row 0 and
// row 64, for row counts around the layout's 64-row blocks; and that
// Weight lays out a mapped BF16 weight where the kernel runs, and its
// views, not.
func TestBF16Layout(t *testing.T) {
	if !bf16Dot {
		t.Skip("no AVX512-BF16 (or capped below it): bf16mm.c's kernel does not run here")
	}
	r := rand.New(rand.NewPCG(23, 24))
	b := New(2)
	for _, s := range []struct{ m, rows, cols int }{{7, 130, 258}, {1, 64, 2}, {13, 200, 1030}, {6, 65, 34}, {30, 1, 512}} {
		t.Run(fmt.Sprintf("%dx%dx%d", s.m, s.rows, s.cols), func(t *testing.T) {
			wt := &Tensor{rows: s.rows, cols: s.cols, stride: s.cols, bf16: randBF16(r, s.rows*s.cols), readOnly: true}
			b.layOutBF16(wt)
			if wt.bfl == nil {
				t.Fatal("not laid out")
			}
			x := randBF16(r, s.m*s.cols)
			for _, j0 := range []int{0, 64} {
				if j0 >= s.rows {
					continue
				}
				n := s.rows - j0
				got, want := make([]float32, s.m*n), make([]float32, s.m*n)
				if !bf16MM(s.m, n, s.cols, x, s.cols, wt, j0, got, n) {
					t.Fatal("declined")
				}
				plain := *wt
				plain.bfl = nil
				bf16MM(s.m, n, s.cols, x, s.cols, &plain, j0, want, n)
				for i := range got {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("from row %d: element %d = %g, packed as it goes %g", j0, i, got[i], want[i])
					}
				}
			}
		})
	}
	if b.dotBF16 {
		w := randBF16Weight(t, b, r, 300, 600)
		wt := w.(*Tensor)
		if wt.panels == nil && (wt.bfl == nil || wt.AliasesRaw()) {
			t.Errorf("a BF16 weight in place is not laid out (layout %v, aliases raw %v)", wt.bfl != nil, wt.AliasesRaw())
		}
		if v := b.RowView(w, 64, 128); v.bfl != nil {
			t.Error("a row view carries the layout")
		}
	}
}

// TestMarkTable: a laid-out BF16 weight marked as a table drops its
// layout (and its count), reads the checkpoint's bytes again, and still
// multiplies, on the kernel packing as it goes.
func TestMarkTable(t *testing.T) {
	b := New(2)
	if !b.dotBF16 {
		t.Skip("BF16 weights are not laid out here")
	}
	r := rand.New(rand.NewPCG(25, 26))
	w := randBF16Weight(t, b, r, 100, 600)
	wt := w.(*Tensor)
	if wt.bfl == nil || b.bf16LaidOut.Load() == 0 {
		t.Fatal("not laid out")
	}
	x := b.FromHost(3, 600, randMat(r, 3, 600, 1))
	before, after := b.New(3, 100), b.New(3, 100)
	b.MatMul(before, x, w)
	b.MarkTable(w)
	if wt.bfl != nil || !wt.AliasesRaw() || b.bf16LaidOut.Load() != 0 {
		t.Fatalf("after MarkTable: layout %v, aliases raw %v, %d bytes laid out", wt.bfl != nil, wt.AliasesRaw(), b.bf16LaidOut.Load())
	}
	b.MatMul(after, x, w)
	closeTo(t, "product after MarkTable", b.ToHost(after, nil), f64(b.ToHost(before, nil)), 0, 0)
}
