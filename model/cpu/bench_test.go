package cpu

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/dlmcache/dlmcache/model/backend"
	"github.com/dlmcache/dlmcache/model/safetensors"
)

// Measurements (go test -bench . -run '^$' ./model/cpu) on the 2-core AMD
// EPYC development VM (AVX-512; OpenBLAS 0.3.21 from Debian, pthreads,
// which picks its Haswell AVX2 kernels here; OPENBLAS_CORETYPE=SkylakeX
// measured the same), GOMAXPROCS 2. Other jobs shared the two cores, so
// every figure is the best of 4–10 runs, in GFLOP/s.
//
// Raw ceiling, one cblas_sgemm 512×2048×2048 (BenchmarkSgemmRaw):
// OpenBLAS on 2 threads 210, on 1 thread 108.
//
// MatMul, n × in → out:     auto  splitCols splitRows blasThreads 1 thread
//
//	512 × 256 → 256           185*     132       185        165       101
//	512 × 1024 → 1024         167      164       163        206       106
//	512 × 2048 → 2048         180      185       175        187        97
//	512 × 2048 → 5632         202      198       195        207       108
//	51 × 2048 → 2048 (10%)    145*     145        88        135        75
//	1 × 2048 → 2048          11.7     11.2       5.9       10.8       6.0
//
// (* auto picks that split.) The bundled llada-tiny's shapes, best of 3
// (auto with splits above 1 MFLOP, then above 8 MFLOP as now; 1 thread):
//
//	283 × 128 → 128 (9.3 MFLOP)    119   (split either way)      91
//	283 × 128 → 384 (27.8 MFLOP)    99   (split either way)      90
//	34 × 128 → 384 (3.3 MFLOP)      54   → 72 (not split)        69
//	34 × 128 → 128 (1.1 MFLOP)      43   → 64 (not split)        63
//
// so products under 8 MFLOP (minSplitFlops) stay on one goroutine.
//
// On a product alone, OpenBLAS's own threads
// are up to 20% faster at mid sizes. But in a forward they lose
// (BenchmarkLayer: one layer's ops in order at sequence 512, products plus
// attention FLOPs):
//
//	layer d 256, FFN 688       auto 153, splitCols 134, splitRows 152, blasThreads 107
//	layer d 1024, FFN 2816     auto 152, splitCols 149, splitRows 151, blasThreads 141
//	layer d 2048, FFN 5632     auto 182, splitCols 183, splitRows 178, blasThreads 182 (164 in an earlier run)
//
// because OpenBLAS's idle threads spin for a while after each product,
// taking a core from the Go ops and attention that follow, and attention's
// per-head sgemm calls from two goroutines oversubscribe the cores when
// OpenBLAS threads them too. So New uses option (a): OpenBLAS on one thread,
// each product split over the backend's goroutines, by rows of x when x is
// tall and w small (< 4M elements), else by output columns. A layer at
// d 2048 runs at 0.87× the raw 2-thread sgemm.
//
// Attention, n 512, FLOPs of the two products (4·n²·heads·hd):
// 8 heads hd 64: 146; 16 heads hd 64: 101; 8 heads hd 128: 122;
// 16 heads hd 128: 134. Softmax with a scalar Go e^x made it 20–50; see
// vec.c.
//
// Go ops at n 512, d 2048 (FFN 5632 for SiLUMul), 2 goroutines: RMSNorm
// 0.43 ms, RoPE (hd 128) 0.44 ms, SiLUMul 0.71 ms, Add 0.28 ms.

