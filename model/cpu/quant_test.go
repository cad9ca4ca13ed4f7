package cpu

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/dlmcache/dlmcache/model/backend"
	"github.com/dlmcache/dlmcache/model/gguf"
)

// quantTypes are the quantized weight types the backend keeps.
var quantTypes = []backend.QuantType{backend.Q8_0, backend.Q4_0}

// quantWeight quantizes a random [rows, cols] matrix to typ and returns the
// raw blocks and their exact float32 values.
func quantWeight(t testing.TB, rng *rand.Rand, typ backend.QuantType, rows, cols int) ([]byte, []float32) {
	t.Helper()
	w := make([]float32, rows*cols)
	for i := range w {
		w[i] = float32(rng.NormFloat64())
	}
	raw, err := gguf.FromF32(gguf.GGMLType(typ), w)
	if err != nil {
		t.Fatal(err)
	}
	deq, err := gguf.ToF32(gguf.GGMLType(typ), raw, len(w))
	if err != nil {
		t.Fatal(err)
	}
	return raw, deq
}

// quantCase is a product of n×in random activations x with an out×in
// quantized weight wq of type typ (raw its blocks, deq their values) and
// want, the float32 product of x with deq; scale is want's largest
// magnitude.
type quantCase struct {
	typ        backend.QuantType
	sh         [3]int
	n, in, out int
	deq, x     []float32
	wq, xs     backend.Tensor
	want       []float32
	scale      float64
}

// newQuantCase makes sh's (n, in, out) case of typ on b with weight's
// blocks.
func newQuantCase(t *testing.T, b *Backend, rng *rand.Rand, typ backend.QuantType, sh [3]int,
	weight func(testing.TB, *rand.Rand, backend.QuantType, int, int) ([]byte, []float32)) quantCase {
	t.Helper()
	c := quantCase{typ: typ, sh: sh, n: sh[0], in: sh[1], out: sh[2]}
	raw, deq := weight(t, rng, typ, c.out, c.in)
	wq, err := b.WeightQuant(typ, c.out, c.in, raw)
	if err != nil {
		t.Fatal(err)
	}
	c.deq, c.wq = deq, wq
	wf := b.FromHost(c.out, c.in, deq)
	c.x = make([]float32, c.n*c.in)
	for i := range c.x {
		c.x[i] = float32(rng.NormFloat64() * math.Exp(rng.NormFloat64()))
	}
	c.xs = b.FromHost(c.n, c.in, c.x)
	want := b.New(c.n, c.out)
	b.MatMul(want, c.xs, wf)
	c.want = b.ToHost(want, nil)
	for _, v := range c.want {
		c.scale = max(c.scale, math.Abs(float64(v)))
	}
	return c
}

// product is x·wqᵀ on b with the int8 instruction set isa (-1: decoded
// panels and sgemm).
func (c quantCase) product(b *Backend, isa int) []float32 {
	b.quantISA = isa
	got := b.New(c.n, c.out)
	b.MatMul(got, c.xs, c.wq)
	return b.ToHost(got, nil)
}

// checkValues: ToHost, Embed and a row view of wq give the dequantized
// values exactly.
func (c quantCase) checkValues(t *testing.T, b *Backend) {
	t.Helper()
	typ, sh, in, out, deq := c.typ, c.sh, c.in, c.out, c.deq
	if h := b.ToHost(c.wq, nil); !equalF32(h, deq) {
		t.Errorf("%s %v: ToHost differs from the dequantized values", typ, sh)
	}
	ids := []int32{int32(out - 1), 0, int32(out / 2)}
	e := b.New(len(ids), in)
	b.Embed(e, c.wq, ids)
	eh := b.ToHost(e, nil)
	for i, id := range ids {
		if !equalF32(eh[i*in:(i+1)*in], deq[int(id)*in:(int(id)+1)*in]) {
			t.Errorf("%s %v: Embed row %d differs", typ, sh, id)
		}
	}
	if out > 2 {
		v := b.RowView(c.wq, 1, out-1)
		if h := b.ToHost(v, nil); !equalF32(h, deq[in:(out-1)*in]) {
			t.Errorf("%s %v: RowView differs", typ, sh)
		}
	}
}

// actBound is, for each element of x·wᵀ, a bound on what quantizing x per
// block of 32 (d = max|x|/127, values rounded to the nearest multiple of
// d) can change it by: Σ_k |w_jk|·d(x_i, block of k)/2, plus float32
// rounding of the sums (1e-5 of Σ|x||w|).
func actBound(x, w []float32, n, in, out int) []float64 {
	bound := make([]float64, n*out)
	for i := range n {
		xr := x[i*in : (i+1)*in]
		half := make([]float64, in)
		for b := 0; b < in; b += 32 {
			var amax float64
			for _, v := range xr[b : b+32] {
				amax = max(amax, math.Abs(float64(v)))
			}
			for k := b; k < b+32; k++ {
				half[k] = amax / 127 / 2 * 1.0001
			}
		}
		for j := range out {
			var s, abs float64
			for k, wv := range w[j*in : (j+1)*in] {
				s += math.Abs(float64(wv)) * half[k]
				abs += math.Abs(float64(wv) * float64(xr[k]))
			}
			bound[i*out+j] = s + 1e-5*abs + 1e-6
		}
	}
	return bound
}

