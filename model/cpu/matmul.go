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
// 9–28 MFLOP) ran as fast or up to 20% faster split. The GEMM attention's
// (its tasks on goroutines too) is the same constant; the C team's jobs
// have their own, minTeamFlops.
const minSplitFlops = 1 << 23

// minTeamFlops is the smallest job worth splitting over the C thread team
// (the fused layer halves, products on the panel kernel, the fused
// attention): its workers spin between a forward's jobs, so a split costs
// far less than a goroutine's. Measured on the block model's exact cache,
// one request at a time on 2 threads (a 32-row step: AttnInput 3 MFLOP,
// attention 4 MFLOP, logits 0.5 MFLOP a row; docs/performance.md):
// splitting from 1 MFLOP instead of 8 gave 2.70–2.82× no cache's tokens/s
// against 2.31–2.43× (three pairs, alternating); bounds from 0.25 to 4
// MFLOP measured alike within the noise.
const minTeamFlops = 1 << 20

// MatMul: dst = x · wᵀ. x [n, in], w [out, in], dst [n, out]. w may be a
// BF16 weight (matMulBF16), an F16 one (matMulF16; on the panel kernel
// where it is laid out for it) or a quantized one (matMulQuant).
func (b *Backend) MatMul(dst, x, w backend.Tensor) {
	d, xs, ws := writable(dst, "MatMul"), tensor(x, "MatMul"), anyTensor(w, "MatMul")
	checked(backend.CheckMatMul(d, xs, ws))
	if xs.rows == 0 || ws.rows == 0 {
		return
	}
	b.matMul(d, xs, ws)
	if ws.perm != nil {
		b.permuteCols(d, xs.rows, ws.perm)
	}
}

// matMul is MatMul on w's stored rows, shapes checked.
func (b *Backend) matMul(d, xs, ws *Tensor) {
	switch {
	case ws.bfl != nil: // BF16, or F16 rounded to BF16, laid out at load
		b.matMulBF16Dot(d, xs, ws)
	case ws.bf16 != nil && ws.panels == nil:
		b.matMulBF16(d, xs, ws)
	case ws.f16 != nil && ws.panels == nil:
		b.matMulF16(d, xs, ws)
	case ws.q != nil && ws.panels == nil:
		b.matMulQuant(d, xs, ws)
	default:
		b.matMulF32(d, xs, ws)
	}
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
	in := xs.cols
	if ws.panels != nil {
		// On the team: tasks of 48 rows by whole panels.
		b.panelMatMul(d, xs, ws)
		return
	}
	// On oneDNN a product is one call threaded by oneDNN itself (OpenMP,
	// b.threads threads): at l16-d2048 the full step took 3.57 s that way
	// and 3.67 s split over goroutines, the 10%-rows step 0.71 s and
	// 0.95 s; a 512×2048×2048 product ran at 316 GFLOP/s against 190
	// (BenchmarkMatMulRaw, 2 cores, Zen 5).
	// Every product with a weight goes to oneDNN when the backend uses it,
	// however small (as BF16 weights do): choosing the library by the
	// product's size, which the row count sets, made a request's results
	// depend on the batch it ran in.
	if b.dnnlOK(dnnlWeightRows, ws.rows, in) { // judged by the weight alone, whatever the rows
		checkSpan("x", xs.data, xs.rows, in, xs.stride)
		checkSpan("w", ws.data, ws.rows, in, ws.stride)
		checkSpan("dst", d.data, xs.rows, ws.rows, d.stride)
		if ws.packed != nil {
			ok, err := ws.packed.matMul(xs.rows, ws.rows, in, unsafe.Pointer(&xs.data[0]), xs.stride, d.data, d.stride, b.threads)
			if ok {
				return
			}
			if err != nil {
				dnnlFail(err)
			}
		}
		_, err := dnnlMatMulThreads(false, true, xs.rows, ws.rows, in, 1, unsafe.Pointer(&xs.data[0]), xs.stride,
			unsafe.Pointer(&ws.data[0]), ws.stride, d.data, d.stride, false, b.threads)
		if err == nil {
			return
		}
		dnnlFail(err)
	}
	if b.panel && in > 0 {
		b.wgMatMul(d, xs, ws)
		return
	}
	b.forParts(xs.rows, in, ws.rows, func(r0, r1, c0, c1 int) {
		x := xs.data[r0*xs.stride:]
		o := d.data[r0*d.stride+c0:]
		b.blasWeightNT(r1-r0, c1-c0, in, x, xs.stride, ws.data[c0*ws.stride:], ws.stride, o, d.stride)
	})
}

