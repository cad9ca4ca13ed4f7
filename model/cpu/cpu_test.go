package cpu

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/dlmcache/dlmcache/model/backend"
)

// namedBackend is one configuration of backends().
type namedBackend struct {
	name string
	b    *Backend
}

// backends are the configurations every op is tested under: single
// threaded, split over goroutines (by columns, by rows) and OpenBLAS
// threaded, on OpenBLAS; and, where oneDNN loads and passes its start-up
// check, on one and two threads with the larger products on oneDNN (BF16
// weights on its BF16 matmul where the CPU has AVX512-BF16); the fused
// attention kernels, the panel kernel and the plain C row-wise ops beside
// the AVX2 ones.
func backends() []namedBackend {
	// The OpenBLAS backends keep Attention on the GEMM path; t1fused and
	// t2fused, and the oneDNN ones, run the widest fused kernel the CPU
	// has; on an AVX-512 CPU t1avx2 and t2avx2 run the AVX2 one too.
	blas := func(threads int) *Backend {
		return NewWithOptions(Options{Threads: threads, GEMM: GEMMOpenBLAS, Attention: AttentionGEMM})
	}
	cols := blas(3)
	cols.splitMode = splitCols
	rows := blas(2)
	rows.splitMode = splitRows
	scalar := blas(2)
	scalar.scalarOps = true
	out := []namedBackend{{"t1", blas(1)}, {"t2", blas(2)}, {"t3cols", cols}, {"t2rows", rows}, {"t2scalar", scalar},
		{"t1fused", NewWithOptions(Options{Threads: 1, GEMM: GEMMOpenBLAS})},
		{"t2fused", NewWithOptions(Options{Threads: 2, GEMM: GEMMOpenBLAS})}}
	for _, threads := range []int{1, 2} {
		fused := func() *Backend { return NewWithOptions(Options{Threads: threads, GEMM: GEMMOpenBLAS}) }
		// The panel kernel, wherever AVX2 runs (auto picks it only on a
		// CPU without AVX-512).
		if simd {
			b := fused()
			b.panel = true
			out = append(out, namedBackend{fmt.Sprintf("t%dpanel", threads), b})
		}
		if bestAttn == attnAVX512 && simd {
			b := fused()
			b.attn = attnAVX2
			out = append(out, namedBackend{fmt.Sprintf("t%davx2", threads), b})
		}
		if b, err := newBackend(Options{Threads: threads, GEMM: GEMMOneDNN}); err == nil {
			out = append(out, namedBackend{fmt.Sprintf("t%donednn", threads), b})
		}
	}
	// Weights made by Weight packed for oneDNN at load.
	if b, err := newBackend(Options{Threads: 2, GEMM: GEMMOneDNN, PackWeights: true}); err == nil {
		out = append(out, namedBackend{"t2packed", b})
	}
	return out
}

// bf16Activations returns x as b's BF16 products see it: rounded to BF16
// where b multiplies BF16 weights on oneDNN, else x itself.
func bf16Activations(b *Backend, x []float32) []float32 {
	if !b.BF16Activations() {
		return x
	}
	h := make([]uint16, len(x))
	toBF16(h, x, 1, len(x), len(x))
	out := make([]float32, len(x))
	for i, v := range h {
		out[i] = math.Float32frombits(uint32(v) << 16)
	}
	return out
}

// weightF32 loads w [rows, cols] through b.Weight, as a checkpoint's
// F32 tensor.
func weightF32(tb testing.TB, b *Backend, rows, cols int, w []float32) backend.Tensor {
	raw := make([]byte, 4*len(w))
	for i, v := range w {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(v))
	}
	t, err := b.Weight(backend.F32, rows, cols, raw)
	if err != nil {
		tb.Fatal(err)
	}
	return t
}

func randMat(r *rand.Rand, rows, cols int, scale float64) []float32 {
	m := make([]float32, rows*cols)
	for i := range m {
		m[i] = float32(r.NormFloat64() * scale)
	}
	return m
}

// closeTo reports the first element where got and want differ by more than
// atol + rtol·|want|.
func closeTo(t *testing.T, what string, got []float32, want []float64, atol, rtol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range got {
		if d := math.Abs(float64(got[i]) - want[i]); !(d <= atol+rtol*math.Abs(want[i])) {
			t.Fatalf("%s: element %d = %g, want %g (diff %g)", what, i, got[i], want[i], d)
		}
	}
}

func refMatMul(x []float32, w []float32, n, in, out int) []float64 {
	y := make([]float64, n*out)
	for i := 0; i < n; i++ {
		for o := 0; o < out; o++ {
			var s float64
			for j := 0; j < in; j++ {
				s += float64(x[i*in+j]) * float64(w[o*in+j])
			}
			y[i*out+o] = s
		}
	}
	return y
}

