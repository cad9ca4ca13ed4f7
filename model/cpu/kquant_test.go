package cpu

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dlmcache/dlmcache/model/backend"
	"github.com/dlmcache/dlmcache/model/gguf"
	"github.com/dlmcache/dlmcache/model/safetensors"
)

// kquantTypes are the K-quants the backend keeps, and IQ4_XS.
var kquantTypes = []backend.QuantType{backend.Q3_K, backend.Q4_K, backend.Q5_K, backend.Q6_K, backend.IQ4_XS}

// fallbackTypes are the 32-value types llama-quantize writes where a row
// is no whole super-block (Q4_K → Q5_0, Q5_K → Q5_1, IQ4_XS → IQ4_NL;
// and Q4_1).
var fallbackTypes = []backend.QuantType{backend.Q4_1, backend.Q5_0, backend.Q5_1, backend.IQ4_NL}

// kquantWeight returns a random [rows, cols] weight of the K-quant or
// fallback type typ (random bytes, its float16 scales set so that values
// are of order 1) and its values as gguf decodes them (itself held to an
// independent dequantizer's golden values, gguf's TestKQuantsGolden).
func kquantWeight(t testing.TB, rng *rand.Rand, typ backend.QuantType, rows, cols int) ([]byte, []float32) {
	t.Helper()
	bb := typ.BlockBytes()
	raw := make([]byte, rows*cols/typ.BlockValues()*bb)
	for i := range raw {
		raw[i] = byte(rng.Uint32())
	}
	half := func(v float64) []byte { return safetensors.F32ToF16([]float32{float32(v)}) }
	for o := 0; o < len(raw); o += bb {
		switch typ {
		case backend.Q6_K: // values d·sc·(q−32): |sc| ≤ 128, |q−32| ≤ 32
			copy(raw[o+208:], half(rng.NormFloat64()/2000))
		case backend.Q3_K: // values d·(sc−32)·q: |sc−32| ≤ 32, |q| ≤ 4
			copy(raw[o+108:], half(rng.NormFloat64()/100))
		case backend.IQ4_XS: // values d·(sc−32)·level: |sc−32| ≤ 32, |level| ≤ 127
			copy(raw[o:], half(rng.NormFloat64()/3000))
		case backend.Q5_0: // (q − 16)·d, |q − 16| ≤ 16
			copy(raw[o:], half(rng.NormFloat64()/16))
		case backend.IQ4_NL: // level·d, |level| ≤ 127
			copy(raw[o:], half(rng.NormFloat64()/100))
		case backend.Q4_1, backend.Q5_1: // q·d + m, q ≤ 31
			copy(raw[o:], half(rng.NormFloat64()/16))
			copy(raw[o+2:], half(rng.NormFloat64()))
		default: // (d·sc)·q − dmin·m: sc, m ≤ 63, q ≤ 31
			copy(raw[o:], half(rng.NormFloat64()/1000))
			copy(raw[o+2:], half(math.Abs(rng.NormFloat64())/60))
		}
	}
	deq, err := gguf.ToF32(gguf.GGMLType(typ), raw, rows*cols)
	if err != nil {
		t.Fatal(err)
	}
	return raw, deq
}

// TestKQuantRowsGolden: the C decoders (AVX2 and plain C) read the
// golden K-quant and fallback blocks bit for bit as the independent Python
// dequantizer does (model/testdata/kquants, tools/kquants).
func TestKQuantRowsGolden(t *testing.T) {
	for _, typ := range append(append([]backend.QuantType{}, kquantTypes...), fallbackTypes...) {
		name := strings.ToLower(typ.String())
		raw, err := os.ReadFile(filepath.Join("..", "testdata", "kquants", name+".bin"))
		if err != nil {
			t.Fatal(err)
		}
		vb, err := os.ReadFile(filepath.Join("..", "testdata", "kquants", name+".f32"))
		if err != nil {
			t.Fatal(err)
		}
		// The golden blocks as one row and as rows of one block each.
		for _, cols := range []int{len(vb) / 4, typ.BlockValues()} {
			rows := len(vb) / 4 / cols
			w := &Tensor{rows: rows, cols: cols, stride: cols, q: raw, qStride: len(raw) / rows, qType: typ}
			for _, s := range []bool{false, true} {
				dst := make([]float32, rows*cols)
				quantRowsWith(s, dst, w, 0, rows)
				bad := 0
				for i := range dst {
					if math.Float32bits(dst[i]) != binary.LittleEndian.Uint32(vb[4*i:]) {
						bad++
					}
				}
				if bad > 0 {
					t.Errorf("%s, %d columns, simd %v: %d of %d values differ from the reference's", typ, cols, s, bad, len(dst))
				}
			}
		}
	}
}

// TestKQuantWeight: products of a Q4_K, Q5_K or Q6_K weight, and of a
// Q4_1, Q5_0 or Q5_1 one (int8 products for Q5_0; Q4_1 and Q5_1 always
// decoded), on each way of multiplying (f32: decoded panels and sgemm, within 1e-5 of the
// largest element; int8: activations quantized per row, on each
// instruction set this machine runs, within actBound) against the same
// weight dequantized to float32; the AVX2 and C decoders agree with
// gguf's bit for bit; Embed, ToHost and row views give the dequantized
// values exactly.
func TestKQuantWeight(t *testing.T) {
	rng := rand.New(rand.NewPCG(51, 52))
	isas := []int{isaGeneric}
	for isa := isaAVX2; isa <= quantISA; isa++ {
		if quantISASupported(isa) {
			isas = append(isas, isa)
		}
	}
	for _, typ := range append(append([]backend.QuantType{}, kquantTypes...), fallbackTypes...) {
		for _, threads := range []int{1, 2} {
			b := New(threads)
			b.panel = false // the narrow weights too on each way of multiplying
			for _, sh := range [][3]int{{1, 256, 5}, {7, 512, 40}, {300, 256, 384}, {33, 4096, 20}, {5, 768, 3}} {
				c := newQuantCase(t, b, rng, typ, sh, kquantWeight)
				bound := actBound(c.x, c.deq, c.n, c.in, c.out)
				for _, isa := range append([]int{-1}, isas...) {
					g := c.product(b, isa)
					for i, w := range c.want {
						diff := math.Abs(float64(g[i] - w))
						if isa < 0 && !(diff <= 1e-5*c.scale) || isa >= 0 && !(diff <= bound[i]) {
							t.Fatalf("%s, threads %d, %v, isa %d: element %d is %g, the dequantized weight's %g (bound %g)", typ, threads, sh, isa, i, g[i], w, bound[i])
						}
					}
				}
				for _, s := range []bool{false, true} {
					dst := make([]float32, c.out*c.in)
					quantRowsWith(s, dst, c.wq.(*Tensor), 0, c.out)
					if !equalF32(dst, c.deq) {
						t.Fatalf("%s %v simd %v: decoded values differ from gguf's", typ, sh, s)
					}
				}
				c.checkValues(t, b)
			}
		}
	}
}