// dnnlWeightRows is the row count a product with a weight is judged by
// for oneDNN (dnnlOK): a weight whose product with this many rows is too
// small for oneDNN stays on OpenBLAS at every row count.
const dnnlWeightRows = 64

// blasSmallMNK is the largest m·n·k of a product OpenBLAS may run on a
// kernel of another summation order than its general one: OpenBLAS
// (0.3.21 on AVX-512) takes products with m·n·k ≤ 100³ to "small matrix"
// kernels, and newer releases send m = 1 to gemv. Either makes a row's
// result depend on how many rows its product had, i.e. on the batch
// (TestMatMulRowsInvariant).
const blasSmallMNK = 1_000_000

// blasRowQuantum is the multiple of rows every sgemm call with a weight
// gets. OpenBLAS's general kernels compute tiles of UNROLL_M rows (4 to
// 16, a divisor of 16 for every x86 kernel) and leftover rows on kernels
// of their own, and some of those sum in another order: on its SSE
// kernels (Prescott, what 0.3.21 runs on CPUs it does not know) the third
// row of a 3-row product and the last columns of a 7-row one each came out
// 1 ulp from the same row alone. With whole tiles only, a row's result is
// the same at any row count.
const blasRowQuantum = 16

// blasMinRows is the fewest rows blasWeightNT hands OpenBLAS for a
// product with an n × k weight: enough that m·n·k is past blasSmallMNK,
// in whole blasRowQuantum.
func blasMinRows(n, k int) int {
	pm := max(2, blasSmallMNK/max(1, n*k)+1)
	return (pm + blasRowQuantum - 1) / blasRowQuantum * blasRowQuantum
}

// blasWeightNT is sgemmNT (c = a·wᵀ) for a product with a weight, on
// OpenBLAS, so that each row of c is the same whatever m is: the rows in
// whole blasRowQuantum run in place (when there are at least blasMinRows
// of them) and the rest on a zero-padded copy of blasMinRows rows (cheap:
// fewer than blasMinRows rows make a small product by definition, and
// past it the copy holds under blasRowQuantum rows).
//
// Where this OpenBLAS's kernel gives a row different bits at different
// places in a product even so (blasRowsInvariant: its Haswell and Zen
// kernels, what it runs on AVX2 processors, differ in rows 6–11 of every
// 12), the product runs on the panel kernel instead, w laid out for it per
// call (panelWeightNT), or where the kernels are capped below AVX2
// ($DLMCACHE_CPU_ISA) on a plain C loop (plainWeightNT).
func (b *Backend) blasWeightNT(m, n, k int, a []float32, lda int, w []float32, ldw int, c []float32, ldc int) {
	if m == 0 || n == 0 {
		return
	}
	if k > 0 && !blasRowsInvariant() {
		if simd {
			b.panelWeightNT(m, n, k, a, lda, w, ldw, c, ldc)
		} else {
			plainWeightNT(m, n, k, a, lda, w, ldw, c, ldc)
		}
		return
	}
	b.openBLASWeightNT(m, n, k, a, lda, w, ldw, c, ldc)
}