func TestMatMul(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	shapes := []struct{ n, in, out int }{
		{1, 1, 1}, {1, 7, 3}, {1, 300, 517}, {3, 5, 1}, {5, 33, 17},
		{37, 129, 65}, {200, 64, 300}, {130, 97, 16}, {513, 40, 7}, {64, 256, 250},
		// the panel kernel's tails: rows past a 6-row tile and a 96-row
		// block, columns past a 16-column panel, k at its limit and past it
		{13, 128, 40}, {100, 384, 130}, {7, 512, 33}, {9, 513, 20}, {700, 128, 384},
	}
	for _, bk := range backends() {
		for _, s := range shapes {
			t.Run(fmt.Sprintf("%s/%dx%dx%d", bk.name, s.n, s.in, s.out), func(t *testing.T) {
				b := bk.b
				x := randMat(r, s.n, s.in, 1)
				w := randMat(r, s.out, s.in, 1)
				want := refMatMul(x, w, s.n, s.in, s.out)
				dst := b.New(s.n, s.out)
				b.MatMul(dst, b.FromHost(s.n, s.in, x), b.FromHost(s.out, s.in, w))
				closeTo(t, "MatMul", b.ToHost(dst, nil), want, 1e-4*math.Sqrt(float64(s.in)), 1e-5)
				// w as a model's weight: laid out at load where the
				// backend does that (oneDNN's packing, the panel kernel).
				bw := weightF32(t, b, s.out, s.in, w)
				if got := bw.(*Tensor).panels != nil; got != (b.panel && s.out > 1 && s.in <= panelMaxK) {
					t.Errorf("panels laid out %v, backend's panel %v", got, b.panel)
				}
				b.MatMul(dst, b.FromHost(s.n, s.in, x), bw)
				closeTo(t, "MatMul, weight", b.ToHost(dst, nil), want, 1e-4*math.Sqrt(float64(s.in)), 1e-5)
			})
		}
	}
}

func TestMatMulEmpty(t *testing.T) {
	b := New(2)
	// in = 0: an empty sum, every output 0 (dst starts non-zero).
	dst := b.FromHost(2, 3, []float32{1, 2, 3, 4, 5, 6})
	b.MatMul(dst, b.New(2, 0), b.New(3, 0))
	closeTo(t, "MatMul in=0", b.ToHost(dst, nil), make([]float64, 6), 0, 0)
	// n = 0 and out = 0 do nothing.
	b.MatMul(b.New(0, 3), b.New(0, 4), b.New(3, 4))
	b.MatMul(b.New(2, 0), b.New(2, 4), b.New(0, 4))
	w, err := b.Weight(backend.BF16, 0, 5, nil)
	if err != nil || w.Rows() != 0 || w.Cols() != 5 {
		t.Fatalf("empty weight: %v %v", w, err)
	}
}

func TestParallelCoversEveryIndexOnce(t *testing.T) {
	b := New(3)
	for _, c := range []struct{ n, grain, parts int }{
		{0, 1, 0}, {1, 1, 1}, {5, 1, 3}, {5, 2, 2}, {5, 3, 1}, {100, 10, 3}, {7, 0, 3},
	} {
		var seen []int
		chunks := 0
		var mu sync.Mutex
		b.parallel(c.n, c.grain, func(lo, hi int) {
			mu.Lock()
			defer mu.Unlock()
			chunks++
			for i := lo; i < hi; i++ {
				seen = append(seen, i)
			}
		})
		slices.Sort(seen)
		if len(seen) != c.n || chunks != c.parts {
			t.Errorf("parallel(%d, %d): %d chunks covering %v, want %d chunks", c.n, c.grain, chunks, seen, c.parts)
		}
		for i, v := range seen {
			if v != i {
				t.Fatalf("parallel(%d, %d): covered %v", c.n, c.grain, seen)
			}
		}
	}
}

func TestMatMulViews(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	b := New(2)
	const n, in, out = 70, 50, 90
	big := randMat(r, n+3, in+5, 1)
	bx := b.FromHost(n+3, in+5, big)
	xv := b.ColView(b.RowView(bx, 2, 2+n), 3, 3+in)
	x := b.ToHost(xv, nil)
	w := randMat(r, out, in, 1)
	bd := b.New(n, out+10)
	dv := b.ColView(bd, 4, 4+out)
	b.MatMul(dv, xv, b.FromHost(out, in, w))
	closeTo(t, "MatMul view", b.ToHost(dv, nil), refMatMul(x, w, n, in, out), 1e-3, 1e-5)
	all := b.ToHost(bd, nil)
	for i := 0; i < n; i++ {
		for j := 0; j < out+10; j++ {
			if (j < 4 || j >= 4+out) && all[i*(out+10)+j] != 0 {
				t.Fatalf("MatMul wrote outside its view at (%d, %d)", i, j)
			}
		}
	}
}