func gflops(b *testing.B, flops float64) {
	b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

// matmulStrategies are the ways a product can use the cores.
func matmulStrategies() []struct {
	name string
	mk   func() *Backend
} {
	return []struct {
		name string
		mk   func() *Backend
	}{
		{"auto", func() *Backend { return New(0) }},
		{"splitCols", func() *Backend { b := New(0); b.splitMode = splitCols; return b }},
		{"splitRows", func() *Backend { b := New(0); b.splitMode = splitRows; return b }},
		{"blasThreads", func() *Backend { return newBLASThreaded(0) }},
		{"oneThread", func() *Backend { return New(1) }},
	}
}

// BenchmarkMatMul: dst [n, out] = x [n, in] · wᵀ, w [out, in] loaded as a
// model's weight (laid out at load where the backend does that).
func BenchmarkMatMul(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	for _, s := range []struct{ n, in, out int }{
		{512, 256, 256}, {512, 1024, 1024}, {512, 2048, 2048},
		{512, 2048, 5632}, {51, 2048, 2048}, {1, 2048, 2048},
		// the bundled llada-tiny (d 128, FFN 384) at a full step (283
		// rows) and a suffix-only step (34 rows)
		{283, 128, 384}, {283, 128, 128}, {34, 128, 384}, {34, 128, 128},
		// sixteen of its long-regime canvases (≈ 430 rows) in one batched
		// forward: the tallest product a serve batch makes of this model
		{6912, 128, 384}, {6912, 128, 128},
	} {
		for _, st := range matmulStrategies() {
			b.Run(fmt.Sprintf("n%d_in%d_out%d/%s", s.n, s.in, s.out, st.name), func(b *testing.B) {
				bk := st.mk()
				defer New(0)
				x := bk.FromHost(s.n, s.in, randMat(r, s.n, s.in, 1))
				w := weightF32(b, bk, s.out, s.in, randMat(r, s.out, s.in, 1)) // as a model's
				dst := bk.New(s.n, s.out)
				bk.MatMul(dst, x, w)
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					bk.MatMul(dst, x, w)
				}
				gflops(b, 2*float64(s.n)*float64(s.in)*float64(s.out))
			})
		}
	}
}

// BenchmarkSgemmRaw is the ceiling: one cblas_sgemm 512×2048×2048 with
// OpenBLAS threading over every core itself.
func BenchmarkSgemmRaw(b *testing.B) {
	const m, k, n = sgemmRawM, sgemmRawK, sgemmRawN
	r := rand.New(rand.NewPCG(2, 2))
	x, w, c := randMat(r, m, k, 1), randMat(r, n, k, 1), make([]float32, m*n)
	for _, threads := range []int{runtime.NumCPU(), 1} {
		b.Run(fmt.Sprintf("threads%d", threads), func(b *testing.B) {
			blasSetThreads(threads)
			defer blasSetThreads(1)
			sgemmNT(m, n, k, 1, x, k, w, k, 0, c, n)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				sgemmNT(m, n, k, 1, x, k, w, k, 0, c, n)
			}
			gflops(b, 2*m*n*k)
		})
	}
}

// gemmLibBackends returns a backend per GEMM library this machine can use
// (oneDNN only where it loads and passes its check).
func gemmLibBackends(tb testing.TB, threads int) map[GEMMLib]*Backend {
	out := map[GEMMLib]*Backend{GEMMOpenBLAS: NewWithOptions(Options{Threads: threads, GEMM: GEMMOpenBLAS})}
	if b, err := newBackend(Options{Threads: threads, GEMM: GEMMOneDNN}); err == nil {
		out[GEMMOneDNN] = b
	} else {
		tb.Logf("oneDNN: %v", err)
	}
	return out
}

// BenchmarkGEMMLibs sweeps product sizes on one thread for each library,
// every product on that library (no size threshold): where oneDNN's
// per-call set-up stops paying (dnnlMinFlops) and how its kernels compare
// with OpenBLAS's at the model's shapes. 2·m·n·k FLOPs.
func BenchmarkGEMMLibs(b *testing.B) {
	r := rand.New(rand.NewPCG(4, 4))
	defer func(v int) { dnnlMinFlops = v }(dnnlMinFlops)
	dnnlMinFlops = 0
	libs := gemmLibBackends(b, 1)
	for _, s := range []struct{ m, n, k int }{
		{16, 128, 128}, {64, 384, 128}, {256, 384, 128}, {64, 2048, 2048}, {256, 2048, 2048}, {512, 2048, 2048}, {512, 5632, 2048}, {512, 2048, 5632},
	} {
		x, w, c := randMat(r, s.m, s.k, 1), randMat(r, s.n, s.k, 1), make([]float32, s.m*s.n)
		for _, lib := range []GEMMLib{GEMMOpenBLAS, GEMMOneDNN} {
			bk, ok := libs[lib]
			if !ok {
				continue
			}
			b.Run(fmt.Sprintf("m%d_n%d_k%d/%s", s.m, s.n, s.k, lib), func(b *testing.B) {
				bk.gemmNT(s.m, s.n, s.k, 1, x, s.k, w, s.k, c, s.n)
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					bk.gemmNT(s.m, s.n, s.k, 1, x, s.k, w, s.k, c, s.n)
				}
				gflops(b, 2*float64(s.m)*float64(s.n)*float64(s.k))
			})
		}
	}
}

