package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/dlmcache/dlmcache/internal/testutil"
	"github.com/dlmcache/dlmcache/model/backend"
	"github.com/dlmcache/dlmcache/model/safetensors"
)

// invariantBackends are the ways of computing a product with a weight
// this machine has: each GEMM library, with the panel kernel and without,
// each int8 instruction set up to this machine's (for quantized weights),
// on 1 to 4 threads. A path this processor lacks is logged as skipped.
func invariantBackends(t *testing.T) []namedBackend {
	var out []namedBackend
	for _, threads := range []int{1, 2, 3, 4} {
		for _, lib := range []GEMMLib{GEMMOpenBLAS, GEMMOneDNN} {
			b, err := newBackend(Options{Threads: threads, GEMM: lib})
			if err != nil {
				if threads == 1 {
					t.Logf("SKIPPED: %s: %v", lib, err)
				}
				continue
			}
			out = append(out, namedBackend{fmt.Sprintf("t%d-%s", threads, lib), b})
			if simd {
				nb, _ := newBackend(Options{Threads: threads, GEMM: lib})
				nb.panel = false
				out = append(out, namedBackend{fmt.Sprintf("t%d-%s-nopanel", threads, lib), nb})
			}
		}
		for isa := isaGeneric; isa < quantISA; isa++ {
			if !quantISASupported(isa) {
				if threads == 1 {
					t.Logf("SKIPPED: int8 products on %s: this CPU lacks it", isaNames[isa])
				}
				continue
			}
			b := NewWithOptions(Options{Threads: threads, GEMM: GEMMOpenBLAS})
			b.quantISA = isa
			out = append(out, namedBackend{fmt.Sprintf("t%d-quant-%s", threads, isaNames[isa]), b})
		}
	}
	if !simd {
		t.Logf("SKIPPED: the panel kernel: this CPU has no AVX2+FMA")
	}
	return out
}

// TestMatMulRowsInvariant: a row of a product with a weight is the same,
// bit for bit, whatever the other rows of the product are and however many
// threads compute it. A server runs a request's steps in batches of
// varying composition; its answers must not depend on them. Each row of
// products of 1 to 150 rows is held to the same row multiplied alone on
// one thread, for F32, BF16, F16, Q8_0 and Q4_0 weights of shapes where the
// libraries pick kernels by size (OpenBLAS's small-matrix kernels below
// 100³ multiply-adds, oneDNN below dnnlMinFlops) and past them, and for
// Q5_0, Q5_1, Q3_K, Q4_K, Q5_K and Q6_K weights of the shapes whose rows are
// whole super-blocks.
func TestMatMulRowsInvariant(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	shapes := [][2]int{{128, 128}, {384, 128}, {64, 1024}, {128, 576}, {896, 896}, {1100, 640}, {136, 768}}
	rowCounts := []int{1, 2, 3, 7, 16, 40, 150}
	kinds := []string{"F32", "BF16", "F16", "Q8_0", "Q4_0", "Q5_0", "Q5_1", "Q3_K", "Q4_K", "Q5_K", "Q6_K"}
	quants := map[string]backend.QuantType{"Q8_0": backend.Q8_0, "Q4_0": backend.Q4_0, "Q5_0": backend.Q5_0, "Q5_1": backend.Q5_1,
		"Q3_K": backend.Q3_K, "Q4_K": backend.Q4_K, "Q5_K": backend.Q5_K, "Q6_K": backend.Q6_K}
	backends := invariantBackends(t)
	for _, sh := range shapes {
		out, in := sh[0], sh[1]
		wf := randMat(rng, out, in, 0.05)
		x := randMat(rng, rowCounts[len(rowCounts)-1], in, 1)
		for _, kind := range kinds {
			qt, quant := quants[kind]
			if quant && (qt.KQuant() || qt == backend.Q5_0 || qt == backend.Q5_1) && in%256 != 0 {
				continue // (the fallback types on the same shapes, to keep the test short)
			}
			var raw []byte
			switch {
			case quant && (qt.KQuant() || qt == backend.Q5_0 || qt == backend.Q5_1):
				raw, _ = kquantWeight(t, rng, qt, out, in)
			case kind == "F32":
				raw = unsafe.Slice((*byte)(unsafe.Pointer(&wf[0])), 4*len(wf))
			case kind == "BF16":
				raw = safetensors.F32ToBF16(wf)
			case kind == "F16":
				raw = safetensors.F32ToF16(wf)
			default:
				raw, _ = quantWeight(t, rng, qt, out, in)
			}
			weight := func(b *Backend) backend.Tensor {
				var w backend.Tensor
				var err error
				switch kind {
				case "F32":
					w, err = b.Weight(backend.F32, out, in, raw)
				case "BF16":
					w, err = b.Weight(backend.BF16, out, in, raw)
				case "F16":
					w, err = b.Weight(backend.F16, out, in, raw)
				default:
					w, err = b.WeightQuant(qt, out, in, raw)
				}
				if err != nil {
					t.Fatal(err)
				}
				return w
			}
			for _, nb := range backends {
				b := nb.b
				if b.quantISA != quantISA && (kind == "F32" || kind == "BF16" || kind == "F16") {
					continue // the int8 instruction sets matter to quantized weights only
				}
				w := weight(b)
				alone := b.WithThreads(1).(*Backend)
				single := make([][]float32, rowCounts[len(rowCounts)-1])
				for i := range single {
					d := alone.New(1, out)
					alone.MatMul(d, alone.FromHost(1, in, x[i*in:(i+1)*in]), w)
					single[i] = alone.ToHost(d, nil)
				}
				for _, n := range rowCounts {
					d := b.New(n, out)
					b.MatMul(d, b.FromHost(n, in, x[:n*in]), w)
					got := b.ToHost(d, nil)
					for i := range n {
						row := got[i*out : (i+1)*out]
						for j := range row {
							if row[j] != single[i][j] {
								t.Errorf("%s, %s weight %d×%d, %d rows: row %d col %d is %v, %v alone",
									nb.name, kind, out, in, n, i, j, row[j], single[i][j])
								break
							}
						}
					}
				}
			}
		}
	}
}