func refAttention(q, k, v []float32, nq, nk, nHeads, nKV, hd int) []float64 {
	out := make([]float64, nq*nHeads*hd)
	qc, kc := nHeads*hd, nKV*hd
	scale := 1 / math.Sqrt(float64(hd))
	for h := 0; h < nHeads; h++ {
		kh := h / (nHeads / nKV)
		for i := 0; i < nq; i++ {
			s := make([]float64, nk)
			m := math.Inf(-1)
			for j := 0; j < nk; j++ {
				var dot float64
				for c := 0; c < hd; c++ {
					dot += float64(q[i*qc+h*hd+c]) * float64(k[j*kc+kh*hd+c])
				}
				s[j] = dot * scale
				m = math.Max(m, s[j])
			}
			var sum float64
			for j := range s {
				s[j] = math.Exp(s[j] - m)
				sum += s[j]
			}
			for c := 0; c < hd; c++ {
				var o float64
				for j := 0; j < nk; j++ {
					o += s[j] / sum * float64(v[j*kc+kh*hd+c])
				}
				out[i*qc+h*hd+c] = o
			}
		}
	}
	return out
}

func TestAttentionMatchesFloat64Reference(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	cases := []struct{ nq, nk, nHeads, nKV, hd int }{
		{1, 1, 1, 1, 1},
		{1, 5, 2, 2, 3},
		{7, 1, 3, 1, 5},
		{5, 9, 4, 2, 6},
		{65, 70, 4, 4, 8},  // crosses a query block
		{130, 33, 6, 2, 7}, // GQA, group 3
		{3, 200, 8, 1, 16}, // multi-query
		{129, 129, 2, 2, 64},
		{9, 513, 4, 4, 32},   // the bundled model's head size; 8-row tiles and a tail
		{17, 40, 2, 1, 128},  // l16-d2048's head size, GQA
		{33, 31, 3, 3, 48},   // a head of one and a half 32-column tiles
		{300, 300, 4, 4, 32}, // several tasks per head
		{13, 21, 2, 2, 12},   // AVX2: a head of one and a half 8-lane vectors
		{40, 37, 4, 4, 80},   // a head of 80: v laid out ten vectors a row
		{20, 23, 3, 3, 100},  // a head not a whole number of vectors
		{60, 1500, 2, 2, 32}, // AVX2: long rows, query blocks of 18 (scores ≤ 128 KB)
	}
	for _, bk := range backends() {
		for _, c := range cases {
			t.Run(fmt.Sprintf("%s/%+v", bk.name, c), func(t *testing.T) {
				b := bk.b
				// Scale 3 makes the softmax peaked, so that a missing max
				// subtraction or a wrong kv head shows.
				q := randMat(r, c.nq, c.nHeads*c.hd, 3)
				k := randMat(r, c.nk, c.nKV*c.hd, 3)
				v := randMat(r, c.nk, c.nKV*c.hd, 1)
				dst := b.New(c.nq, c.nHeads*c.hd)
				b.Attention(dst, b.FromHost(c.nq, c.nHeads*c.hd, q), b.FromHost(c.nk, c.nKV*c.hd, k), b.FromHost(c.nk, c.nKV*c.hd, v), c.nHeads, c.nKV)
				closeTo(t, "Attention", b.ToHost(dst, nil), refAttention(q, k, v, c.nq, c.nk, c.nHeads, c.nKV, c.hd), 2e-5, 1e-4)
			})
		}
	}
}

// TestAttentionPackGroups: the fused kernel laying out its kv heads one
// or two at a time (a long sequence's way) gives what it gives with them
// all at once.
func TestAttentionPackGroups(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 16))
	defer func(v int) { attnGroupPack = v }(attnGroupPack)
	for _, c := range []struct{ nq, nk, nHeads, nKV, hd int }{
		{40, 70, 6, 3, 32}, {9, 33, 4, 4, 16}, {70, 20, 8, 2, 64},
	} {
		q := randMat(r, c.nq, c.nHeads*c.hd, 3)
		k := randMat(r, c.nk, c.nKV*c.hd, 3)
		v := randMat(r, c.nk, c.nKV*c.hd, 1)
		want := refAttention(q, k, v, c.nq, c.nk, c.nHeads, c.nKV, c.hd)
		per := attnLayout(c.hd, c.nk)
		for _, pack := range []int{1, 2 * per, 1 << 20} {
			attnGroupPack = pack
			for _, threads := range []int{1, 2} {
				b := NewWithOptions(Options{Threads: threads, GEMM: GEMMOpenBLAS})
				dst := b.New(c.nq, c.nHeads*c.hd)
				b.Attention(dst, b.FromHost(c.nq, c.nHeads*c.hd, q), b.FromHost(c.nk, c.nKV*c.hd, k), b.FromHost(c.nk, c.nKV*c.hd, v), c.nHeads, c.nKV)
				closeTo(t, fmt.Sprintf("%+v pack %d threads %d", c, pack, threads), b.ToHost(dst, nil), want, 2e-5, 1e-4)
			}
		}
	}
}