// BenchmarkMatMulRaw is each library's ceiling inside the backend: MatMul
// 512×2048 · (2048×2048)ᵀ split over every core, F32 weights, and BF16
// weights where oneDNN has AVX512-BF16 kernels (BF16 products, F32
// accumulation) or as converted panels on OpenBLAS.
func BenchmarkMatMulRaw(b *testing.B) {
	const m, k, n = 512, 2048, 2048
	r := rand.New(rand.NewPCG(2, 3))
	libs := gemmLibBackends(b, runtime.NumCPU())
	for _, lib := range []GEMMLib{GEMMOpenBLAS, GEMMOneDNN} {
		bk, ok := libs[lib]
		if !ok {
			continue
		}
		x := bk.FromHost(m, k, randMat(r, m, k, 1))
		wf := randMat(r, n, k, 1)
		raw := make([]byte, 2*n*k)
		for i, v := range wf {
			h := math.Float32bits(v) >> 16
			raw[2*i], raw[2*i+1] = byte(h), byte(h>>8)
		}
		wb, err := bk.Weight(backend.BF16, n, k, raw)
		if err != nil {
			b.Fatal(err)
		}
		for _, w := range []struct {
			dtype string
			t     backend.Tensor
		}{{"f32", bk.FromHost(n, k, wf)}, {"bf16", wb}} {
			b.Run(fmt.Sprintf("%s/%s", lib, w.dtype), func(b *testing.B) {
				dst := bk.New(m, n)
				bk.MatMul(dst, x, w.t)
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					bk.MatMul(dst, x, w.t)
				}
				gflops(b, 2*m*n*k)
			})
		}
	}
}

// BenchmarkAttention: n query and key rows, GQA-free; FLOPs counted are the
// two products, 4·n²·heads·hd. Each shape on both implementations
// (AttentionImpl): the GEMM library's products and the fused kernels this
// CPU has (fused: the widest; fused-avx2 also on an AVX-512 CPU);
// n190_h4_hd32 and n360_h4_hd32 are canvases of the bundled model (a
// BenchmarkConcurrency request, a long one).
func BenchmarkAttention(b *testing.B) {
	r := rand.New(rand.NewPCG(3, 3))
	for _, s := range []struct{ n, heads, hd int }{
		{190, 4, 32}, {360, 4, 32}, {512, 8, 64}, {512, 16, 64}, {512, 8, 128}, {512, 16, 128},
	} {
		type impl struct {
			name string
			kern attnKernel
		}
		impls := []impl{{string(AttentionGEMM), attnNone}, {string(AttentionFused), bestAttn}}
		if bestAttn == attnAVX512 && simd {
			impls = append(impls, impl{"fused-avx2", attnAVX2})
		}
		for _, im := range impls {
			kern := im.kern
			b.Run(fmt.Sprintf("n%d_h%d_hd%d/%s", s.n, s.heads, s.hd, im.name), func(b *testing.B) {
				bk, err := NewFromEnv(0)
				if err != nil {
					b.Fatal(err)
				}
				bk.attn = kern
				c := s.heads * s.hd
				q := bk.FromHost(s.n, c, randMat(r, s.n, c, 1))
				k := bk.FromHost(s.n, c, randMat(r, s.n, c, 1))
				v := bk.FromHost(s.n, c, randMat(r, s.n, c, 1))
				dst := bk.New(s.n, c)
				bk.Attention(dst, q, k, v, s.heads, s.heads)
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					bk.Attention(dst, q, k, v, s.heads, s.heads)
				}
				gflops(b, 4*float64(s.n)*float64(s.n)*float64(c))
			})
		}
	}
}

