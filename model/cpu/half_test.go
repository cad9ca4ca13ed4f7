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

// halfKind is one of the 16-bit float weight types the backend keeps as
// they are: its name, type, encoder from and decoder to float32, and
// whether a tensor holds it.
type halfKind struct {
	name   string
	dtype  backend.DType
	encode func([]float32) []byte
	decode func([]byte, []float32)
	is     func(*Tensor) bool
	// act is x as b's products with a weight of this kind see it (nil: x
	// itself).
	act func(b *Backend, x []float32) []float32
	// env is the variable that has such weights decoded to float32 at
	// load, and decoded says whether a backend does.
	env     string
	decoded func(*Backend) bool
}

var (
	bf16Kind = halfKind{"BF16", backend.BF16, safetensors.F32ToBF16, safetensors.BF16ToF32, (*Tensor).BF16, bf16Activations,
		BF16Env, func(b *Backend) bool { return b.decodeBF16 }}
	f16Kind = halfKind{"F16", backend.F16, safetensors.F32ToF16, safetensors.F16ToF32, (*Tensor).F16, nil,
		F16Env, func(b *Backend) bool { return b.decodeF16 }}
)

// halfWeight makes a [rows, cols] weight of kind k of random values on b,
// kept as k (but for a [1, cols] one, converted at load as the norm
// vectors are), and the float32 weight of the same (exactly converted)
// values.
func halfWeight(t *testing.T, k halfKind, b *Backend, r *rand.Rand, rows, cols int) (w, f backend.Tensor) {
	t.Helper()
	raw := k.encode(randMat(r, rows, cols, 1))
	w, err := b.Weight(k.dtype, rows, cols, raw)
	if err != nil {
		t.Fatal(err)
	}
	if rows > 1 && !k.is(w.(*Tensor)) {
		t.Fatalf("%s weight [%d, %d] was converted at load", k.name, rows, cols)
	}
	return w, b.FromHost(rows, cols, b.ToHost(w, nil))
}

// halfMatMulShapes are the (n, in, out) products TestMatMulBF16 and
// TestMatMulF16 check.
var halfMatMulShapes = []struct{ n, in, out int }{
	{1, 1, 1}, {1, 7, 3}, {1, 300, 517}, {3, 5, 1}, {5, 33, 17}, // unsplit
	{300, 64, 70}, {37, 129, 65}, // unsplit, several 16-row panels
	{1, 1030, 4099}, {8, 1000, 1100}, {3, 1500, 1025}, // split along w's rows, one row, odd sizes
	{513, 40, 7}, {300, 200, 60}, // split along x's rows: w converted whole
}

// TestMatMulBF16 checks the product with a BF16 w against the float32
// product with the converted w (the same values, so float rounding apart
// the same result, to 1e-5 of the outputs' size √in: sgemm's blocking
// differs between a panel and the whole w) and against a float64
// reference, with panels of the default size and of 16 rows (many panels,
// a partial last one).
func TestMatMulBF16(t *testing.T) {
	testMatMulHalf(t, bf16Kind, rand.New(rand.NewPCG(5, 6)), halfMatMulShapes)
}

// TestMatMulF16 checks the product with an F16 w against the float32
// product with the converted w — the same values, so the same result up to
// float32 rounding: the libraries block a panel of w's rows as a product
// of its own, and a weight of at most halfPanelMaxK columns runs on the panel
// kernel where the backend uses it. The bound is 1e-5·√in absolute plus
// 1e-5 relative (the outputs' size is √in); against a float64 reference
// 1e-4·√in. Panels of the default size and of 16 rows (many panels, a
// partial last one).
func TestMatMulF16(t *testing.T) {
	shapes := append(halfMatMulShapes[:len(halfMatMulShapes):len(halfMatMulShapes)], struct{ n, in, out int }{600, 700, 90})
	testMatMulHalf(t, f16Kind, rand.New(rand.NewPCG(15, 16)), shapes)
}

