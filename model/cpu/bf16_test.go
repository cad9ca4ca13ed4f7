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

// bf16Weight makes a [rows, cols] BF16 weight of random values on b, kept
// as BF16 (but for a [1, cols] one, converted at load as the norm vectors
// are), and the float32 weight of the same (exactly converted) values.
func bf16Weight(t *testing.T, b *Backend, r *rand.Rand, rows, cols int) (w, f backend.Tensor) {
	t.Helper()
	raw := safetensors.F32ToBF16(randMat(r, rows, cols, 1))
	w, err := b.Weight(backend.BF16, rows, cols, raw)
	if err != nil {
		t.Fatal(err)
	}
	if rows > 1 && !w.(*Tensor).BF16() {
		t.Fatalf("BF16 weight [%d, %d] was converted at load", rows, cols)
	}
	return w, b.FromHost(rows, cols, b.ToHost(w, nil))
}

// TestMatMulBF16 checks the product with a BF16 w against the float32
// product with the converted w (the same values, so float rounding apart
// the same result, to 1e-5 of the outputs' size √in: sgemm's blocking
// differs between a panel and the whole w) and against a float64
// reference, with panels of the default size and of 16 rows (many panels,
// a partial last one).
func TestMatMulBF16(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	shapes := []struct{ n, in, out int }{
		{1, 1, 1}, {1, 7, 3}, {1, 300, 517}, {3, 5, 1}, {5, 33, 17}, // unsplit
		{300, 64, 70}, {37, 129, 65}, // unsplit, several 16-row panels
		{1, 1030, 4099}, {8, 1000, 1100}, {3, 1500, 1025}, // split along w's rows, one row, odd sizes
		{513, 40, 7}, {300, 200, 60}, // split along x's rows: w converted whole
	}
	defer func(p int) { bf16PanelBytes = p }(bf16PanelBytes)
	for _, panel := range []int{bf16PanelBytes, 1} {
		bf16PanelBytes = panel
		for _, bk := range backends() {
			for _, s := range shapes {
				t.Run(fmt.Sprintf("panel%d/%s/%dx%dx%d", panel, bk.name, s.n, s.in, s.out), func(t *testing.T) {
					b := bk.b
					x := randMat(r, s.n, s.in, 1)
					w, f := bf16Weight(t, b, r, s.out, s.in)
					got, want := b.New(s.n, s.out), b.New(s.n, s.out)
					b.MatMul(got, b.FromHost(s.n, s.in, x), w)
					// On oneDNN's BF16 matmul x is rounded to BF16 too
					// (a [1, in] weight is converted at load, a vector).
					if w.(*Tensor).BF16() {
						x = bf16Activations(b, x)
					}
					b.MatMul(want, b.FromHost(s.n, s.in, x), f)
					closeTo(t, "BF16 vs converted F32", b.ToHost(got, nil), f64(b.ToHost(want, nil)), 1e-5*math.Sqrt(float64(s.in)), 1e-5)
					if panel != 1 && (bk.name == "t2" || bk.name == "t2onednn") { // once per shape: it is slow under -race
						closeTo(t, "BF16 vs float64", b.ToHost(got, nil), refMatMul(x, b.ToHost(f, nil), s.n, s.in, s.out), 1e-4*math.Sqrt(float64(s.in)), 1e-5)
					}
				})
			}
		}
	}
}