// openBLASWeightNT is blasWeightNT on OpenBLAS.
func (b *Backend) openBLASWeightNT(m, n, k int, a []float32, lda int, w []float32, ldw int, c []float32, ldc int) {
	if k == 0 {
		sgemmNT(m, n, k, 1, a, lda, w, ldw, 0, c, ldc)
		return
	}
	pm := blasMinRows(n, k)
	head := 0
	if m >= pm {
		head = m / blasRowQuantum * blasRowQuantum
		sgemmNT(head, n, k, 1, a, lda, w, ldw, 0, c, ldc)
	}
	rest := m - head
	if rest == 0 {
		return
	}
	pa := b.bufs.take(pm*k, true)
	pc := b.bufs.scratch(pm * n)
	for i := range rest {
		copy(pa[i*k:(i+1)*k], a[(head+i)*lda:(head+i)*lda+k])
	}
	sgemmNT(pm, n, k, 1, pa, k, w, ldw, 0, pc, n)
	for i := range rest {
		copy(c[(head+i)*ldc:(head+i)*ldc+n], pc[i*n:(i+1)*n])
	}
	b.bufs.put(pa)
	b.bufs.put(pc)
}

// blasRowsInvariant reports whether OpenBLAS's kernel, as openBLASWeightNT
// calls it, gives every row of a product with a weight the bits the row
// gets alone: products of 7 and 40 rows with weights of shapes whose rows
// and columns end in partial tiles, checked once.
var blasRowsInvariant = sync.OnceValue(func() bool {
	b := &Backend{threads: 1, bufs: new(bufPool)}
	for _, sh := range [][2]int{{100, 640}, {64, 128}, {1100, 64}} {
		n, k := sh[0], sh[1]
		w := make([]float32, n*k)
		for i := range w {
			w[i] = float32((i*7919)%2003-1001) / 4096
		}
		for _, m := range []int{7, 40} {
			a := make([]float32, m*k)
			for i := range a {
				a[i] = float32((i*104729)%4001-2000) / 1024
			}
			c := make([]float32, m*n)
			b.openBLASWeightNT(m, n, k, a, k, w, k, c, n)
			one := make([]float32, n)
			for i := range m {
				b.openBLASWeightNT(1, n, k, a[i*k:], k, w, k, one, n)
				for j, v := range one {
					if c[i*n+j] != v {
						return false
					}
				}
			}
		}
	}
	return true
})

// forParts cuts the product [n, in]·[out, in]ᵀ into one part per
// goroutine, along the rows of x or of w as splitByRows says, and runs
// part(r0, r1, c0, c1) (rows [r0, r1) of x, rows [c0, c1) of w) for each
// at once; a product too small to split is one part.
func (b *Backend) forParts(n, in, out int, part func(r0, r1, c0, c1 int)) {
	b.forPartsAs(n, in, out, out, part)
}

// forPartsAs is forParts for out of a weight's whole rows (a slice of
// them: GateUp's chunks), cut as the whole product would be.
func (b *Backend) forPartsAs(n, in, out, whole int, part func(r0, r1, c0, c1 int)) {
	if !b.splits(n, in, whole) {
		part(0, n, 0, out)
		return
	}
	byRows := b.splitByRows(n, in, whole)
	// Part edges on multiples of 16 along the split dimension.
	total := out
	if byRows {
		total = n
	}
	parts, edge := b.parts16(total)
	fanOut(parts, func(p int) {
		lo, hi := edge(p), edge(p+1)
		switch {
		case lo == hi:
		case byRows:
			part(lo, hi, 0, out)
		default:
			part(0, n, lo, hi)
		}
	})
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
	// A weight laid out at load runs on bf16mm.c's kernel, whatever the
	// product's size; every other BF16 product goes to oneDNN when it has
	// BF16 kernels, however small, so that one model's numerics do not
	// depend on product sizes.
	if ws.bfl != nil {
		b.matMulBF16Dot(d, xs, ws)
		return
	}
	if in > 0 && dnnlFailed.Load() == nil && b.dnnlPick().dnnlBF16 && b.matMulDNNLBF16(d, xs, ws) {
		return
	}
	if b.wgRuns(in, out) {
		b.wgMatMul(d, xs, ws)
		return
	}
	split := b.splits(n, in, out)
	if !b.dnnlPanels(in, out) && (split && b.splitByRows(n, in, out) || in == 0) {
		buf := b.bufs.scratch(out * in)
		b.parallel(out, rowGrain(in), func(lo, hi int) { bf16Rows(buf[lo*in:], ws, lo, hi) })
		b.matMulF32(d, xs, &Tensor{rows: out, cols: in, stride: in, data: buf})
		b.bufs.put(buf)
		return
	}
	b.convertedMatMul(d, xs, ws, bf16Rows)
}