// TestAttentionWeightsExact: with v's rows one-hot, Attention's output is
// its softmax weights themselves, held to a few float32 roundings of the
// float64 reference — close enough that an e^x (or 2^x) polynomial off in
// its fourth digit fails, which the tolerances of TestAttentionMatchesFloat64Reference let pass.
func TestAttentionWeightsExact(t *testing.T) {
	r := rand.New(rand.NewPCG(27, 28))
	const nq, nk, hd = 13, 29, 32
	q, k := randMat(r, nq, hd, 1), randMat(r, nk, hd, 0.5)
	v := make([]float32, nk*hd)
	for j := range nk {
		v[j*hd+j] = 1
	}
	want := refAttention(q, k, v, nq, nk, 1, 1, hd)
	for _, bk := range backends() {
		dst := bk.b.New(nq, hd)
		bk.b.Attention(dst, bk.b.FromHost(nq, hd, q), bk.b.FromHost(nk, hd, k), bk.b.FromHost(nk, hd, v), 1, 1)
		closeTo(t, bk.name, bk.b.ToHost(dst, nil), want, 1e-9, 2e-6)
	}
}

func TestAttentionLargeScores(t *testing.T) {
	// Scores around ±1000 overflow e^s without the max subtraction.
	b := New(2)
	q := []float32{100, 100}
	k := []float32{10, 10, -10, -10, 9.9, 10}
	v := []float32{1, 2, 3, 4, 5, 6}
	dst := b.New(1, 2)
	b.Attention(dst, b.FromHost(1, 2, q), b.FromHost(3, 2, k), b.FromHost(3, 2, v), 1, 1)
	closeTo(t, "Attention", b.ToHost(dst, nil), refAttention(q, k, v, 1, 3, 1, 1, 2), 1e-5, 1e-5)

	// Every score near −560, a row of keys that is not a whole vector:
	// a kernel that let the zero padding past the last key into the row
	// max would find e^(s − 0) = 0 for every key.
	r := rand.New(rand.NewPCG(25, 26))
	const nq, nk, hd = 7, 21, 32
	q, k, v = make([]float32, nq*hd), make([]float32, nk*hd), randMat(r, nk, hd, 1)
	for i := range q {
		q[i] = 10
	}
	for i := range k {
		k[i] = float32(-10 + r.Float64())
	}
	for _, bk := range backends() {
		dst := bk.b.New(nq, hd)
		bk.b.Attention(dst, bk.b.FromHost(nq, hd, q), bk.b.FromHost(nk, hd, k), bk.b.FromHost(nk, hd, v), 1, 1)
		closeTo(t, bk.name+" negative scores", bk.b.ToHost(dst, nil), refAttention(q, k, v, nq, nk, 1, 1, hd), 1e-3, 1e-3)
	}
}

func TestRMSNorm(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, bk := range backends() {
		for _, s := range []struct{ n, d int }{{1, 1}, {1, 7}, {3, 13}, {600, 33}, {40, 1000}} {
			t.Run(fmt.Sprintf("%s/%dx%d", bk.name, s.n, s.d), func(t *testing.T) {
				b := bk.b
				x := randMat(r, s.n, s.d, 2)
				w := randMat(r, 1, s.d, 1)
				const eps = 1e-5
				want := make([]float64, len(x))
				for i := 0; i < s.n; i++ {
					var ss float64
					for j := 0; j < s.d; j++ {
						ss += float64(x[i*s.d+j]) * float64(x[i*s.d+j])
					}
					rs := 1 / math.Sqrt(ss/float64(s.d)+eps)
					for j := 0; j < s.d; j++ {
						want[i*s.d+j] = float64(x[i*s.d+j]) * rs * float64(w[j])
					}
				}
				dst := b.New(s.n, s.d)
				b.RMSNorm(dst, b.FromHost(s.n, s.d, x), b.FromHost(1, s.d, w), eps)
				closeTo(t, "RMSNorm", b.ToHost(dst, nil), want, 1e-6, 1e-6)
			})
		}
	}
}