// BenchmarkAttentionBatch: a batched server step's attentions (16
// requests of 240–300 rows, the bundled model's 4 heads of 32) as one
// AttentionBatch, against Attention request by request.
//
//	go test ./model/cpu -run '^$' -bench AttentionBatch
func BenchmarkAttentionBatch(b *testing.B) {
	r := rand.New(rand.NewPCG(5, 5))
	const reqs, heads, hd = 16, 4, 32
	bk, err := NewFromEnv(0)
	if err != nil {
		b.Fatal(err)
	}
	var dst, q, k, v []backend.Tensor
	flops := 0.0
	for i := range reqs {
		n, c := 240+i*4, heads*hd
		q = append(q, bk.FromHost(n, c, randMat(r, n, c, 1)))
		k = append(k, bk.FromHost(n, c, randMat(r, n, c, 1)))
		v = append(v, bk.FromHost(n, c, randMat(r, n, c, 1)))
		dst = append(dst, bk.New(n, c))
		flops += 4 * float64(n) * float64(n) * float64(c)
	}
	b.Run("batch", func(b *testing.B) {
		for range b.N {
			bk.AttentionBatch(dst, q, k, v, heads, heads)
		}
		gflops(b, flops)
	})
	b.Run("one-by-one", func(b *testing.B) {
		for range b.N {
			for i := range dst {
				bk.Attention(dst[i], q[i], k[i], v[i], heads, heads)
			}
		}
		gflops(b, flops)
	})
}

// BenchmarkOps: the Go loops at a forward's sizes (n 512, d 2048, FFN 5632).
// BenchmarkAttentionKept times one step of the exact block cache's
// attention on the bundled block model's sizes: the current block's 32
// rows written into the request's K/V (288 keys, 4 heads × 32), then their
// attention over all of them: over plain tensors (every key laid out each
// step) and over NewKV's pair (only the written rows laid out again).
func BenchmarkAttentionKept(b *testing.B) {
	r := rand.New(rand.NewPCG(8, 8))
	const heads, hd, nk, nq = 4, 32, 288, 32
	c := heads * hd
	bk, err := NewFromEnv(0)
	if err != nil {
		b.Fatal(err)
	}
	q, dst := bk.FromHost(nq, c, randMat(r, nq, c, 1)), bk.New(nq, c)
	rows := bk.FromHost(nq, c, randMat(r, nq, c, 1))
	at := make([]int32, nq)
	for i := range at {
		at[i] = int32(nk - nq + i)
	}
	kk, kv := bk.NewKV(nk, c)
	for _, tc := range []struct {
		name string
		k, v backend.Tensor
	}{{"plain", bk.FromHost(nk, c, randMat(r, nk, c, 1)), bk.FromHost(nk, c, randMat(r, nk, c, 1))}, {"kept", kk, kv}} {
		bk.CopyRows(tc.k, nil, bk.FromHost(nk, c, randMat(r, nk, c, 1)), nil)
		bk.CopyRows(tc.v, nil, bk.FromHost(nk, c, randMat(r, nk, c, 1)), nil)
		b.Run(tc.name, func(b *testing.B) {
			for range b.N {
				bk.CopyRows(tc.k, at, rows, nil)
				bk.CopyRows(tc.v, at, rows, nil)
				bk.Attention(dst, q, tc.k, tc.v, heads, heads)
			}
			gflops(b, 4*float64(nq)*float64(nk)*float64(c))
		})
	}
}

func BenchmarkOps(b *testing.B) {
	r := rand.New(rand.NewPCG(4, 4))
	bk := New(0)
	const n, d, ffn, hd = 512, 2048, 5632, 128
	x := bk.FromHost(n, d, randMat(r, n, d, 1))
	w := bk.FromHost(1, d, randMat(r, 1, d, 1))
	dst := bk.New(n, d)
	g := bk.FromHost(n, ffn, randMat(r, n, ffn, 1))
	u := bk.FromHost(n, ffn, randMat(r, n, ffn, 1))
	gd := bk.New(n, ffn)
	pos := make([]int32, n)
	for i := range pos {
		pos[i] = int32(i)
	}
	b.Run("RMSNorm", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			bk.RMSNorm(dst, x, w, 1e-5)
		}
	})
	b.Run("RoPE", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			bk.RoPE(dst, pos, hd, 500000)
		}
	})
	b.Run("SiLUMul", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			bk.SiLUMul(gd, g, u)
		}
	})
	b.Run("Add", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			bk.Add(dst, x)
		}
	})
}