// matMulF16 is MatMul for an F16 w not laid out for the panel kernel,
// shapes checked. The float32 product runs on converted copies of w (the
// conversion is exact), as convertedMatMul cuts it: w's rows a panel
// (bf16PanelBytes of float32) at a time, on oneDNN where F32 weights of
// the panels' shape go (dnnlPanels), else on OpenBLAS — or, off oneDNN,
// for a small w under a tall x, w converted whole and the product split
// along x's rows. The library is chosen by w's shape alone, so a row's
// result never depends on its batch.
func (b *Backend) matMulF16(d, xs, ws *Tensor) {
	n, in, out := xs.rows, xs.cols, ws.rows
	if b.wgRuns(in, out) {
		b.wgMatMul(d, xs, ws)
		return
	}
	if !b.dnnlPanels(in, out) && (b.splits(n, in, out) && b.splitByRows(n, in, out) || in == 0) {
		buf := b.bufs.scratch(out * in)
		b.parallel(out, rowGrain(in), func(lo, hi int) { f16Rows(buf[lo*in:], ws, lo, hi) })
		b.forParts(n, in, out, func(r0, r1, c0, c1 int) {
			b.blasWeightNT(r1-r0, c1-c0, in, xs.data[r0*xs.stride:], xs.stride, buf[c0*in:], in, d.data[r0*d.stride+c0:], d.stride)
		})
		b.bufs.put(buf)
		return
	}
	b.convertedMatMul(d, xs, ws, f16Rows)
}

// matMulQuant is MatMul for a quantized w, shapes checked. With
// b.quantISA ≥ 0, x is quantized per row to Q8_0 blocks once
// (quantizeAct, split over the rows; with the blocks' sums for Q4_K's
// and Q5_K's minima) and each part of the product, cut as matMulF32 cuts
// it, multiplies those with w's blocks as integers (qMatMul: Q8_0, Q4_0,
// Q5_0 and the K-quants Q3_K, Q4_K, Q5_K, Q6_K alike); else (and for Q4_1 and
// Q5_1) convertedMatMul decodes w a panel at a time and runs sgemm on
// float32 x.
func (b *Backend) matMulQuant(d, xs, ws *Tensor) {
	if b.quantISA < 0 || !int8Product(ws.qType) {
		b.convertedMatMul(d, xs, ws, quantRows)
		return
	}
	qa := b.quantizeActs(xs, ws)
	defer b.putActs(qa)
	b.quantProduct(d, qa, ws, 0, ws.rows, ws.rows)
}

// quantActs are rows of activations quantized for the int8 products
// (quantizeAct's q, d and sums) on the instruction set isa, in the
// backend's pool.
type quantActs struct {
	isa      int
	q        []byte
	d, sums  []float32
	n, in    int
	rowBytes int
}

// quantizeActs quantizes the rows of xs for the int8 products with the
// weights ws (all of one instruction set: a K-quant among them puts them
// on kquantISA's), split over the rows; give them back with putActs.
func (b *Backend) quantizeActs(xs *Tensor, ws ...*Tensor) quantActs {
	n, in := xs.rows, xs.cols
	isa, sums := b.quantISA, false
	for _, w := range ws {
		if w.qType.KQuant() {
			isa = kquantISA(isa)
		}
		sums = sums || needsSums(w.qType)
	}
	qa := quantActs{isa: isa, n: n, in: in, rowBytes: in * actBytes(isa)}
	qa.q = scratchOf[byte](b.bufs, n*qa.rowBytes)
	qa.d = b.bufs.scratch(n * in / 32)
	if sums {
		qa.sums = b.bufs.scratch(n * in / 32)
	}
	b.parallel(n, rowGrain(in), func(lo, hi int) {
		var s []float32
		if sums {
			s = qa.sums[lo*in/32:]
		}
		quantizeAct(isa, qa.q[lo*qa.rowBytes:], qa.d[lo*in/32:], s, xs.data[lo*xs.stride:], hi-lo, in, xs.stride)
	})
	return qa
}