func TestRoPE(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for _, bk := range backends() {
		// maxPos grows from case to case so that the cached tables grow;
		// positions past the cache and negative ones are computed directly.
		for _, s := range []struct{ n, heads, hd, maxPos int }{
			{1, 1, 2, 10}, {3, 2, 6, 100}, {5, 3, 10, 100}, {300, 4, 64, 900}, {300, 4, 64, 4000}, {40, 2, 6, 3 * maxRopePositions},
		} {
			t.Run(fmt.Sprintf("%s/%+v", bk.name, s), func(t *testing.T) {
				b := bk.b
				const theta = 500000.0
				cols := s.heads * s.hd
				x := randMat(r, s.n, cols, 1)
				pos := make([]int32, s.n)
				for i := range pos {
					pos[i] = int32(r.IntN(s.maxPos)) // not contiguous
				}
				if s.n > 1 {
					pos[s.n-1] = -int32(r.IntN(50)) - 1
				}
				want := make([]float64, len(x))
				half := s.hd / 2
				for i := 0; i < s.n; i++ {
					for h := 0; h < s.heads; h++ {
						base := i*cols + h*s.hd
						for j := 0; j < half; j++ {
							a := float64(pos[i]) * math.Pow(theta, -2*float64(j)/float64(s.hd))
							x1, x2 := float64(x[base+j]), float64(x[base+j+half])
							want[base+j] = x1*math.Cos(a) - x2*math.Sin(a)
							want[base+j+half] = x2*math.Cos(a) + x1*math.Sin(a)
						}
					}
				}
				bx := b.FromHost(s.n, cols, x)
				b.RoPE(bx, pos, s.hd, theta)
				closeTo(t, "RoPE", b.ToHost(bx, nil), want, 1e-6, 1e-6)
			})
		}
	}
}

func TestRoPEPositionZeroIsIdentity(t *testing.T) {
	b := New(1)
	x := []float32{1, 2, 3, 4, 5, 6, 7, 8}
	bx := b.FromHost(2, 4, x)
	b.RoPE(bx, []int32{0, 0}, 4, 10000)
	got := b.ToHost(bx, nil)
	for i := range x {
		if got[i] != x[i] {
			t.Fatalf("RoPE at position 0 changed element %d: %g → %g", i, x[i], got[i])
		}
	}
}

func TestSiLUMulAddEmbed(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for _, bk := range backends() {
		for _, s := range []struct{ n, d int }{{1, 1}, {1, 5}, {7, 3}, {900, 37}} {
			t.Run(fmt.Sprintf("%s/%dx%d", bk.name, s.n, s.d), func(t *testing.T) {
				b := bk.b
				g := randMat(r, s.n, s.d, 4)
				u := randMat(r, s.n, s.d, 1)
				want := make([]float64, len(g))
				sum := make([]float64, len(g))
				for i := range g {
					gi := float64(g[i])
					want[i] = gi / (1 + math.Exp(-gi)) * float64(u[i])
					sum[i] = float64(g[i]) + float64(u[i])
				}
				dst := b.New(s.n, s.d)
				bg, bu := b.FromHost(s.n, s.d, g), b.FromHost(s.n, s.d, u)
				b.SiLUMul(dst, bg, bu)
				closeTo(t, "SiLUMul", b.ToHost(dst, nil), want, 1e-6, 1e-6)
				// dst aliasing gate.
				b.SiLUMul(bg, bg, bu)
				closeTo(t, "SiLUMul in place", b.ToHost(bg, nil), want, 1e-6, 1e-6)

				ba := b.FromHost(s.n, s.d, g)
				b.Add(ba, bu)
				closeTo(t, "Add", b.ToHost(ba, nil), sum, 0, 1e-7)

				vocab := s.n + 3
				table := randMat(r, vocab, s.d, 1)
				ids := make([]int32, s.n)
				emb := make([]float64, s.n*s.d)
				for i := range ids {
					ids[i] = int32(r.IntN(vocab))
					for j := 0; j < s.d; j++ {
						emb[i*s.d+j] = float64(table[int(ids[i])*s.d+j])
					}
				}
				be := b.New(s.n, s.d)
				b.Embed(be, b.FromHost(vocab, s.d, table), ids)
				closeTo(t, "Embed", b.ToHost(be, nil), emb, 0, 0)
			})
		}
	}
}

func TestCopyRows(t *testing.T) {
	b := New(2)
	mk := func(rows, cols int, base float32) []float32 {
		m := make([]float32, rows*cols)
		for i := range m {
			m[i] = base + float32(i)
		}
		return m
	}
	const cols = 3
	src := mk(4, cols, 100)
	cases := []struct {
		name             string
		dstN             int
		dstRows, srcRows []int32
		want             [][]int // for each dst row, the src row it holds, -1 untouched
	}{
		{"both nil, dst shorter", 3, nil, nil, [][]int{{0}, {1}, {2}}},
		{"both nil, dst longer", 6, nil, nil, [][]int{{0}, {1}, {2}, {3}, {-1}, {-1}}},
		{"dst nil", 3, nil, []int32{3, 1}, [][]int{{3}, {1}, {-1}}},
		{"src nil", 5, []int32{4, 0, 2}, nil, [][]int{{1}, {-1}, {2}, {-1}, {0}}},
		{"both", 4, []int32{1, 3}, []int32{2, 2}, [][]int{{-1}, {2}, {-1}, {2}}},
		{"empty", 2, []int32{}, []int32{}, [][]int{{-1}, {-1}}},
		{"duplicate dst: last wins", 2, []int32{0, 0, 1}, []int32{1, 3, 2}, [][]int{{3}, {2}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dstInit := mk(c.dstN, cols, -50)
			dst := b.FromHost(c.dstN, cols, dstInit)
			b.CopyRows(dst, c.dstRows, b.FromHost(4, cols, src), c.srcRows)
			got := b.ToHost(dst, nil)
			for i, w := range c.want {
				for j := 0; j < cols; j++ {
					want := dstInit[i*cols+j]
					if w[0] >= 0 {
						want = src[w[0]*cols+j]
					}
					if got[i*cols+j] != want {
						t.Fatalf("row %d col %d = %g, want %g", i, j, got[i*cols+j], want)
					}
				}
			}
		})
	}
	// Large enough to run split over goroutines.
	r := rand.New(rand.NewPCG(13, 14))
	const n, d = 3000, 20
	big := randMat(r, n, d, 1)
	perm := make([]int32, n)
	for i, p := range r.Perm(n) {
		perm[i] = int32(p)
	}
	dst := b.New(n, d)
	b.CopyRows(dst, perm, b.FromHost(n, d, big), nil)
	got := b.ToHost(dst, nil)
	for i, p := range perm {
		for j := 0; j < d; j++ {
			if got[int(p)*d+j] != big[i*d+j] {
				t.Fatalf("permuted copy: dst row %d col %d wrong", p, j)
			}
		}
	}
}

