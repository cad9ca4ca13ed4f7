package cpu

import (
	"sync"
	"unsafe"

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

// MatMul: dst = x · wᵀ. x [n, in], w [out, in], dst [n, out]. w may be a
// BF16 weight: see matMulBF16.
func (b *Backend) MatMul(dst, x, w backend.Tensor) {
	d, xs, ws := writable(dst, "MatMul"), tensor(x, "MatMul"), anyTensor(w, "MatMul")
	n, in, out := xs.rows, xs.cols, ws.rows
	if ws.cols != in || d.rows != n || d.cols != out {
		shapePanic("MatMul", "dst %v = x %v · wᵀ with w %v", d, xs, ws)
	}
	if n == 0 || out == 0 {
		return
	}
	if ws.bf16 != nil {
		b.matMulBF16(d, xs, ws)
		return
	}
	b.matMulF32(d, xs, ws)
}

// splitByRows reports whether a split product [n, in]·[out, in]ᵀ is cut
// along the rows of x rather than the rows of w.
func (b *Backend) splitByRows(n, in, out int) bool {
	return b.splitMode == splitRows ||
		(b.splitMode == splitAuto && (n >= 4*out || n >= 256 && in*out < 1<<22))
}

// splits reports whether a product of n·in·out multiply-adds is split over
// goroutines.
func (b *Backend) splits(n, in, out int) bool {
	return b.split && b.threads >= 2 && 2*n*in*out >= minSplitFlops
}

// matMulF32 is MatMul for a float32 w, shapes checked.
func (b *Backend) matMulF32(d, xs, ws *Tensor) {
	n, in, out := xs.rows, xs.cols, ws.rows
	parts := b.threads
	if !b.splits(n, in, out) {
		sgemmNT(n, out, in, 1, xs.span(), xs.stride, ws.span(), ws.stride, 0, d.span(), d.stride)
		return
	}
	byRows := b.splitByRows(n, in, out)
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

// bf16PanelBytes is the size of the float32 panel of a BF16 weight that
// matMulBF16 converts at a time, per goroutine (at least 16 rows). Each
// panel is one sgemm call, and each call packs all of x again, so a panel
// must have hundreds of rows: BenchmarkMatMulBF16 at 512 rows, 12288 → 4096
// (2 cores, shared) ran at 40 GFLOP/s with 1 MB panels (16 rows), 66–72
// with 16 MB (336 rows), 75 for the float32 product; 4096 → 12288 at 62,
// 79, 84. With 32 or 52 rows the size made no difference.
var bf16PanelBytes = 16 << 20

// matMulBF16 is MatMul for a BF16 w, shapes checked. The float32 product
// runs on converted copies of w: when the product is split along the rows
// of x (a small w, a tall x), w is converted whole, once, into a pooled
// buffer and multiplied as matMulF32 would; otherwise w's rows are cut into
// one contiguous range per goroutine, as matMulF32 cuts them, and each
// goroutine converts its range a panel of rows at a time (bf16PanelBytes
// of float32) into its own buffer and calls sgemm on the panel. The
// results are those of matMulF32 on the converted w: the conversion is
// exact.
func (b *Backend) matMulBF16(d, xs, ws *Tensor) {
	n, in, out := xs.rows, xs.cols, ws.rows
	split := b.splits(n, in, out)
	if split && b.splitByRows(n, in, out) || in == 0 {
		buf := b.bufs.scratch(out * in)
		b.parallel(out, rowGrain(in), func(lo, hi int) { bf16Rows(buf[lo*in:], ws, lo, hi) })
		b.matMulF32(d, xs, &Tensor{rows: out, cols: in, stride: in, data: buf})
		b.bufs.put(buf)
		return
	}
	panel := max(16, bf16PanelBytes/int(unsafe.Sizeof(float32(0)))/in/16*16)
	run := func(lo, hi int) {
		buf := b.bufs.scratch(min(panel, hi-lo) * in)
		for r := lo; r < hi; r += panel {
			e := min(r+panel, hi)
			bf16Rows(buf, ws, r, e)
			o := b.ColView(d, r, e)
			sgemmNT(n, e-r, in, 1, xs.span(), xs.stride, buf, in, 0, o.span(), o.stride)
		}
		b.bufs.put(buf)
	}
	if !split {
		run(0, out)
		return
	}
	// Range edges on multiples of 16, as in matMulF32.
	blocks := (out + 15) / 16
	parts := min(b.threads, blocks)
	edge := func(p int) int { return min(out, 16*(p*blocks/parts)) }
	var wg sync.WaitGroup
	wg.Add(parts - 1)
	for p := 1; p < parts; p++ {
		go func() {
			defer wg.Done()
			run(edge(p), edge(p+1))
		}()
	}
	run(edge(0), edge(1))
	wg.Wait()
}