// testMatMulHalf checks products with weights of kind k of each shape, on
// each backend, with panels of the default size and of 16 rows, against
// the float32 product with the converted weight (within 1e-5·√in absolute
// plus 1e-5 relative) and, once per shape, a float64 reference (1e-4·√in).
func testMatMulHalf(t *testing.T, k halfKind, r *rand.Rand, shapes []struct{ n, in, out int }) {
	defer func(p int) { bf16PanelBytes = p }(bf16PanelBytes)
	for _, panel := range []int{bf16PanelBytes, 1} {
		bf16PanelBytes = panel
		for _, bk := range backends() {
			for _, s := range shapes {
				t.Run(fmt.Sprintf("panel%d/%s/%dx%dx%d", panel, bk.name, s.n, s.in, s.out), func(t *testing.T) {
					b := bk.b
					x := randMat(r, s.n, s.in, 1)
					w, f := halfWeight(t, k, b, r, s.out, s.in)
					got, want := b.New(s.n, s.out), b.New(s.n, s.out)
					b.MatMul(got, b.FromHost(s.n, s.in, x), w)
					// On oneDNN's BF16 matmul x is rounded to BF16 too
					// (a [1, in] weight is converted at load, a vector).
					if k.act != nil && k.is(w.(*Tensor)) && w.(*Tensor).panels == nil {
						x = k.act(b, x)
					}
					b.MatMul(want, b.FromHost(s.n, s.in, x), f)
					tol := 1e-5 * math.Sqrt(float64(s.in))
					closeTo(t, k.name+" vs converted F32", b.ToHost(got, nil), f64(b.ToHost(want, nil)), tol, 1e-5)
					if panel != 1 && (bk.name == "t2" || bk.name == "t2onednn") { // once per shape: it is slow under -race
						closeTo(t, k.name+" vs float64", b.ToHost(got, nil), refMatMul(x, b.ToHost(f, nil), s.n, s.in, s.out), 10*tol, 1e-5)
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
func TestMatMulBF16Views(t *testing.T) { testMatMulHalfViews(t, bf16Kind, 300, 7) }

// TestMatMulF16Views multiplies by row and column views of an F16 weight
// (stride ≠ cols).
func TestMatMulF16Views(t *testing.T) { testMatMulHalfViews(t, f16Kind, 600, 17) }

// testMatMulHalfViews multiplies 40 rows of in columns by row and column
// views of a weight of kind k, on each backend, with random values from
// seed (seed, seed+1).
func testMatMulHalfViews(t *testing.T, k halfKind, in int, seed uint64) {
	for _, bk := range backends() {
		t.Run(bk.name, func(t *testing.T) {
			b := bk.b
			r := rand.New(rand.NewPCG(seed, seed+1))
			const n, out = 40, 500
			w, f := halfWeight(t, k, b, r, out+9, in+11)
			xh := randMat(r, n, in, 1)
			x := b.FromHost(n, in, xh)
			xr := x
			if k.act != nil {
				xr = b.FromHost(n, in, k.act(b, xh))
			}
			for _, c := range []struct{ r0, c0 int }{{0, 0}, {9, 11}, {4, 5}} {
				wv := b.ColView(b.RowView(w, c.r0, c.r0+out), c.c0, c.c0+in)
				fv := b.ColView(b.RowView(f, c.r0, c.r0+out), c.c0, c.c0+in)
				if !k.is(wv) {
					t.Fatalf("a view of a %s weight is not %s", k.name, k.name)
				}
				got, want := b.New(n, out), b.New(n, out)
				b.MatMul(got, x, wv)
				b.MatMul(want, xr, fv)
				closeTo(t, fmt.Sprintf("view at (%d, %d)", c.r0, c.c0), b.ToHost(got, nil), f64(b.ToHost(want, nil)), 1e-5*math.Sqrt(float64(in)), 1e-5)
				closeTo(t, "ToHost of a view", b.ToHost(wv, nil), f64(b.ToHost(fv, nil)), 0, 0)
			}
		})
	}
}

// TestEmbedBF16: the rows picked from a BF16 table are its values exactly.
func TestEmbedBF16(t *testing.T) { testEmbedHalf(t, bf16Kind, rand.New(rand.NewPCG(9, 10))) }

// TestEmbedF16: the rows picked from an F16 table are its values exactly.
func TestEmbedF16(t *testing.T) { testEmbedHalf(t, f16Kind, rand.New(rand.NewPCG(19, 20))) }

func testEmbedHalf(t *testing.T, k halfKind, r *rand.Rand) {
	for _, bk := range backends() {
		b := bk.b
		w, f := halfWeight(t, k, b, r, 300, 70)
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

// oddAddress is a copy of raw at an odd address (the allocator may hand
// out odd-sized buffers at one).
func oddAddress(raw []byte) []byte {
	buf := make([]byte, len(raw)+1)
	unaligned := buf[1-uintptr(unsafe.Pointer(&buf[0]))%2:][:len(raw)]
	copy(unaligned, raw)
	return unaligned
}

// halfForm is a case of TestWeightBF16Forms and TestWeightF16Forms: a
// weight of rows×cols from raw loaded by b, and whether it should stay of
// its kind, in place (read-only), and be laid out for the panel kernel.
type halfForm struct {
	name                   string
	b                      *Backend
	rows, cols             int
	raw                    []byte
	half, readOnly, panels bool
}

// TestWeightBF16Forms: which BF16 weights stay BF16, in place or copied,
// and which are converted.
func TestWeightBF16Forms(t *testing.T) {
	raw := bf16Kind.encode([]float32{1, -2.5, 3.140625, 0, 65280, -0.0001220703125})
	noPanel := New(2)
	noPanel.panel = false
	testWeightHalfForms(t, bf16Kind, raw, []halfForm{
		{"matrix in place", noPanel, 2, 3, raw, true, true, false},
		{"matrix unaligned", noPanel, 3, 2, oddAddress(raw), true, false, false},
		{"matrix on the panel kernel", New(2), 2, 3, raw, true, true, simd},
		{"vector converted", New(2), 1, 6, raw, false, false, false},
		{"DecodeBF16", NewWithOptions(Options{Threads: 2, DecodeBF16: true}), 2, 3, raw, false, false, simd},
	})
}

// TestWeightF16Forms: which F16 weights stay F16, in place or copied, which
// are laid out for the panel kernel as well, and which are converted.
func TestWeightF16Forms(t *testing.T) {
	raw := f16Kind.encode([]float32{1, -2.5, 3.140625, 0, 65504, -0.0001220703125, 6e-8, 1e-4})
	noPanel := NewWithOptions(Options{Threads: 2})
	noPanel.panel = false
	testWeightHalfForms(t, f16Kind, raw, []halfForm{
		{"matrix in place", noPanel, 2, 4, raw, true, true, false},
		{"matrix unaligned", noPanel, 4, 2, oddAddress(raw), true, false, false},
		{"matrix on the panel kernel", NewWithOptions(Options{Threads: 2}), 2, 4, raw, true, true, simd},
		{"vector converted", New(2), 1, 8, raw, false, false, false},
		{"DecodeF16", NewWithOptions(Options{Threads: 2, F16: F16Widen}), 2, 4, raw, false, false, simd},
	})
}

// testWeightHalfForms loads each case's weight of kind k, checks its form,
// that ToHost gives raw's values exactly and that Free drops them.
func testWeightHalfForms(t *testing.T, k halfKind, raw []byte, cases []halfForm) {
	back := make([]float32, len(raw)/2)
	k.decode(raw, back)
	want := f64(back)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w, err := c.b.Weight(k.dtype, c.rows, c.cols, c.raw)
			if err != nil {
				t.Fatal(err)
			}
			x := w.(*Tensor)
			if k.is(x) != c.half || x.readOnly != c.readOnly || (x.panels != nil) != c.panels {
				t.Errorf("%s %v read-only %v panels %v, want %v %v %v", k.name, k.is(x), x.readOnly, x.panels != nil, c.half, c.readOnly, c.panels)
			}
			closeTo(t, "ToHost", c.b.ToHost(w, nil), want, 0, 0)
			c.b.Free(w)
			if k.is(x) || x.Data() != nil {
				t.Error("Free kept the values")
			}
		})
	}
}

func TestBF16Env(t *testing.T) { testHalfEnv(t, bf16Kind, "bf16", "f16") }

func TestF16Env(t *testing.T) { testHalfEnv(t, f16Kind, "f16", "f8") }

// testHalfEnv: k's variable unset or keep leaves a new backend's weights of
// kind k as they are, "F32" has them decoded, and unknown has New panic.
func testHalfEnv(t *testing.T, k halfKind, keep, unknown string) {
	for _, c := range []struct {
		val    string
		decode bool
	}{{"", false}, {keep, false}, {"F32", true}} {
		t.Setenv(k.env, c.val)
		if b := New(1); k.decoded(b) != c.decode {
			t.Errorf("%s=%q: decode%s %v", k.env, c.val, k.name, k.decoded(b))
		}
	}
	t.Setenv(k.env, unknown)
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

// TestF16AsBF16 loads every binary16 value as a weight matrix (wider than
// the panel kernel takes: a narrower one stays F16, laid out for it) on a
// backend that rounds F16 weights to BF16 (F16AsBF16): the weight is a BF16 one
// holding exactly safetensors' rounding of each value (to nearest even;
// NaNs stay NaN), not read-only (its file pages may go), and its products
// are the products of the BF16 weight of the same values, bit for bit.
func TestF16AsBF16(t *testing.T) {
	b, err := NewChecked(Options{Threads: 2, GEMM: GEMMOneDNN, F16: F16AsBF16})
	if err != nil {
		t.Skipf("no oneDNN AVX512-BF16 kernels here: %v", err)
	}
	const rows, cols = 64, 1024 // wider than the panel kernel takes
	halves := make([]byte, 2*rows*cols)
	for i := range rows * cols {
		halves[2*i], halves[2*i+1] = byte(i), byte(i>>8)
	}
	wide := make([]float32, rows*cols)
	safetensors.F16ToF32(halves, wide)
	want := safetensors.F32ToBF16(wide)
	w, err := b.Weight(backend.F16, rows, cols, halves)
	if err != nil {
		t.Fatal(err)
	}
	x := w.(*Tensor)
	if !x.BF16() || x.F16() || x.AliasesRaw() {
		t.Fatalf("weight %v, aliases the file %v: want a BF16 copy", x, x.AliasesRaw())
	}
	for i, v := range x.bf16 {
		wv := uint16(want[2*i]) | uint16(want[2*i+1])<<8
		isNaN := func(h uint16) bool { return h&0x7f80 == 0x7f80 && h&0x7f != 0 }
		if v != wv && !(isNaN(v) && isNaN(wv)) {
			t.Fatalf("half %#04x: BF16 %#04x, want %#04x", i, v, wv)
		}
	}
	// Products: finite, moderate weights (the halves above include ±Inf
	// and NaN), against the BF16 weight of the same rounded values.
	r := rand.New(rand.NewPCG(21, 22))
	const n, in, out = 37, 600, 70
	vals := randMat(r, out, in, 1)
	fw, err := b.Weight(backend.F16, out, in, safetensors.F32ToF16(vals))
	if err != nil {
		t.Fatal(err)
	}
	rounded := make([]float32, len(vals))
	safetensors.F16ToF32(safetensors.F32ToF16(vals), rounded)
	bw, err := b.Weight(backend.BF16, out, in, safetensors.F32ToBF16(rounded))
	if err != nil {
		t.Fatal(err)
	}
	xs := b.FromHost(n, in, randMat(r, n, in, 1))
	got, ref := b.New(n, out), b.New(n, out)
	b.MatMul(got, xs, fw)
	b.MatMul(ref, xs, bw)
	closeTo(t, "F16 as BF16 vs BF16", b.ToHost(got, nil), f64(b.ToHost(ref, nil)), 0, 0)
}