func TestWeightDecodesF32BF16AndF16(t *testing.T) {
	b := NewWithOptions(Options{Threads: 2}) // F16 kept (TestF16AsBF16 has the rounded form)
	vals := []float32{0, 1, -2.5, 3.140625, 65504, -0.0001220703125, 5.960464477539063e-08, float32(math.Inf(-1))}
	const rows, cols = 2, 4
	f32 := make([]byte, 4*len(vals)+4) // +4: a too-long input below
	bf16 := make([]byte, 2*len(vals))
	f16 := make([]byte, 2*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint32(f32[4*i:], math.Float32bits(v))
		binary.LittleEndian.PutUint16(bf16[2*i:], uint16(math.Float32bits(v)>>16))
	}
	// Half-precision encodings of vals, written out by hand.
	for i, h := range []uint16{0x0000, 0x3c00, 0xc100, 0x4248, 0x7bff, 0x8800, 0x0001, 0xfc00} {
		binary.LittleEndian.PutUint16(f16[2*i:], h)
	}
	bf16Want := make([]float32, len(vals))
	for i, v := range vals {
		bf16Want[i] = math.Float32frombits(math.Float32bits(v) &^ 0xffff)
	}
	// An unaligned copy of the F32 bytes exercises the converting path.
	unaligned := make([]byte, 4*len(vals)+1)
	copy(unaligned[1:], f32[:4*len(vals)])
	cases := []struct {
		name  string
		dtype backend.DType
		raw   []byte
		want  []float32
	}{
		{"F32 in place", backend.F32, f32[:4*len(vals)], vals},
		{"F32 unaligned", backend.F32, unaligned[1:], vals},
		{"BF16", backend.BF16, bf16, bf16Want},
		{"F16", backend.F16, f16, []float32{0, 1, -2.5, 3.140625, 65504, -0.0001220703125, 5.960464477539063e-08, float32(math.Inf(-1))}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w, err := b.Weight(c.dtype, rows, cols, c.raw)
			if err != nil {
				t.Fatal(err)
			}
			if w.Rows() != rows || w.Cols() != cols {
				t.Fatalf("shape [%d, %d]", w.Rows(), w.Cols())
			}
			got := b.ToHost(w, nil)
			for i := range got {
				if got[i] != c.want[i] {
					t.Fatalf("element %d = %g, want %g", i, got[i], c.want[i])
				}
			}
		})
	}
	if w, _ := b.Weight(backend.F32, rows, cols, f32[:4*len(vals)]); !w.(*Tensor).readOnly {
		t.Error("aligned F32 weight was copied, want it used in place")
	}
	for _, bad := range []struct {
		name  string
		dtype backend.DType
		raw   []byte
	}{
		{"short", backend.F32, f32[:4*len(vals)-1]},
		{"long", backend.BF16, f32},
		{"dtype", backend.DType(9), bf16},
	} {
		if _, err := b.Weight(bad.dtype, rows, cols, bad.raw); err == nil {
			t.Errorf("%s: no error", bad.name)
		}
	}
}

