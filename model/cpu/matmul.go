package cpu

import (
	"sync"

	"github.com/dlmcache/dlmcache/model/backend"
)

// Ways of splitting one matrix product over goroutines (Backend.split
// mode); see bench_test.go for what each measured.
const (
	splitAuto = iota // rows for a tall x and a small w, else columns
	splitCols        // by output columns = rows of w
	splitRows        // by rows of x
)

// minSplitFlops is the smallest product worth splitting over goroutines
// (2·n·in·out FLOPs). Measured on the bundled model's shapes (bench_test.go):
// a suffix-only step's products (34 rows × 128 → 128 or 384, 1–3 MFLOP) ran
// 30% slower split over two goroutines than on one; a full step's (283 rows,
// 9–28 MFLOP) ran as fast or up to 20% faster split. The attention's
// threshold is the same constant.
const minSplitFlops = 1 << 23

// MatMul: dst = x · wᵀ. x [n, in], w [out, in], dst [n, out].
func (b *Backend) MatMul(dst, x, w backend.Tensor) {
	d, xs, ws := writable(dst, "MatMul"), tensor(x, "MatMul"), tensor(w, "MatMul")
	n, in, out := xs.rows, xs.cols, ws.rows
	if ws.cols != in || d.rows != n || d.cols != out {
		shapePanic("MatMul", "dst %v = x %v · wᵀ with w %v", d, xs, ws)
	}
	if n == 0 || out == 0 {
		return
	}
	parts := b.threads
	if !b.split || parts < 2 || 2*n*in*out < minSplitFlops {
		sgemmNT(n, out, in, 1, xs.span(), xs.stride, ws.span(), ws.stride, 0, d.span(), d.stride)
		return
	}
	byRows := b.splitMode == splitRows ||
		(b.splitMode == splitAuto && (n >= 4*out || n >= 256 && in*out < 1<<22))
	// Chunk edges on multiples of 16 (a whole AVX-512 register of float32)
	// along the split dimension, so each part runs OpenBLAS's full-width
	// kernels.
	total := out
	if byRows {
		total = n
	}
	blocks := (total + 15) / 16
	if blocks < parts {
		parts = blocks
	}
	edge := func(p int) int { return min(total, 16*(p*blocks/parts)) }
	run := func(p int) {
		lo, hi := edge(p), edge(p+1)
		if lo == hi {
			return
		}
		if byRows {
			r := b.RowView(xs, lo, hi)
			o := b.RowView(d, lo, hi)
			sgemmNT(hi-lo, out, in, 1, r.span(), r.stride, ws.span(), ws.stride, 0, o.span(), o.stride)
			return
		}
		wv := b.RowView(ws, lo, hi)
		o := b.ColView(d, lo, hi)
		sgemmNT(n, hi-lo, in, 1, xs.span(), xs.stride, wv.span(), wv.stride, 0, o.span(), o.stride)
	}
	var wg sync.WaitGroup
	wg.Add(parts - 1)
	for p := 1; p < parts; p++ {
		go func() {
			defer wg.Done()
			run(p)
		}()
	}
	run(0)
	wg.Wait()
}