// TestQuantWeight: products of a Q8_0 or Q4_0 weight, on each way of
// multiplying (f32: decoded panels and sgemm; int8: activations quantized
// per row, on each instruction set this machine runs) against the same
// weight dequantized to float32: within 1e-5 for f32, within actBound for
// int8; Embed, ToHost and row views give the dequantized values exactly.
// A narrow weight, laid out for the panel kernel, within 1e-5 whatever
// the int8 setting.
func TestQuantWeight(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	isas := []int{isaGeneric}
	for isa := isaAVX2; isa <= quantISA; isa++ {
		if quantISASupported(isa) {
			isas = append(isas, isa)
		} else {
			t.Logf("SKIPPED: int8 products on %s: this CPU lacks it", isaNames[isa])
		}
	}
	if quantISA < isaAVX512VNNI {
		t.Logf("int8 products tested on %d of 4 instruction sets: this CPU lacks the others (VNNI paths run only where the CPU has them)", len(isas))
	}
	for _, typ := range quantTypes {
		for _, threads := range []int{1, 2} {
			b := New(threads)
			b.panel = false // the narrow weights too on each way of multiplying
			for _, sh := range [][3]int{{1, 64, 5}, {7, 96, 40}, {300, 256, 384}, {33, 4096, 20}, {5, 32, 3}} {
				c := newQuantCase(t, b, rng, typ, sh, quantWeight)
				bound := actBound(c.x, c.deq, c.n, c.in, c.out)
				for _, isa := range append([]int{-1}, isas...) {
					g := c.product(b, isa)
					for i, w := range c.want {
						diff := math.Abs(float64(g[i] - w))
						if isa < 0 && diff > 1e-5*c.scale || isa >= 0 && diff > bound[i] {
							t.Fatalf("%s, threads %d, %v, isa %d: element %d is %g, the dequantized weight's %g (bound %g)", typ, threads, sh, isa, i, g[i], w, bound[i])
						}
					}
				}
				c.checkValues(t, b)
			}
		}
	}
	// Where the backend runs the panel kernel, a weight of at most
	// halfPanelMaxK columns is laid out for it, decoded: its products are
	// the dequantized weight's within float32 rounding on every int8
	// setting, and its values stay exact.
	if simd {
		b := New(2)
		for _, typ := range quantTypes {
			for _, sh := range [][3]int{{300, 256, 384}, {7, 512, 40}, {5, 544, 3}} {
				c := newQuantCase(t, b, rng, typ, sh, quantWeight)
				if laid := c.wq.(*Tensor).panels != nil; laid != (sh[1] <= halfPanelMaxK) {
					t.Fatalf("%s %v: laid out for the panel kernel %v", typ, sh, laid)
				}
				for _, isa := range []int{-1, quantISA} {
					for i, w := range c.product(b, isa) {
						if sh[1] <= halfPanelMaxK && math.Abs(float64(w-c.want[i])) > 1e-5*c.scale {
							t.Fatalf("%s %v on the panel kernel, isa %d: element %d is %g, the dequantized weight's %g", typ, sh, isa, i, w, c.want[i])
						}
					}
				}
				c.checkValues(t, b)
			}
		}
	}
	b := New(1)
	for _, bad := range [][2]int{{2, 48}, {2, 0}, {-1, 32}} {
		if _, err := b.WeightQuant(backend.Q8_0, bad[0], bad[1], make([]byte, 100)); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
	if _, err := b.WeightQuant(backend.Q8_0, 2, 32, make([]byte, 67)); err == nil {
		t.Error("short data: no error")
	}
	if _, err := b.WeightQuant(backend.Q4_0, 2, 32, make([]byte, 34)); err == nil {
		t.Error("Q4_0 short data: no error")
	}
	if _, err := b.WeightQuant(backend.QuantType(10), 2, 256, make([]byte, 168)); err == nil {
		t.Error("Q2_K: no error")
	}
	if _, err := b.WeightQuant(backend.Q6_K, 2, 128, make([]byte, 210)); err == nil {
		t.Error("Q6_K with 128 columns: no error")
	}
	if _, err := b.WeightQuant(backend.Q4_K, 2, 256, make([]byte, 287)); err == nil {
		t.Error("Q4_K short data: no error")
	}
	var _ backend.QuantWeighter = b
}

// TestQuantProductsInt8Exact: the vector int8 products and the plain C one
// sum the same int32 block products, so they differ only in the order of
// the float32 accumulation (within 1e-5 of Σ|x||w|); the AVX2 activation
// quantizer and the C one agree on every value (the AVX2 product's are
// int16), and so do their block sums. Shapes cover the tile edges (rows
// of x not a multiple of 3 or 4, of w not a multiple of 8, 16 or 2, an odd
// number of whole groups of 8) and rows longer than one pack
// (QPACK_BLOCKS); the K-quants' rows are whole super-blocks of 256.
func TestQuantProductsInt8Exact(t *testing.T) {
	if quantISA == isaGeneric {
		t.Skip("no AVX2+FMA+F16C: only the plain C int8 product runs here")
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for _, typ := range append(append([]backend.QuantType{backend.Q5_0}, quantTypes...), kquantTypes...) {
		shapes := [][3]int{{1, 32, 1}, {4, 64, 2}, {6, 160, 7}, {13, 1024, 33}, {9, 4096, 11}, {5, 2048, 16}, {7, 96, 24}, {8, 1088, 136}}
		weight := quantWeight
		if typ == backend.Q5_0 {
			weight = kquantWeight
		}
		if typ.KQuant() {
			shapes = [][3]int{{1, 256, 1}, {4, 512, 2}, {6, 768, 7}, {13, 1024, 33}, {9, 4096, 11}, {5, 2048, 16}, {7, 256, 24}, {8, 1280, 136}}
			weight = kquantWeight
		}
		for _, sh := range shapes {
			n, in, out := sh[0], sh[1], sh[2]
			raw, _ := weight(t, rng, typ, out, in)
			w := &Tensor{rows: out, cols: in, stride: in, q: raw, qStride: len(raw) / out, qType: typ}
			x := make([]float32, n*in)
			for i := range x {
				x[i] = float32(rng.NormFloat64() * 3)
			}
			x[0] = 0 // and a block of zeros below
			for k := range min(32, in) {
				x[(n-1)*in+k] = 0
			}
			qg, dg, sg := make([]byte, n*in), make([]float32, n*in/32), make([]float32, n*in/32)
			quantizeAct(isaGeneric, qg, dg, sg, x, n, in, in)
			want := make([]float32, n*out)
			qMatMul(isaGeneric, n, out, in, qg, dg, sg, w, 0, want, out, make([]byte, qPackBytes))
			for isa := isaAVX2; isa <= quantISA; isa++ {
				if !quantISASupported(isa) || typ.KQuant() && kquantISA(isa) != isa {
					continue // logged by TestQuantWeight; AVX-VNNI's K-quant products are AVX2's
				}
				q, d, s := make([]byte, n*in*actBytes(isa)), make([]float32, n*in/32), make([]float32, n*in/32)
				quantizeAct(isa, q, d, s, x, n, in, in)
				if fmt.Sprint(actValues(isa, q)) != fmt.Sprint(actValues(isaGeneric, qg)) || !equalF32(d, dg) || !equalF32(s, sg) {
					t.Fatalf("%s %v isa %d: quantized activations or their sums differ from the C quantizer's", typ, sh, isa)
				}
				got := make([]float32, n*out)
				qMatMul(isa, n, out, in, q, d, s, w, 0, got, out, make([]byte, qPackBytes+1)[1:]) // unaligned: the kernel aligns it
				for i := range want {
					if math.Abs(float64(got[i]-want[i])) > 1e-5*math.Abs(float64(want[i]))+1e-4 {
						t.Fatalf("%s %v isa %d: element %d is %g, the C product's %g", typ, sh, isa, i, got[i], want[i])
					}
				}
			}
		}
	}
}

// TestQuantRowsGeneric: the AVX2 decoder and the plain C one agree bit for
// bit with gguf's decoder (the Go test machine runs the one it has; this
// runs both).
func TestQuantRowsGeneric(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, typ := range quantTypes {
		raw, deq := quantWeight(t, rng, typ, 5, 128)
		w := &Tensor{rows: 5, cols: 128, stride: 128, q: raw, qStride: len(raw) / 5, qType: typ}
		for _, s := range []bool{false, true} {
			dst := make([]float32, 5*128)
			quantRowsWith(s, dst, w, 0, 5)
			if !equalF32(dst, deq) {
				t.Errorf("%s simd %v: decoded values differ from gguf's", typ, s)
			}
		}
	}
}

// actValues reads quantized activations as quantizeAct wrote them for isa
// (int16 for AVX2, u8 q + 128 for AVX512-VNNI, else int8).
func actValues(isa int, q []byte) []int {
	v := make([]int, len(q)/actBytes(isa))
	for i := range v {
		switch {
		case actBytes(isa) == 2:
			v[i] = int(int16(binary.LittleEndian.Uint16(q[2*i:])))
		case isa == isaAVX512VNNI: // u8, q + 128
			v[i] = int(q[i]) - 128
		default:
			v[i] = int(int8(q[i]))
		}
	}
	return v
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