func f64(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

// TestMatMulBF16Views multiplies by row and column views of a BF16 weight
// (stride ≠ cols).
func TestMatMulBF16Views(t *testing.T) {
	for _, bk := range backends() {
		t.Run(bk.name, func(t *testing.T) { testMatMulBF16Views(t, bk.b) })
	}
}

func testMatMulBF16Views(t *testing.T, b *Backend) {
	r := rand.New(rand.NewPCG(7, 8))
	const n, in, out = 40, 300, 500
	w, f := bf16Weight(t, b, r, out+9, in+11)
	xh := randMat(r, n, in, 1)
	x := b.FromHost(n, in, xh)
	xr := b.FromHost(n, in, bf16Activations(b, xh))
	for _, c := range []struct{ r0, c0 int }{{0, 0}, {9, 11}, {4, 5}} {
		wv := b.ColView(b.RowView(w, c.r0, c.r0+out), c.c0, c.c0+in)
		fv := b.ColView(b.RowView(f, c.r0, c.r0+out), c.c0, c.c0+in)
		if !wv.BF16() {
			t.Fatal("a view of a BF16 weight is not BF16")
		}
		got, want := b.New(n, out), b.New(n, out)
		b.MatMul(got, x, wv)
		b.MatMul(want, xr, fv)
		closeTo(t, fmt.Sprintf("view at (%d, %d)", c.r0, c.c0), b.ToHost(got, nil), f64(b.ToHost(want, nil)), 1e-5*math.Sqrt(in), 1e-5)
		closeTo(t, "ToHost of a view", b.ToHost(wv, nil), f64(b.ToHost(fv, nil)), 0, 0)
	}
}

// TestEmbedBF16: the rows picked from a BF16 table are its values exactly.
func TestEmbedBF16(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for _, bk := range backends() {
		b := bk.b
		w, f := bf16Weight(t, b, r, 300, 70)
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

// TestWeightBF16Forms: which BF16 weights stay BF16, in place or copied,
// and which are converted.
func TestWeightBF16Forms(t *testing.T) {
	vals := []float32{1, -2.5, 3.140625, 0, 65280, -0.0001220703125}
	raw := safetensors.F32ToBF16(vals)
	// An odd address (the allocator may hand out odd-sized buffers at one).
	buf := make([]byte, len(raw)+1)
	unaligned := buf[1-uintptr(unsafe.Pointer(&buf[0]))%2:][:len(raw)]
	copy(unaligned, raw)
	cases := []struct {
		name           string
		b              *Backend
		rows, cols     int
		raw            []byte
		bf16, readOnly bool
	}{
		{"matrix in place", New(2), 2, 3, raw, true, true},
		{"matrix unaligned", New(2), 3, 2, unaligned, true, false},
		{"vector converted", New(2), 1, 6, raw, false, false},
		{"DecodeBF16", NewWithOptions(Options{Threads: 2, DecodeBF16: true}), 2, 3, raw, false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w, err := c.b.Weight(backend.BF16, c.rows, c.cols, c.raw)
			if err != nil {
				t.Fatal(err)
			}
			x := w.(*Tensor)
			if x.BF16() != c.bf16 || x.readOnly != c.readOnly {
				t.Errorf("BF16 %v read-only %v, want %v %v", x.BF16(), x.readOnly, c.bf16, c.readOnly)
			}
			closeTo(t, "ToHost", c.b.ToHost(w, nil), f64(vals), 0, 0)
			c.b.Free(w)
			if x.BF16() || x.Data() != nil {
				t.Error("Free kept the values")
			}
		})
	}
}

func TestBF16Env(t *testing.T) {
	for _, c := range []struct {
		val    string
		decode bool
	}{{"", false}, {"bf16", false}, {"F32", true}} {
		t.Setenv(BF16Env, c.val)
		if b := New(1); b.decodeBF16 != c.decode {
			t.Errorf("%s=%q: decodeBF16 %v", BF16Env, c.val, b.decodeBF16)
		}
	}
	t.Setenv(BF16Env, "f16")
	defer func() {
		if recover() == nil {
			t.Error("unknown value: no panic")
		}
	}()
	New(1)
}

// TestBF16Rows converts every bfloat16 value, in rows of odd width and
// stride (vector body and scalar tail), with the AVX2 and the scalar C
// loops.
func TestBF16Rows(t *testing.T) {
	const rows, cols, stride = 1<<16/37 + 1, 37, 41
	w := &Tensor{rows: rows, cols: cols, stride: stride, bf16: make([]uint16, rows*stride)}
	want := make([]float32, rows*cols)
	for i := range rows {
		for j := range cols {
			v := uint16(i*cols + j)
			w.bf16[i*stride+j] = v
			want[i*cols+j] = math.Float32frombits(uint32(v) << 16)
		}
	}
	for _, useSIMD := range []bool{true, false} {
		got := make([]float32, len(want))
		bf16RowsWith(useSIMD, got, w, 0, rows)
		for i := range got {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("SIMD %v: element %d = %#x, want %#x", useSIMD, i, math.Float32bits(got[i]), math.Float32bits(want[i]))
			}
		}
	}
}