// BenchmarkLayer runs the ops of one transformer layer in forward order
// (norm, q/k/v, RoPE, attention, o, residual, norm, gate/up, SiLU·up, down,
// residual) at sequence 512, for each matmul strategy: it shows what the
// product-only benchmarks cannot, OpenBLAS threads spinning or
// oversubscribing the cores while Go code runs. FLOPs counted are the
// products' and attention's.
func BenchmarkLayer(b *testing.B) {
	r := rand.New(rand.NewPCG(5, 5))
	for _, s := range []struct{ d, ffn, heads int }{{256, 688, 4}, {1024, 2816, 8}, {2048, 5632, 16}} {
		for _, st := range matmulStrategies() {
			if st.name == "oneThread" {
				continue
			}
			b.Run(fmt.Sprintf("d%d/%s", s.d, st.name), func(b *testing.B) {
				const n = 512
				bk := st.mk()
				defer New(0)
				w := func(rows, cols int) *Tensor {
					return bk.FromHost(rows, cols, randMat(r, rows, cols, 0.02)).(*Tensor)
				}
				wq, wk, wv, wo := w(s.d, s.d), w(s.d, s.d), w(s.d, s.d), w(s.d, s.d)
				wg, wu, wd := w(s.ffn, s.d), w(s.ffn, s.d), w(s.d, s.ffn)
				norm := w(1, s.d)
				x := bk.FromHost(n, s.d, randMat(r, n, s.d, 1))
				h := bk.New(n, s.d)
				q, k, v, a, o := bk.New(n, s.d), bk.New(n, s.d), bk.New(n, s.d), bk.New(n, s.d), bk.New(n, s.d)
				g, u := bk.New(n, s.ffn), bk.New(n, s.ffn)
				pos := make([]int32, n)
				for i := range pos {
					pos[i] = int32(i)
				}
				hd := s.d / s.heads
				layer := func() {
					bk.RMSNorm(h, x, norm, 1e-5)
					bk.MatMul(q, h, wq)
					bk.MatMul(k, h, wk)
					bk.MatMul(v, h, wv)
					bk.RoPE(q, pos, hd, 500000)
					bk.RoPE(k, pos, hd, 500000)
					bk.Attention(a, q, k, v, s.heads, s.heads)
					bk.MatMul(o, a, wo)
					bk.Add(x, o)
					bk.RMSNorm(h, x, norm, 1e-5)
					bk.MatMul(g, h, wg)
					bk.MatMul(u, h, wu)
					bk.SiLUMul(g, g, u)
					bk.MatMul(o, g, wd)
					bk.Add(x, o)
				}
				layer()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					layer()
				}
				flops := 2*n*float64(s.d)*float64(4*s.d+3*s.ffn) + 4*n*n*float64(s.d)
				gflops(b, flops)
			})
		}
	}
}

// BenchmarkMatMulBF16 times a product with a BF16 w (converted panel by
// panel) next to the same product with the converted float32 w, for
// LLaDA-8B's shapes (d 4096, MLP 12288) at a full step (512 rows), a
// 10%-rows step (52) and the head's 32 rows; panel sizes as named.
func BenchmarkMatMulBF16(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	defer func(p int) { bf16PanelBytes = p }(bf16PanelBytes)
	for _, s := range []struct{ n, in, out int }{
		{512, 4096, 4096}, {512, 4096, 12288}, {512, 12288, 4096}, {52, 4096, 4096}, {32, 4096, 16384},
	} {
		bk := New(0)
		x := bk.FromHost(s.n, s.in, randMat(r, s.n, s.in, 1))
		raw := make([]byte, 2*s.out*s.in)
		for i := range raw {
			raw[i] = byte(r.Uint32())
		}
		for i := 1; i < len(raw); i += 2 {
			raw[i] &= 0xbf // exponents below 2⁶⁴: no Inf or NaN
		}
		w, err := bk.Weight(backend.BF16, s.out, s.in, raw)
		if err != nil {
			b.Fatal(err)
		}
		f := bk.FromHost(s.out, s.in, bk.ToHost(w, nil))
		dst := bk.New(s.n, s.out)
		run := func(name string, w backend.Tensor, panel int) {
			b.Run(fmt.Sprintf("n%d_in%d_out%d/%s", s.n, s.in, s.out, name), func(b *testing.B) {
				bf16PanelBytes = panel
				for b.Loop() {
					bk.MatMul(dst, x, w)
				}
				gflops(b, 2*float64(s.n)*float64(s.in)*float64(s.out))
			})
		}
		run("f32", f, 0)
		for _, p := range []int{1 << 20, 4 << 20, 16 << 20, 64 << 20} {
			run(fmt.Sprintf("bf16_panel%dK", p>>10), w, p)
		}
	}
}