// TestPlainWeightNT: the plain C product (what products with weights run
// on where OpenBLAS's rows depend on their place and the panel kernel is
// capped off) is within float32 rounding of a float64 product, and each
// row of it is bit for bit the row multiplied alone, for shapes with and
// without partial tiles.
func TestPlainWeightNT(t *testing.T) {
	for _, sh := range [][3]int{{1, 1, 1}, {7, 13, 5}, {40, 100, 640}, {150, 64, 128}, {4, 8, 33}} {
		m, n, k := sh[0], sh[1], sh[2]
		a, w := make([]float32, m*k), make([]float32, n*k)
		for i := range a {
			a[i] = float32((i*104729)%4001-2000) / 1024
		}
		for i := range w {
			w[i] = float32((i*7919)%2003-1001) / 4096
		}
		c := make([]float32, m*n)
		plainWeightNT(m, n, k, a, k, w, k, c, n)
		one := make([]float32, n)
		for i := range m {
			plainWeightNT(1, n, k, a[i*k:], k, w, k, one, n)
			for j := range n {
				var ref, mag float64
				for kk := range k {
					p := float64(a[i*k+kk]) * float64(w[j*k+kk])
					ref, mag = ref+p, mag+math.Abs(p)
				}
				if d := math.Abs(float64(c[i*n+j]) - ref); d > 1e-6*mag+1e-30 {
					t.Fatalf("%dx%dx%d: c[%d,%d] = %g, float64 product %g", m, n, k, i, j, c[i*n+j], ref)
				}
				if c[i*n+j] != one[j] {
					t.Fatalf("%dx%dx%d: row %d col %d is %g in the product, %g alone", m, n, k, i, j, c[i*n+j], one[j])
				}
			}
		}
	}
}

// TestPanelTilesSameBits: the panel kernels give the same bits on their
// AVX-512 tiles (12 rows × 32 columns) as on their AVX2 ones (6 × 16), for
// laid-out weights (panelMatMul: widths that are and are not multiples of
// 16 and 32) and blocked ones of any k and type (wgMatMul: k past one
// 512-column block), on 1 to 40 rows; both are within float32 rounding of
// a float64 product.
func TestPanelTilesSameBits(t *testing.T) {
	if !avx512 || !simd {
		t.Skip("SKIPPED: this CPU (or the ISA cap) has no AVX-512F: one set of tiles")
	}
	defer setPanelAVX512(avx512)
	rng := rand.New(rand.NewPCG(9, 10))
	b := NewWithOptions(Options{Threads: 2, GEMM: GEMMOpenBLAS})
	shapes := []struct{ out, in int }{{16, 64}, {40, 96}, {33, 130}, {80, 512}, {24, 768}, {7, 1}, {64, 1100}, {100, 640}}
	for _, sh := range shapes {
		wf := randMat(rng, sh.out, sh.in, 0.05)
		kinds := map[string][]byte{"F32": unsafe.Slice((*byte)(unsafe.Pointer(&wf[0])), 4*len(wf))}
		if sh.in > halfPanelMaxK {
			kinds["F16"], kinds["BF16"] = safetensors.F32ToF16(wf), safetensors.F32ToBF16(wf)
		}
		for kind, raw := range kinds {
			dt := map[string]backend.DType{"F32": backend.F32, "F16": backend.F16, "BF16": backend.BF16}[kind]
			w, err := b.Weight(dt, sh.out, sh.in, raw)
			if err != nil {
				t.Fatal(err)
			}
			ws := w.(*Tensor)
			run := b.wgMatMul
			if ws.panels != nil {
				run = b.panelMatMul
			}
			for _, rows := range []int{1, 5, 12, 13, 40} {
				x := randMat(rng, rows, sh.in, 1)
				var got [2][]float32
				for i, on := range []bool{false, true} {
					setPanelAVX512(on)
					d := b.New(rows, sh.out)
					run(d.(*Tensor), b.FromHost(rows, sh.in, x).(*Tensor), ws)
					got[i] = b.ToHost(d, nil)
				}
				name := fmt.Sprintf("%s %d×%d, %d rows (laid out: %v)", kind, sh.out, sh.in, rows, ws.panels != nil)
				if i := testutil.FirstDiff(got[1], got[0]); i >= 0 {
					t.Fatalf("%s: [%d] is %v on the AVX-512 tiles, %v on the AVX2 ones", name, i, got[1][i], got[0][i])
				}
				want := refMatMul(x, roundedWeight(kind, wf), rows, sh.in, sh.out)
				for i, g := range got[1] {
					if d := math.Abs(float64(g) - want[i]); d > 1e-4*(1+math.Abs(want[i])) {
						t.Fatalf("%s: [%d] = %v, float64 product %v", name, i, g, want[i])
					}
				}
			}
		}
	}
}

// roundedWeight is w as a weight of kind holds it, in float32.
func roundedWeight(kind string, w []float32) []float32 {
	out := make([]float32, len(w))
	switch kind {
	case "F16":
		safetensors.F16ToF32(safetensors.F32ToF16(w), out)
	case "BF16":
		safetensors.BF16ToF32(safetensors.F32ToBF16(w), out)
	default:
		copy(out, w)
	}
	return out
}