// TestF16AllValues converts every IEEE half, in rows of odd width and
// stride (vector body and scalar tail), with the F16C and the plain C
// loops: each value exactly, NaNs as NaNs (quieted by both alike).
func TestF16AllValues(t *testing.T) {
	const rows, cols, stride = 1<<16/37 + 1, 37, 41
	w := &Tensor{rows: rows, cols: cols, stride: stride, f16: make([]uint16, rows*stride)}
	for h := 0; h < 1<<16; h++ {
		w.f16[h/cols*stride+h%cols] = uint16(h)
	}
	var first []float32
	for _, useF16C := range []bool{true, false} {
		all := make([]float32, rows*cols)
		f16RowsWith(useF16C, all, w, 0, rows)
		if first == nil {
			first = all
		}
		for i := range all {
			if math.Float32bits(all[i]) != math.Float32bits(first[i]) {
				t.Fatalf("half %#04x: F16C and plain C differ: %#x, %#x", i, math.Float32bits(first[i]), math.Float32bits(all[i]))
			}
		}
		testF16Values(t, all[:1<<16])
	}
	if !f16c {
		t.Logf("SKIPPED: the F16C loop: this CPU lacks it, or %s=%s caps it off; the plain C one ran twice", ISAEnv, isaCap)
	}
}

func testF16Values(t *testing.T, vals []float32) {
	for h := 0; h < 1<<16; h++ {
		got := vals[h]
		sign := 1.0
		if h&0x8000 != 0 {
			sign = -1
		}
		e, m := (h>>10)&0x1f, h&0x3ff
		var want float64
		switch {
		case e == 0x1f && m == 0:
			want = math.Inf(int(sign))
		case e == 0x1f:
			if !math.IsNaN(float64(got)) {
				t.Fatalf("%#04x: got %g, want NaN", h, got)
			}
			continue
		case e == 0:
			want = sign * float64(m) * math.Pow(2, -24)
		default:
			want = sign * (1 + float64(m)/1024) * math.Pow(2, float64(e-15))
		}
		if float64(got) != want || math.Signbit(float64(got)) != (sign < 0) {
			t.Fatalf("%#04x: got %g, want %g", h, got, want)
		}
	}
}

func TestExpWithinToleranceOfMathExp(t *testing.T) {
	var xs []float32
	for x := -87.3; x < 88.37; x += 0.0013 {
		xs = append(xs, float32(x))
	}
	xs = append(xs, 0, -100, 89, float32(math.Inf(-1)), float32(math.Inf(1)), float32(math.NaN()), -87.5, 1, 2, 3)
	for _, vec := range []bool{false, true} {
		t.Run(fmt.Sprintf("simd=%v", vec && simd), func(t *testing.T) {
			got := make([]float32, len(xs))
			expMany(vec, got, xs)
			worst := 0.0
			for i, x := range xs {
				want := math.Exp(float64(x))
				g := float64(got[i])
				switch {
				case math.IsNaN(want):
					if !math.IsNaN(g) {
						t.Errorf("exp(NaN) = %g", g)
					}
				case x < -87.34: // flushed to zero below the normal range
					if g != 0 {
						t.Errorf("exp(%g) = %g, want 0", x, g)
					}
				case x > 88.38:
					if !math.IsInf(g, 1) {
						t.Errorf("exp(%g) = %g, want +Inf", x, g)
					}
				default:
					if rel := math.Abs(g-want) / want; rel > worst {
						worst = rel
					}
				}
			}
			if worst > 3e-7 {
				t.Errorf("worst relative error %g, want ≤ 3e-7", worst)
			}
		})
	}
}

// TestScalarKernels reruns the tests of the ops that use the vector kernels
// with the scalar fallbacks.
func TestScalarKernels(t *testing.T) {
	if !simd {
		t.Skip("no vector kernels on this machine: the other tests ran the scalar ones")
	}
	simd = false
	defer func() { simd = true }()
	t.Run("Attention", TestAttentionMatchesFloat64Reference)
	t.Run("SiLUMul", TestSiLUMulAddEmbed)
}