// BenchmarkMatMulF16: products with an F16 weight kept F16 (converted a
// panel at a time) against the same weight widened to float32, on each
// library this machine has: l16-d2048's shapes at a full step's 512 rows
// and a 10%-rows step's 52, and l8-d256's ffn_down. docs/performance.md
// has what it measured.
func BenchmarkMatMulF16(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, s := range []struct{ n, in, out int }{
		{512, 2048, 2048}, {512, 5632, 2048}, {52, 2048, 5632}, {512, 768, 256},
	} {
		for _, lib := range []GEMMLib{GEMMOpenBLAS, GEMMOneDNN} {
			bk, err := newBackend(Options{GEMM: lib})
			if err != nil {
				continue
			}
			x := bk.FromHost(s.n, s.in, randMat(r, s.n, s.in, 1))
			w, err := bk.Weight(backend.F16, s.out, s.in, safetensors.F32ToF16(randMat(r, s.out, s.in, 1)))
			if err != nil {
				b.Fatal(err)
			}
			f := bk.FromHost(s.out, s.in, bk.ToHost(w, nil))
			dst := bk.New(s.n, s.out)
			for _, c := range []struct {
				name string
				w    backend.Tensor
			}{{"f32", f}, {"f16", w}} {
				b.Run(fmt.Sprintf("n%d_in%d_out%d/%s/%s", s.n, s.in, s.out, lib, c.name), func(b *testing.B) {
					for b.Loop() {
						bk.MatMul(dst, x, c.w)
					}
					gflops(b, 2*float64(s.n)*float64(s.in)*float64(s.out))
				})
			}
		}
	}
}

// BenchmarkWGLayout: products on the blocked panel kernel with the weight
// laid out at load (wgLayout, the default) and read from the memory map
// (DLMCACHE_CPU_WEIGHTS=mapped: packed per product), the two alternating
// within each iteration so that a slow spell of the machine falls on
// both: laid_GFLOP/s and mapped_GFLOP/s. Where the weights' products run
// elsewhere (oneDNN; BF16 and F16 on AVX512-BF16) it skips: run it under
// DLMCACHE_CPU_ISA=avx2 there. docs/performance.md has what it measured.
func BenchmarkWGLayout(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	laid, err := newBackend(Options{PackWeights: true})
	if err != nil {
		b.Fatal(err)
	}
	plain, err := newBackend(Options{})
	if err != nil {
		b.Fatal(err)
	}
	for _, typ := range []backend.DType{backend.F32, backend.F16, backend.BF16} {
		for _, s := range []struct{ n, in, out int }{{512, 2048, 5632}, {52, 2048, 5632}} {
			raw := weightBytes(typ, randMat(r, s.out, s.in, 1))
			b.Run(fmt.Sprintf("%s/n%d_in%d_out%d", strings.ToLower(typ.String()), s.n, s.in, s.out), func(b *testing.B) {
				wl, err := laid.Weight(typ, s.out, s.in, raw)
				if err != nil {
					b.Fatal(err)
				}
				wp, _ := plain.Weight(typ, s.out, s.in, raw)
				if wl.(*Tensor).wgl == nil {
					b.Skipf("%s weights are not laid out for the blocked panel kernel here (%s)", typ, laid.GEMM())
				}
				x := randMat(r, s.n, s.in, 1)
				xl, xp := laid.FromHost(s.n, s.in, x), plain.FromHost(s.n, s.in, x)
				dl, dp := laid.New(s.n, s.out), plain.New(s.n, s.out)
				var tl, tp time.Duration
				for b.Loop() {
					t0 := time.Now()
					laid.MatMul(dl, xl, wl)
					t1 := time.Now()
					plain.MatMul(dp, xp, wp)
					tl, tp = tl+t1.Sub(t0), tp+time.Since(t1)
				}
				fl := 2 * float64(s.n) * float64(s.in) * float64(s.out) * float64(b.N) / 1e9
				b.ReportMetric(fl/tl.Seconds(), "laid_GFLOP/s")
				b.ReportMetric(fl/tp.Seconds(), "mapped_GFLOP/s")
			})
		}
	}
}