func (b *Backend) putActs(qa quantActs) {
	putOf(b.bufs, qa.q)
	b.bufs.put(qa.d)
	if qa.sums != nil {
		b.bufs.put(qa.sums)
	}
}

// quantProduct computes d[n × (j1−j0)] = x·w[j0:j1]ᵀ for the quantized
// activations qa and rows [j0, j1) of the quantized weight ws, each
// part as matMulF32 cuts a product with whole of w's rows (a slice cut
// along x's rows had each thread pack the slice's weights again: GateUp's
// 1024-row chunks made l16-d2048's Q8_0 step 5–10% slower), on qMatMul
// with a pack of its own.
func (b *Backend) quantProduct(d *Tensor, qa quantActs, ws *Tensor, j0, j1, whole int) {
	in, row := qa.in, qa.rowBytes
	b.forPartsAs(qa.n, in, j1-j0, whole, func(r0, r1, c0, c1 int) {
		pack := scratchOf[byte](b.bufs, qPackBytes)
		var s []float32
		if qa.sums != nil {
			s = qa.sums[r0*in/32:]
		}
		qMatMul(qa.isa, r1-r0, c1-c0, in, qa.q[r0*row:], qa.d[r0*in/32:], s, ws, j0+c0, d.data[r0*d.stride+c0:], d.stride, pack)
		putOf(b.bufs, pack)
	})
}

// convertedMatMul computes d = x·wᵀ for a weight kept in another type
// (BF16, F16, Q8_0, Q4_0, the K-quants), which convert decodes (rows [lo, hi) of w into a dense
// float32 buffer): w's rows are cut into one contiguous range per
// goroutine, as matMulF32 cuts them, and each goroutine decodes its range
// a panel of rows at a time (bf16PanelBytes of float32) into its own
// reused buffer and calls sgemm on the panel; where dnnlPanels says, the
// panels go to oneDNN one after another instead. No float32 copy of the
// whole weight is made (unless it fits in one panel).
func (b *Backend) convertedMatMul(d, xs, ws *Tensor, convert func(dst []float32, w *Tensor, lo, hi int)) {
	n, in, out := xs.rows, xs.cols, ws.rows
	split := b.splits(n, in, out)
	panel := convertedPanel(in)
	if b.dnnlPanels(in, out) {
		b.dnnlConvertedMatMul(d, xs, ws, convert, panel)
		return
	}
	run := func(lo, hi int) {
		buf := b.bufs.scratch(min(panel, hi-lo) * in)
		for r := lo; r < hi; r += panel {
			e := min(r+panel, hi)
			convert(buf, ws, r, e)
			o := b.ColView(d, r, e)
			b.blasWeightNT(n, e-r, in, xs.span(), xs.stride, buf, in, o.span(), o.stride)
		}
		b.bufs.put(buf)
	}
	if !split {
		run(0, out)
		return
	}
	// Range edges on multiples of 16, as in matMulF32.
	parts, edge := b.parts16(out)
	fanOut(parts, func(p int) { run(edge(p), edge(p+1)) })
}

// convertedPanel is how many rows of a weight with in columns
// convertedMatMul decodes at a time: bf16PanelBytes of float32, a multiple
// of 16.
func convertedPanel(in int) int {
	return max(16, bf16PanelBytes/int(unsafe.Sizeof(float32(0)))/max(in, 1)/16*16)
}

