package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/dlmcache/dlmcache/model/backend"
	"github.com/dlmcache/dlmcache/model/safetensors"
)

// f16Weight makes a [rows, cols] F16 weight of random values on b, kept
// as F16 (but for a [1, cols] one, converted at load as the norm vectors
// are), and the float32 weight of the same (exactly converted) values.
func f16Weight(t *testing.T, b *Backend, r *rand.Rand, rows, cols int) (w, f backend.Tensor) {
	t.Helper()
	raw := safetensors.F32ToF16(randMat(r, rows, cols, 1))
	w, err := b.Weight(backend.F16, rows, cols, raw)
	if err != nil {
		t.Fatal(err)
	}
	if rows > 1 && !w.(*Tensor).F16() {
		t.Fatalf("F16 weight [%d, %d] was converted at load", rows, cols)
	}
	return w, b.FromHost(rows, cols, b.ToHost(w, nil))
}

// TestMatMulF16 checks the product with an F16 w against the float32
// product with the converted w — the same values, so the same result up to
// float32 rounding: the libraries block a panel of w's rows as a product
// of its own, and a weight of at most panelMaxK columns runs on the panel
// kernel where the backend uses it. The bound is 1e-5·√in absolute plus
// 1e-5 relative (the outputs' size is √in); against a float64 reference
// 1e-4·√in. Panels of the default size and of 16 rows (many panels, a
// partial last one).
func TestMatMulF16(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 16))
	shapes := []struct{ n, in, out int }{
		{1, 1, 1}, {1, 7, 3}, {1, 300, 517}, {3, 5, 1}, {5, 33, 17}, // unsplit
		{300, 64, 70}, {37, 129, 65}, // unsplit, several 16-row panels
		{1, 1030, 4099}, {8, 1000, 1100}, {3, 1500, 1025}, // split along w's rows, one row, odd sizes
		{513, 40, 7}, {300, 200, 60}, {600, 700, 90}, // split along x's rows: w converted whole
	}
	defer func(p int) { bf16PanelBytes = p }(bf16PanelBytes)
	for _, panel := range []int{bf16PanelBytes, 1} {
		bf16PanelBytes = panel
		for _, bk := range backends() {
			for _, s := range shapes {
				t.Run(fmt.Sprintf("panel%d/%s/%dx%dx%d", panel, bk.name, s.n, s.in, s.out), func(t *testing.T) {
					b := bk.b
					x := b.FromHost(s.n, s.in, randMat(r, s.n, s.in, 1))
					w, f := f16Weight(t, b, r, s.out, s.in)
					got, want := b.New(s.n, s.out), b.New(s.n, s.out)
					b.MatMul(got, x, w)
					b.MatMul(want, x, f)
					tol := 1e-5 * math.Sqrt(float64(s.in))
					closeTo(t, "F16 vs converted F32", b.ToHost(got, nil), f64(b.ToHost(want, nil)), tol, 1e-5)
					if panel != 1 && (bk.name == "t2" || bk.name == "t2onednn") { // once per shape: it is slow under -race
						closeTo(t, "F16 vs float64", b.ToHost(got, nil), refMatMul(b.ToHost(x, nil), b.ToHost(f, nil), s.n, s.in, s.out), 10*tol, 1e-5)
					}
				})
			}
		}
	}
}

// TestMatMulF16Views multiplies by row and column views of an F16 weight
// (stride ≠ cols).
func TestMatMulF16Views(t *testing.T) {
	for _, bk := range backends() {
		t.Run(bk.name, func(t *testing.T) {
			b := bk.b
			r := rand.New(rand.NewPCG(17, 18))
			const n, in, out = 40, 600, 500
			w, f := f16Weight(t, b, r, out+9, in+11)
			x := b.FromHost(n, in, randMat(r, n, in, 1))
			for _, c := range []struct{ r0, c0 int }{{0, 0}, {9, 11}, {4, 5}} {
				wv := b.ColView(b.RowView(w, c.r0, c.r0+out), c.c0, c.c0+in)
				fv := b.ColView(b.RowView(f, c.r0, c.r0+out), c.c0, c.c0+in)
				if !wv.F16() {
					t.Fatal("a view of an F16 weight is not F16")
				}
				got, want := b.New(n, out), b.New(n, out)
				b.MatMul(got, x, wv)
				b.MatMul(want, x, fv)
				closeTo(t, fmt.Sprintf("view at (%d, %d)", c.r0, c.c0), b.ToHost(got, nil), f64(b.ToHost(want, nil)), 1e-5*math.Sqrt(in), 1e-5)
				closeTo(t, "ToHost of a view", b.ToHost(wv, nil), f64(b.ToHost(fv, nil)), 0, 0)
			}
		})
	}
}

