package cpu

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
)

// Measurements (go test -bench . -run '^$' ./model/cpu), 2-core AMD EPYC
// (AVX-512), OpenBLAS 0.3.21 (Debian, pthreads), GOMAXPROCS 2:
//
// (filled in below)

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

// BenchmarkMatMul: dst [n, d] = x [n, d] · wᵀ, w [d, d].
func BenchmarkMatMul(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	for _, s := range []struct{ n, in, out int }{
		{512, 256, 256}, {512, 1024, 1024}, {512, 2048, 2048},
		{512, 2048, 5632}, {51, 2048, 2048}, {1, 2048, 2048},
	} {
		for _, st := range matmulStrategies() {
			b.Run(fmt.Sprintf("n%d_in%d_out%d/%s", s.n, s.in, s.out, st.name), func(b *testing.B) {
				bk := st.mk()
				defer New(0)
				x := bk.FromHost(s.n, s.in, randMat(r, s.n, s.in, 1))
				w := bk.FromHost(s.out, s.in, randMat(r, s.out, s.in, 1))
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
	const m, k, n = 512, 2048, 2048
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

// BenchmarkAttention: n query and key rows, GQA-free; FLOPs counted are the
// two products, 4·n²·heads·hd.
func BenchmarkAttention(b *testing.B) {
	r := rand.New(rand.NewPCG(3, 3))
	for _, s := range []struct{ n, heads, hd int }{
		{512, 8, 64}, {512, 16, 64}, {512, 8, 128}, {512, 16, 128},
	} {
		b.Run(fmt.Sprintf("n%d_h%d_hd%d", s.n, s.heads, s.hd), func(b *testing.B) {
			bk := New(0)
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

// BenchmarkOps: the Go loops at a forward's sizes (n 512, d 2048, FFN 5632).
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