// BenchmarkBF16Decode: converting a panel of 64 rows × 4096 BF16s (1 MB of
// float32) with a Go loop over the checkpoint's bytes and with bf16Rows's C
// loop (AVX2 here). Measured on the 2-core VM (load average 5): Go 5.1 GB/s
// of float32, C 33 GB/s; so the product uses the C loop.
func BenchmarkBF16Decode(b *testing.B) {
	const rows, cols = 64, 4096
	w := &Tensor{rows: rows, cols: cols, stride: cols, bf16: make([]uint16, rows*cols)}
	for i := range w.bf16 {
		w.bf16[i] = uint16(i)
	}
	raw := unsafe.Slice((*byte)(unsafe.Pointer(&w.bf16[0])), 2*len(w.bf16))
	dst := make([]float32, rows*cols)
	b.Run("go", func(b *testing.B) {
		for b.Loop() {
			_ = raw[2*len(dst)-1]
			for i := range dst {
				dst[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(raw[2*i:])) << 16)
			}
		}
		b.SetBytes(4 * rows * cols)
	})
	b.Run("c", func(b *testing.B) {
		for b.Loop() {
			bf16Rows(dst, w, 0, rows)
		}
		b.SetBytes(4 * rows * cols)
	})
}

// BenchmarkF16Decode: converting a panel of 64 rows × 4096 IEEE halves
// (1 MB of float32) with f16Rows's F16C loop and its plain C one (what
// DLMCACHE_CPU_ISA=generic runs).
func BenchmarkF16Decode(b *testing.B) {
	const rows, cols = 64, 4096
	w := &Tensor{rows: rows, cols: cols, stride: cols, f16: make([]uint16, rows*cols)}
	for i := range w.f16 {
		w.f16[i] = uint16(i) & 0x7bff // no Inf or NaN
	}
	dst := make([]float32, rows*cols)
	for _, c := range []struct {
		name string
		f16c bool
	}{{"f16c", true}, {"c", false}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				f16RowsWith(c.f16c, dst, w, 0, rows)
			}
			b.SetBytes(4 * rows * cols)
		})
	}
}

// BenchmarkQuantMatMul: dst [n, out] = x [n, in] · wᵀ on one thread, w
// F32 (as a model's: the panel kernel where k is small), Q8_0 or Q4_0,
// the quantized ones multiplied both ways (QuantImpl: int8, f32): the
// bundled model's shapes (d 128, FFN 384, vocabulary 2048; 283 rows a
// full step) and l16-d2048's (512 rows).
func BenchmarkQuantMatMul(b *testing.B) {
	benchWeightMatMul(b, []struct{ n, in, out int }{
		{283, 128, 384}, {283, 384, 128}, {283, 128, 2048}, {34, 128, 384},
		{512, 256, 768}, {512, 2048, 2048}, {512, 5632, 2048},
	}, []string{"f32", "q8_0-int8", "q8_0-f32", "q4_0-int8", "q4_0-f32"},
		func(b *testing.B, bk *Backend, r *rand.Rand, form string, out, in int) backend.Tensor {
			typ := map[byte]backend.QuantType{'8': backend.Q8_0, '4': backend.Q4_0}[form[1]]
			raw, _ := quantWeight(b, r, typ, out, in)
			w := weightQuant(b, bk, typ, out, in, raw)
			if strings.HasSuffix(form, "-f32") {
				bk.quantISA = -1
			}
			return w
		})
}