// dnnlPanels reports whether convertedMatMul runs a weight of out × in on
// oneDNN: where an F32 weight of its panels' shape would
// (dnnlWeightRows rows judged, as matMulF32 judges a weight, whatever the
// product's own row count). An F16 file's l16-d2048 step took 3.44 s on
// OpenBLAS panels against F32's 1.78 s on oneDNN (Zen 4, make
// bench-llamacpp), the panels' conversion being the small part.
func (b *Backend) dnnlPanels(in, out int) bool {
	return in > 0 && b.dnnlOK(dnnlWeightRows, min(convertedPanel(in), out), in)
}

// wgRuns reports whether the products of a 16-bit weight [out × in] that
// oneDNN's BF16 kernels and bf16mm.c's do not take run on the blocked
// panel kernel (matMulF16, matMulBF16): where the backend has the panel
// kernel and F32 panels of that shape would not go to oneDNN. The loader
// lays such a weight out for it (layOutWG).
func (b *Backend) wgRuns(in, out int) bool { return b.panel && in > 0 && !b.dnnlPanels(in, out) }

// dnnlConvertedMatMul is convertedMatMul on oneDNN: the panels one after
// another into one reused buffer, each decoded on every thread and
// multiplied by oneDNN threading the product itself.
func (b *Backend) dnnlConvertedMatMul(d, xs, ws *Tensor, convert func(dst []float32, w *Tensor, lo, hi int), panel int) {
	n, in, out := xs.rows, xs.cols, ws.rows
	if n == 0 {
		return
	}
	buf := b.bufs.scratch(min(panel, out) * in)
	defer b.bufs.put(buf)
	for r := 0; r < out; r += panel {
		e := min(r+panel, out)
		b.parallel(e-r, rowGrain(in), func(lo, hi int) { convert(buf[lo*in:], ws, r+lo, r+hi) })
		o := b.ColView(d, r, e)
		_, err := dnnlMatMulThreads(false, true, n, e-r, in, 1, unsafe.Pointer(&xs.data[0]), xs.stride,
			unsafe.Pointer(&buf[0]), in, o.span(), o.stride, false, b.threads)
		if err != nil {
			dnnlFail(err)
			b.blasWeightNT(n, e-r, in, xs.span(), xs.stride, buf, in, o.span(), o.stride)
		}
	}
}

// matMulDNNLBF16 is matMulBF16 on oneDNN's BF16 matmul, where the CPU has
// AVX512-BF16: x is rounded to BF16 once (to nearest, ties to even) and
// multiplied against w in place, in the memory map, accumulating in F32,
// in one oneDNN call on b.threads threads. It reports false, having
// written nothing that counts, if oneDNN failed (the caller falls back).
func (b *Backend) matMulDNNLBF16(d, xs, ws *Tensor) bool {
	n, in, out := xs.rows, xs.cols, ws.rows
	checkSpan("dst", d.data, n, out, d.stride)
	_ = ws.bf16[(out-1)*ws.stride+in-1]
	xh := b.activationsBF16(xs)
	defer putOf(b.bufs, xh)
	if ws.packed != nil {
		ok, err := ws.packed.matMul(n, out, in, unsafe.Pointer(&xh[0]), in, d.data, d.stride, b.threads)
		if ok {
			return true
		}
		if err != nil {
			dnnlFail(err)
			return false
		}
	}
	_, err := dnnlMatMulThreads(true, true, n, out, in, 1, unsafe.Pointer(&xh[0]), in,
		unsafe.Pointer(&ws.bf16[0]), ws.stride, d.data, d.stride, false, b.threads)
	if err != nil {
		dnnlFail(err)
	}
	return err == nil
}

// activationsBF16 rounds x to BF16 (to nearest, ties to even) into a
// dense buffer of the backend's pool (give it back with putOf), on the
// backend's threads.
func (b *Backend) activationsBF16(xs *Tensor) []uint16 {
	n, in := xs.rows, xs.cols
	xh := scratchOf[uint16](b.bufs, n*in)
	b.parallel(n, rowGrain(in), func(lo, hi int) {
		toBF16(xh[lo*in:], xs.data[lo*xs.stride:], hi-lo, in, xs.stride)
	})
	return xh
}