func TestShapePanics(t *testing.T) {
	b := New(2)
	m := func(r, c int) backend.Tensor { return b.New(r, c) }
	w, _ := b.Weight(backend.F32, 2, 2, make([]byte, 16))
	// A BF16 weight is taken only as MatMul's w and Embed's table.
	bw, _ := b.Weight(backend.BF16, 4, 4, make([]byte, 32))
	cases := map[string]func(){
		"BF16 MatMul x":    func() { b.MatMul(m(4, 4), bw, m(4, 4)) },
		"BF16 MatMul dst":  func() { b.MatMul(bw, m(4, 4), m(4, 4)) },
		"BF16 RMSNorm w":   func() { b.RMSNorm(m(2, 4), m(2, 4), b.RowView(bw, 0, 1), 1e-5) },
		"BF16 Add":         func() { b.Add(m(4, 4), bw) },
		"BF16 CopyRows":    func() { b.CopyRows(m(4, 4), nil, bw, nil) },
		"BF16 Attention q": func() { b.Attention(m(4, 4), bw, m(4, 4), m(4, 4), 1, 1) },
		"BF16 SiLUMul":     func() { b.SiLUMul(m(4, 4), bw, m(4, 4)) },
		"MatMul inner":     func() { b.MatMul(m(2, 3), m(2, 4), m(3, 5)) },
		"MatMul dst":       func() { b.MatMul(m(2, 4), m(2, 4), m(3, 4)) },
		"Attention heads":  func() { b.Attention(m(2, 8), m(2, 8), m(3, 8), m(3, 8), 3, 1) },
		"Attention group":  func() { b.Attention(m(2, 12), m(2, 12), m(3, 8), m(3, 8), 3, 2) },
		"Attention kv":     func() { b.Attention(m(2, 8), m(2, 8), m(3, 8), m(4, 8), 2, 2) },
		"RMSNorm w":        func() { b.RMSNorm(m(2, 4), m(2, 4), m(1, 3), 1e-5) },
		"RoPE odd":         func() { b.RoPE(m(2, 6), []int32{0, 1}, 3, 1e4) },
		"RoPE pos":         func() { b.RoPE(m(2, 4), []int32{0}, 4, 1e4) },
		"Embed id":         func() { b.Embed(m(1, 4), m(3, 4), []int32{3}) },
		"CopyRows cols":    func() { b.CopyRows(m(2, 4), nil, m(2, 3), nil) },
		"CopyRows lengths": func() { b.CopyRows(m(2, 4), []int32{0}, m(2, 4), []int32{0, 1}) },
		"CopyRows range":   func() { b.CopyRows(m(2, 4), []int32{2}, m(2, 4), nil) },
		"CopyRows nil fit": func() { b.CopyRows(m(2, 4), nil, m(5, 4), []int32{0, 1, 2}) },
		"Add shape":        func() { b.Add(m(2, 4), m(4, 2)) },
		"AttnInput pos":    func() { b.AttnInput(m(2, 2), m(2, 2), m(2, 2), m(2, 2), m(1, 2), w, w, w, []int32{0}, 2, 1e4, 1e-5) },
		"BlockOutput att":  func() { b.BlockOutput(m(2, 2), m(3, 2), w, m(1, 2), w, w, w, 1e-5) },
		"write weight":     func() { b.Add(w, m(2, 2)) },
		"after Free": func() {
			x := m(2, 2)
			b.Free(x)
			b.Add(x, m(2, 2))
		},
	}
	for name, f := range cases {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Error("no panic")
				}
			}()
			f()
		})
	}
}

func TestSizeClass(t *testing.T) {
	for n := 1; n < 1<<16; n++ {
		c := sizeClass(n)
		if c < n || c > n+n/16+1 {
			t.Fatalf("sizeClass(%d) = %d: want n ≤ c ≤ n·17/16", n, c)
		}
		if sizeClass(c) != c {
			t.Fatalf("sizeClass(%d) = %d is not its own class (%d)", n, c, sizeClass(c))
		}
	}
}

// TestNewAfterFreeIsZeroed: storage a freed tensor gives back comes out of
// New zeroed, and views and weights never enter the pool.
func TestNewAfterFreeIsZeroed(t *testing.T) {
	b := New(1)
	for _, shape := range [][2]int{{1, 1}, {3, 5}, {64, 128}, {283, 384}, {100, 1000}} {
		for round := 0; round < 3; round++ {
			x := b.New(shape[0], shape[1]).(*Tensor)
			for i, v := range x.data {
				if v != 0 {
					t.Fatalf("New%v round %d: element %d is %v, want 0", shape, round, i, v)
				}
			}
			if len(x.data) != shape[0]*shape[1] {
				t.Fatalf("New%v: %d elements", shape, len(x.data))
			}
			for i := range x.data {
				x.data[i] = float32(i + 1)
			}
			v := b.RowView(x, 0, shape[0])
			b.Free(v) // a view: must not recycle x's storage
			y := b.New(shape[0], shape[1]).(*Tensor)
			if &y.data[0] == &x.data[0] {
				t.Fatalf("New%v after freeing a view of a live tensor returned its storage", shape)
			}
			b.Free(y)
			b.Free(x)
		}
	}
	w := b.FromHost(64, 64, make([]float32, 64*64)).(*Tensor)
	if w.pooled {
		t.Fatal("FromHost tensor is marked pooled")
	}
}

func TestBLASKernelHint(t *testing.T) {
	for _, c := range []struct {
		core string
		isa  ISALevel
		set  bool
		want string // a substring; "" for no hint
	}{
		{"Prescott", ISANative, false, "OPENBLAS_CORETYPE=SkylakeX"},
		{"Prescott", ISAAVX512, false, "OPENBLAS_CORETYPE=SkylakeX"},
		{"Core2", ISAAVX2, false, "OPENBLAS_CORETYPE=Haswell"},
		{"Prescott", ISANative, true, ""}, // the user chose
		{"Prescott", ISAGeneric, false, ""},
		{"Haswell", ISAAVX2, false, ""},
		{"SkylakeX", ISANative, false, ""},
		{"Zen", ISANative, false, ""},
	} {
		got := blasKernelHint(c.core, c.isa, c.set)
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("blasKernelHint(%q, %v, %v) = %q, want %q", c.core, c.isa, c.set, got, c.want)
		}
	}
}