// benchWeightMatMul: dst [n, out] = x [n, in] · wᵀ on one thread for
// each shape and form, w F32 for form "f32", else quant's weight of the
// form.
func benchWeightMatMul(b *testing.B, shapes []struct{ n, in, out int }, forms []string,
	quant func(b *testing.B, bk *Backend, r *rand.Rand, form string, out, in int) backend.Tensor) {
	r := rand.New(rand.NewPCG(1, 1))
	for _, s := range shapes {
		for _, form := range forms {
			b.Run(fmt.Sprintf("n%d_in%d_out%d/%s", s.n, s.in, s.out, form), func(b *testing.B) {
				bk := New(1)
				defer New(0)
				x := bk.FromHost(s.n, s.in, randMat(r, s.n, s.in, 1))
				var w backend.Tensor
				if form == "f32" {
					w = weightF32(b, bk, s.out, s.in, randMat(r, s.out, s.in, 1))
				} else {
					w = quant(b, bk, r, form, s.out, s.in)
				}
				dst := bk.New(s.n, s.out)
				bk.MatMul(dst, x, w)
				b.ResetTimer()
				for b.Loop() {
					bk.MatMul(dst, x, w)
				}
				gflops(b, 2*float64(s.n)*float64(s.in)*float64(s.out))
			})
		}
	}
}

// weightQuant loads raw as bk's quantized weight of typ.
func weightQuant(b *testing.B, bk *Backend, typ backend.QuantType, rows, cols int, raw []byte) backend.Tensor {
	w, err := bk.WeightQuant(typ, rows, cols, raw)
	if err != nil {
		b.Fatal(err)
	}
	return w
}

// BenchmarkKQuantDecode: decoding a panel of 64 rows × 4096 values of
// each K-quant with the AVX2 loop and the plain C one (bytes: the float32
// written).
func BenchmarkKQuantDecode(b *testing.B) {
	const rows, cols = 64, 4096
	r := rand.New(rand.NewPCG(1, 1))
	dst := make([]float32, rows*cols)
	for _, typ := range kquantTypes {
		raw, _ := kquantWeight(b, r, typ, rows, cols)
		w := &Tensor{rows: rows, cols: cols, stride: cols, q: raw, qStride: len(raw) / rows, qType: typ}
		for _, s := range []bool{true, false} {
			b.Run(fmt.Sprintf("%s/simd=%v", typ, s), func(b *testing.B) {
				for b.Loop() {
					quantRowsWith(s, dst, w, 0, rows)
				}
				b.SetBytes(4 * rows * cols)
			})
		}
	}
}

// BenchmarkKQuantMatMul: dst [n, out] = x [n, in] · wᵀ on one thread, w
// F32, Q8_0, a K-quant or IQ4_XS, multiplied both ways (-int8: activations
// quantized, the machine's int8 products; -f32: decoded panels into
// sgemm), at l16-d2048's shapes (512 rows a full step, 52 a 10%-rows
// step). DLMCACHE_CPU_ISA=avx2 runs the AVX2 products.
func BenchmarkKQuantMatMul(b *testing.B) {
	var forms []string
	for _, t := range []string{"Q8_0", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_XS"} {
		forms = append(forms, t+"-int8", t+"-f32")
	}
	benchWeightMatMul(b, []struct{ n, in, out int }{{512, 2048, 2048}, {52, 2048, 2048}}, append([]string{"f32"}, forms...),
		func(b *testing.B, bk *Backend, r *rand.Rand, form string, out, in int) backend.Tensor {
			typ := map[string]backend.QuantType{"Q8_0": backend.Q8_0, "Q3_K": backend.Q3_K, "Q4_K": backend.Q4_K, "Q5_K": backend.Q5_K,
				"Q6_K": backend.Q6_K, "IQ4_XS": backend.IQ4_XS}[strings.Split(form, "-")[0]]
			var raw []byte
			if typ.KQuant() {
				raw, _ = kquantWeight(b, r, typ, out, in)
			} else {
				raw, _ = quantWeight(b, r, typ, out, in)
			}
			if strings.HasSuffix(form, "-f32") {
				bk.quantISA = -1
			}
			return weightQuant(b, bk, typ, out, in, raw)
		})
}