// TestEmbedF16: the rows picked from an F16 table are its values exactly.
func TestEmbedF16(t *testing.T) {
	r := rand.New(rand.NewPCG(19, 20))
	for _, bk := range backends() {
		b := bk.b
		w, f := f16Weight(t, b, r, 300, 70)
		ids := make([]int32, 513)
		for i := range ids {
			ids[i] = int32(r.IntN(300))
		}
		got, want := b.New(len(ids), 70), b.New(len(ids), 70)
		b.Embed(got, w, ids)
		b.Embed(want, f, ids)
		closeTo(t, bk.name+" Embed", b.ToHost(got, nil), f64(b.ToHost(want, nil)), 0, 0)
	}
}

// TestWeightF16Forms: which F16 weights stay F16, in place or copied, which
// are laid out for the panel kernel as well, and which are converted.
func TestWeightF16Forms(t *testing.T) {
	vals := []float32{1, -2.5, 3.140625, 0, 65504, -0.0001220703125, 6e-8, 1e-4}
	raw := safetensors.F32ToF16(vals)
	back := make([]float32, len(vals))
	safetensors.F16ToF32(raw, back)
	want := f64(back)
	// An odd address (the allocator may hand out odd-sized buffers at one).
	buf := make([]byte, len(raw)+1)
	unaligned := buf[1-uintptr(unsafe.Pointer(&buf[0]))%2:][:len(raw)]
	copy(unaligned, raw)
	noPanel := NewWithOptions(Options{Threads: 2})
	noPanel.panel = false
	cases := []struct {
		name                  string
		b                     *Backend
		rows, cols            int
		raw                   []byte
		f16, readOnly, panels bool
	}{
		{"matrix in place", noPanel, 2, 4, raw, true, true, false},
		{"matrix unaligned", noPanel, 4, 2, unaligned, true, false, false},
		{"matrix on the panel kernel", New(2), 2, 4, raw, true, true, simd},
		{"vector converted", New(2), 1, 8, raw, false, false, false},
		{"DecodeF16", NewWithOptions(Options{Threads: 2, DecodeF16: true}), 2, 4, raw, false, false, simd},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w, err := c.b.Weight(backend.F16, c.rows, c.cols, c.raw)
			if err != nil {
				t.Fatal(err)
			}
			x := w.(*Tensor)
			if x.F16() != c.f16 || x.readOnly != c.readOnly || (x.panels != nil) != c.panels {
				t.Errorf("F16 %v read-only %v panels %v, want %v %v %v", x.F16(), x.readOnly, x.panels != nil, c.f16, c.readOnly, c.panels)
			}
			closeTo(t, "ToHost", c.b.ToHost(w, nil), want, 0, 0)
			c.b.Free(w)
			if x.F16() || x.Data() != nil {
				t.Error("Free kept the values")
			}
		})
	}
}

func TestF16Env(t *testing.T) {
	for _, c := range []struct {
		val    string
		decode bool
	}{{"", false}, {"f16", false}, {"F32", true}} {
		t.Setenv(F16Env, c.val)
		if b := New(1); b.decodeF16 != c.decode {
			t.Errorf("%s=%q: decodeF16 %v", F16Env, c.val, b.decodeF16)
		}
	}
	t.Setenv(F16Env, "bf16")
	defer func() {
		if recover() == nil {
			t.Error("unknown value: no panic")
		}
	}()
	New(1)
}
