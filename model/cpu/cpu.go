package cpu

import (
	"encoding/binary"
	"flag"
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/dlmcache/dlmcache/model/backend"
)

// Tensor is a row-major float32 matrix [rows, cols]. Row i occupies
// data[i*stride : i*stride+cols]; stride ≥ cols lets a Tensor be a view of
// some rows or columns of another one without a copy.
//
// A BF16 weight (see Weight) is one other form: its values are bfloat16s
// in bf16, laid out the same way, and data is nil; an F16 weight likewise
// holds IEEE halves in f16. A quantized weight (WeightQuant: Q8_0, Q4_0,
// Q4_1, Q5_0, Q5_1 and the K-quants) is the last: ggml's blocks in q, each row qStride bytes, data nil. Only
// MatMul (as w), Embed (as the table), ToHost, Free and the row views
// take those; every other operation panics on them.
type Tensor struct {
	rows, cols, stride int
	data               []float32
	// bf16 holds a BF16 weight's values, usually the checkpoint's
	// memory-mapped bytes in place (then also readOnly).
	bf16 []uint16
	// f16 holds an F16 weight's values (IEEE binary16), as bf16 does.
	f16 []uint16
	// q holds a quantized weight's blocks (qType's, per 32 or 256 values),
	// usually the GGUF file's memory-mapped bytes; row i starts at
	// i·qStride.
	q       []byte
	qStride int
	qType   backend.QuantType
	// readOnly marks a weight that aliases the checkpoint's read-only
	// memory map: writing to it would fault.
	readOnly bool
	// pooled marks storage that New took from the backend's pool and Free
	// gives back (never a view or a weight).
	pooled bool
	// packed is the weight reordered for oneDNN (Options.PackWeights);
	// data or bf16 still hold it as the checkpoint lays it out, for the
	// views (which never carry packed) and any product oneDNN declines.
	packed *packedWeight
	// bfl is a BF16 weight laid out at load for bf16mm.c's product
	// (bf16Layout), where BF16 products run on it (dotBF16); bf16 still
	// holds the checkpoint's bytes for the views and ToHost. Views never
	// carry it.
	bfl *bf16Layout
	// q8l is a Q8_0 weight laid out at load for the AVX512-VNNI product
	// (q8Layout; Options.PackWeights); q still holds the checkpoint's
	// blocks for the views, Embed and ToHost. Views never carry it.
	q8l *q8Layout
	// wgl is an F32, F16 or BF16 weight laid out at load for the blocked
	// panel kernel (wgLayout; Options.PackWeights), where its products run
	// there; data, f16 or bf16 still holds the checkpoint's values. Views
	// never carry it.
	wgl *wgLayout
	// panels is the weight laid out for the panel kernel (panelPack),
	// where the backend uses it (Backend.panel) and the weight is small
	// enough; views never carry it.
	panels []float32
	// kv is the kept attention layout of NewKV's pair that the tensor is
	// (a view: from its row kvRow0) one of, kvRole which (kvKeys,
	// kvValues); nil elsewhere.
	kv     *kvLayout
	kvRow0 int
	kvRole int8
	// perm, on a weight in the memory map whose rows are stored out of
	// order (PermuteRows), says that stored row s is the matrix's row
	// perm[s]; nil elsewhere. Views never carry it.
	perm []int32
}

// Rows is the number of rows.
func (t *Tensor) Rows() int { return t.rows }

// Cols is the number of columns.
func (t *Tensor) Cols() int { return t.cols }

// Stride is the distance in elements between the starts of two rows.
func (t *Tensor) Stride() int { return t.stride }

// Data returns the backing slice: row i is Data()[i*Stride() : i*Stride()+Cols()].
// A weight loaded in place from an F32 checkpoint is read-only memory. A
// BF16 weight has none (nil).
func (t *Tensor) Data() []float32 { return t.data }

// AliasesRaw implements backend.RawAliaser: whether t is a weight that
// reads the checkpoint bytes it was made from in place.
// A BF16 weight laid out at load (bf16Layout), an F32 one packed for
// oneDNN or laid out for the blocked panel kernel and a Q8_0 one laid out
// for its int8 product (Options.PackWeights) report false: their products read the
// layout, and the checkpoint's pages, released, are read again only by
// ToHost, views and a product oneDNN declines the layout for.
func (t *Tensor) AliasesRaw() bool {
	return t.readOnly && t.bfl == nil && t.packed == nil && t.q8l == nil && t.wgl == nil
}

// Permuted reports whether t is a weight left in the memory map with its
// rows stored out of order (PermuteRows), its products' columns put in
// order after each product.
func (t *Tensor) Permuted() bool { return t.perm != nil }

// BF16 reports whether t is a BF16 weight (values kept as bfloat16).
func (t *Tensor) BF16() bool { return t.bf16 != nil }

// F16 reports whether t is an F16 weight (values kept as IEEE halves).
func (t *Tensor) F16() bool { return t.f16 != nil }

// Row returns row i as a slice of length Cols().
func (t *Tensor) Row(i int) []float32 { return t.data[i*t.stride : i*t.stride+t.cols] }

// span is the part of data the matrix covers, starting at element (0, 0).
func (t *Tensor) span() []float32 {
	if t.rows == 0 || t.cols == 0 {
		return nil
	}
	return t.data[:(t.rows-1)*t.stride+t.cols]
}

func (t *Tensor) String() string {
	if t.q != nil {
		return fmt.Sprintf("cpu.Tensor[%d, %d] %s", t.rows, t.cols, t.qType)
	}
	if t.bf16 != nil {
		return fmt.Sprintf("cpu.Tensor[%d, %d] BF16", t.rows, t.cols)
	}
	if t.f16 != nil {
		return fmt.Sprintf("cpu.Tensor[%d, %d] F16", t.rows, t.cols)
	}
	return fmt.Sprintf("cpu.Tensor[%d, %d]", t.rows, t.cols)
}

// Backend is the CPU implementation of backend.Backend. Matrix products call
// OpenBLAS; the other operations are Go loops split over Threads goroutines.
// A Backend is safe for concurrent use, but its operations each use all of
// its threads, so running two at once only oversubscribes the cores.
type Backend struct {
	threads int
	settings
	// rope caches RoPE's cos/sin tables.
	rope ropeCache
	// bufs recycles the storage of freed tensors, shared with the backends
	// WithThreads makes (a tensor made on one may be freed on another),
	// and of the operations' scratch: attention's layouts and scores, the
	// BF16 and quantized copies of activations that products take.
	bufs *bufPool
	// packedBytes and packErr count what packWeights did at load.
	packedBytes atomic.Int64
	// q8LaidOut counts the bytes of Q8_0 weights laid out at load.
	q8LaidOut atomic.Int64
	// wgLaidOut counts the bytes of F32 weights laid out at load for the
	// blocked panel kernel.
	wgLaidOut atomic.Int64
	packErr   atomic.Pointer[error]
	// panelBytes counts the weights laid out for the panel kernel.
	panelBytes atomic.Int64
	// bf16LaidOut counts the BF16 weights laid out for bf16mm.c's
	// product at load.
	bf16LaidOut atomic.Int64
}

// settings are how a Backend computes, fixed when it is made: what
// WithThreads carries to a backend on other threads.
type settings struct {
	// split: MatMul splits each product over threads goroutines calling a
	// single-threaded OpenBLAS; otherwise OpenBLAS threads it itself.
	split bool
	// splitMode picks the dimension a split product is cut along.
	splitMode int
	// decodeBF16 converts BF16 weights to float32 at load instead of
	// keeping them (Options.DecodeBF16).
	decodeBF16 bool
	// decodeF16 converts F16 weights to float32 at load instead of
	// keeping them (Options.F16 F16Widen); f16BF16 rounds them to BF16
	// (F16AsBF16, or F16Auto where BF16 products run: dlmcache's kernel,
	// or oneDNN's where the pick was made at New).
	decodeF16, f16BF16 bool
	// gemmPick: which products run on oneDNN (Options.GEMM).
	gemmPick
	gemmDesc string
	// quantISA is the instruction set of the int8 products with quantized
	// weights (quant.c), or -1 where they decode the weight and keep the
	// activations F32 (Options.QuantProducts).
	quantISA int
	// packWeights reorders weight matrices at load for oneDNN
	// (Options.PackWeights, where oneDNN runs).
	packWeights bool
	// layOut lays weights out at load for the kernel their products run
	// on where that takes no more memory than the weight (Options.PackWeights,
	// whatever the GEMM library): F32 ones for the blocked panel kernel,
	// Q8_0 ones for the AVX512-VNNI product.
	layOut bool
	// attn is the fused kernel Attention runs (Options.Attention: the
	// widest this CPU has), or attnNone for the GEMM path.
	attn attnKernel
	// panel runs the products with F32 weights of at most panelMaxK
	// columns on the panel kernel (attn.c), each such weight laid
	// out for it at load: wherever AVX2+FMA runs.
	panel bool
	// scalarOps keeps the row-wise ops (RMSNorm, RoPE, Add) on their
	// plain C loops even where AVX2 runs: for tests.
	scalarOps bool
}

// Options configures a backend (NewWithOptions).
type Options struct {
	// Threads is the number of cores to use (≤ 0: all of runtime.NumCPU()).
	Threads int
	// DecodeBF16 converts BF16 weights to float32 at load: twice the
	// memory, and products that skip the per-product decoding. By default
	// BF16 weights stay BF16, in place in the checkpoint's memory map.
	DecodeBF16 bool
	// F16 is how F16 weight matrices are held ("" is F16Keep; NewFromEnv's
	// default is F16Auto); see F16Form.
	F16 F16Form
	// GEMM picks the library behind the matrix products ("" is
	// GEMMAuto); see GEMMLib.
	GEMM GEMMLib
	// PackWeights reorders each weight matrix at load into the blocked
	// layout oneDNN's matmul uses, in 2 MB pages of its own, where the
	// products run on oneDNN (F32 weights too wide for the panel kernel;
	// BF16 and F16 ones where oneDNN's AVX512-BF16 kernels take them
	// rather than bf16mm.c's, GEMMOneDNN): products skip repacking the
	// weight at every call and the 4 KB pages of the memory map, at the
	// cost of the reordering pass at load; the loader releases the
	// checkpoint's pages of each packed weight (AliasesRaw), so the
	// layout takes the memory the mapped weight did (WeightsPacked).
	// NewFromEnv sets it unless WeightsEnv is "mapped".
	PackWeights bool
	// Attention picks Attention's implementation ("" is AttentionFused);
	// see AttentionImpl.
	Attention AttentionImpl
	// QuantProducts picks how products with quantized weights (Q8_0,
	// Q4_0, Q5_0 and the K-quants) run ("" is QuantInt8); see QuantImpl.
	QuantProducts QuantImpl
}

// QuantEnv is the environment variable New reads to set
// Options.QuantProducts: "int8" (or unset) or "f32".
const QuantEnv = "DLMCACHE_CPU_QUANT"

// QuantImpl names a way of multiplying by a quantized weight.
type QuantImpl string

// The ways of multiplying by a quantized weight. docs/gguf.md has what
// each measured.
const (
	// QuantInt8 quantizes the activations per row to Q8_0 blocks (a
	// float32 scale per 32 values) and multiplies them with the weight's
	// blocks as integers, as llama.cpp does: AVX-VNNI or AVX512-VNNI
	// where the CPU has them, else AVX2, else C (the K-quants: AVX512-VNNI,
	// else AVX2, else C).
	QuantInt8 QuantImpl = "int8"
	// QuantF32 keeps the activations F32: the weight is decoded a panel
	// of rows at a time into float32 scratch, and sgemm multiplies.
	QuantF32 QuantImpl = "f32"
)

// ParseQuant parses a QuantImpl; "" is QuantInt8.
func ParseQuant(s string) (QuantImpl, error) {
	return parseChoice("quantized products", s, QuantInt8, QuantF32)
}

// QuantProducts describes how this backend multiplies by quantized
// weights: "int8 (AVX2)", "f32 (decoded panels, sgemm)", ….
func (b *Backend) QuantProducts() string {
	if b.quantISA < 0 {
		return string(QuantF32) + " (decoded panels, sgemm)"
	}
	return fmt.Sprintf("%s (%s)", QuantInt8, isaNames[b.quantISA])
}

// Weights describes where the backend's weights are read from
// (Options.PackWeights, WeightsEnv): "packed (…)" or "mapped (…)".
func (b *Backend) Weights() string {
	if !b.layOut {
		return string(WeightsMapped) + " (every weight read in place in the memory map; " + WeightsEnv + " unset lays them out at load)"
	}
	lay := "F32 ones for oneDNN where it multiplies them, else for the blocked panel kernel"
	if b.quantISA == isaAVX512VNNI {
		lay += ", Q8_0 ones for the AVX512-VNNI product"
	}
	return string(WeightsPacked) + " (laid out at load, the file's pages released: " + lay + "; BF16 and F16 ones for bf16mm.c where it runs, else for the blocked panel kernel, kept 16-bit; " + WeightsEnv + "=mapped keeps them in the memory map)"
}

// AttentionEnv is the environment variable New reads to set
// Options.Attention: "fused" (or unset) or "gemm".
const AttentionEnv = "DLMCACHE_CPU_ATTENTION"

// AttentionImpl names an implementation of Attention.
type AttentionImpl string

// The implementations of Attention.
const (
	// AttentionFused runs each head's scores, softmax and product with v
	// a few query rows at a time in one kernel (attn.c): eight rows
	// on AVX-512F, six on AVX2+FMA; on a CPU with neither it is
	// AttentionGEMM.
	AttentionFused AttentionImpl = "fused"
	// AttentionGEMM runs the two products of each head and block of query
	// rows on the GEMM library, with the softmax between them.
	AttentionGEMM AttentionImpl = "gemm"
)

// ParseAttention parses an AttentionImpl; "" is AttentionFused.
func ParseAttention(s string) (AttentionImpl, error) {
	return parseChoice("attention", s, AttentionFused, AttentionGEMM)
}

// parseChoice parses s (trimmed, in any case) as one of choices; "" is
// the first. what names the setting in the error.
func parseChoice[T ~string](what, s string, choices ...T) (T, error) {
	v := T(strings.ToLower(strings.TrimSpace(s)))
	if v == "" {
		return choices[0], nil
	}
	if slices.Contains(choices, v) {
		return v, nil
	}
	names := make([]string, len(choices))
	for i, c := range choices {
		names[i] = string(c)
	}
	last := len(names) - 1
	return "", fmt.Errorf("cpu: %s %q: want %s or %s", what, s, strings.Join(names[:last], ", "), names[last])
}

// WeightsEnv is the environment variable New reads to set
// Options.PackWeights (ParseWeights): "packed" or unset sets it, "mapped"
// leaves weights in the checkpoint's memory map.
const WeightsEnv = "DLMCACHE_CPU_WEIGHTS"

// WeightsForm names where a backend's F32 weight matrices are read from
// by products on oneDNN (Options.PackWeights).
type WeightsForm string

// The forms of an F32 weight matrix whose products run on oneDNN.
const (
	// WeightsPacked reorders it at load into oneDNN's blocked layout,
	// the checkpoint's pages then released: NewFromEnv's default. The
	// products are bit for bit those on the mapped weight (oneDNN's
	// matmul packs the mapped one the same way, at every call), l16-d2048's
	// step 1.14× and its 10%-rows step 1.1–1.3× as fast on Zen 5, in the
	// same peak memory, for a load that reorders 3.4 GB (4–5 s there).
	WeightsPacked WeightsForm = "packed"
	// WeightsMapped reads it in place in the memory map: no pass at load,
	// and the file's pages shared with any other process mapping it.
	WeightsMapped WeightsForm = "mapped"
)

// ParseWeights parses a WeightsForm ("" is WeightsPacked).
func ParseWeights(s string) (WeightsForm, error) {
	return parseChoice("weights", s, WeightsPacked, WeightsMapped)
}

// BF16Env is the environment variable New reads: "f32" sets
// Options.DecodeBF16, "bf16" or unset keeps BF16 weights as BF16.
const BF16Env = "DLMCACHE_CPU_BF16"

// F16Env is the environment variable New reads to set Options.F16:
// "auto" (or unset), "f16", "bf16" or "f32".
const F16Env = "DLMCACHE_CPU_F16"

// F16Form names how a backend holds F16 weight matrices.
type F16Form string

// The forms of an F16 weight matrix ([1, d] vectors are always widened).
const (
	// F16Auto is F16AsBF16 where products with BF16 weights run on
	// oneDNN's AVX512-BF16 kernels, else F16Keep: NewFromEnv's default.
	F16Auto F16Form = "auto"
	// F16Keep keeps the halves, in place in the memory map; products
	// convert them to float32 a panel at a time (F16C), exactly.
	F16Keep F16Form = "f16"
	// F16AsBF16 rounds the halves to BF16 at load (to nearest, ties to
	// even: 3 of their 10 fraction bits go) into a copy of the same size,
	// whose file pages are released; the weight is then a BF16 one, and
	// its products round the activations to BF16 too, as a BF16 file's do.
	// It needs oneDNN's AVX512-BF16 kernels. On the l16-d2048 shape, Zen 4,
	// a step took 0.86 s this way against 1.68 s kept F16 (make
	// bench-llamacpp; docs/performance.md).
	F16AsBF16 F16Form = "bf16"
	// F16Widen converts the halves to float32 at load: twice the memory,
	// exact, no per-product conversion.
	F16Widen F16Form = "f32"
)

// ParseF16Form parses an F16Form; "" is F16Auto.
func ParseF16Form(s string) (F16Form, error) {
	return parseChoice("F16 weights", s, F16Auto, F16Keep, F16AsBF16, F16Widen)
}

var (
	_ backend.Backend  = (*Backend)(nil)
	_ backend.Threaded = (*Backend)(nil)
)

// New returns a CPU backend that uses threads cores (threads ≤ 0: all of
// runtime.NumCPU()), configured from the environment as NewFromEnv is; it
// panics where NewFromEnv returns an error.
func New(threads int) *Backend {
	b, err := NewFromEnv(threads)
	if err != nil {
		panic(err)
	}
	return b
}

// NewFromEnv returns a CPU backend that uses threads cores (threads ≤ 0:
// all of runtime.NumCPU()).
//
// It sets OpenBLAS to one thread, process-wide, and splits every matrix
// product over its own goroutines instead: see the measurements in
// bench_test.go. Every Backend of a process shares that setting.
//
// $DLMCACHE_CPU_BF16 (BF16Env) picks how BF16 weights are held: "bf16"
// (or unset) keeps them, "f32" converts them at load; $DLMCACHE_CPU_F16
// (F16Env) likewise for F16 weights ("f16" or "f32"). $DLMCACHE_CPU_GEMM
// (GEMMEnv) picks the GEMM library (ParseGEMM). Other values, and
// "onednn" where oneDNN cannot be used, are errors.
func NewFromEnv(threads int) (*Backend, error) {
	if isaCapErr != nil {
		return nil, isaCapErr
	}
	o := Options{Threads: threads}
	var err error
	if o.DecodeBF16, err = backend.EnvSwitch("cpu", BF16Env, "bf16", "f32"); err != nil {
		return nil, err
	}
	if o.F16, err = ParseF16Form(os.Getenv(F16Env)); err != nil {
		return nil, fmt.Errorf("%s: %w", F16Env, err)
	}
	if o.GEMM, err = ParseGEMM(os.Getenv(GEMMEnv)); err != nil {
		return nil, fmt.Errorf("%s: %w", GEMMEnv, err)
	}
	wf, err := ParseWeights(os.Getenv(WeightsEnv))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", WeightsEnv, err)
	}
	o.PackWeights = wf == WeightsPacked
	if o.Attention, err = ParseAttention(os.Getenv(AttentionEnv)); err != nil {
		return nil, fmt.Errorf("%s: %w", AttentionEnv, err)
	}
	if o.QuantProducts, err = ParseQuant(os.Getenv(QuantEnv)); err != nil {
		return nil, fmt.Errorf("%s: %w", QuantEnv, err)
	}
	return newBackend(o)
}

// NewWithOptions returns a CPU backend configured by o; like New, it sets
// OpenBLAS to one thread, process-wide. It does not read the environment,
// and panics where o.GEMM cannot be had.
func NewWithOptions(o Options) *Backend {
	b, err := newBackend(o)
	if err != nil {
		panic(err)
	}
	return b
}

// NewChecked is NewWithOptions returning an error where o.GEMM cannot be
// had (oneDNN asked for and absent), for callers that try a library.
func NewChecked(o Options) (*Backend, error) { return newBackend(o) }

// BF16Activations reports whether products with BF16 weights round the
// activations to BF16 too (oneDNN's BF16 matmul on AVX512-BF16) rather
// than multiply F32 activations by converted weights.
func (b *Backend) BF16Activations() bool { return b.dotBF16 || b.dnnlPick().dnnlBF16 }

func newBackend(o Options) (*Backend, error) {
	threads := o.Threads
	if threads <= 0 {
		threads = runtime.NumCPU()
	}
	lib, err := ParseGEMM(string(o.GEMM))
	if err != nil {
		return nil, err
	}
	pick, err := pickGEMM(lib)
	if err != nil {
		return nil, err
	}
	attn, err := ParseAttention(string(o.Attention))
	if err != nil {
		return nil, err
	}
	qi, err := ParseQuant(string(o.QuantProducts))
	if err != nil {
		return nil, err
	}
	f16 := o.F16
	if f16 == "" {
		f16 = F16Keep
	}
	if f16, err = ParseF16Form(string(f16)); err != nil {
		return nil, err
	}
	// F16AsBF16 needs BF16 products: dlmcache's kernel, or oneDNN's
	// (loaded now to say). F16Auto takes them where the kernel runs; a
	// lazy pick without it has no BF16 products (oneDNN's need the same
	// AVX512-BF16, under the same cap).
	if f16 == F16AsBF16 && !pick.dotBF16 {
		if p := pick; p.lazy {
			p = *autoPick()
			if !p.dnnlBF16 {
				return nil, fmt.Errorf("cpu: F16 weights as BF16 need AVX512-BF16 products: %s", p.desc)
			}
		} else if !p.dnnlBF16 {
			return nil, fmt.Errorf("cpu: F16 weights as BF16 need AVX512-BF16 products: %s", p.desc)
		}
	}
	f16BF16 := f16 == F16AsBF16 || f16 == F16Auto && (pick.dotBF16 || !pick.lazy && pick.dnnlBF16)
	b := &Backend{threads: threads, bufs: new(bufPool), settings: settings{split: true, decodeBF16: o.DecodeBF16, decodeF16: f16 == F16Widen,
		f16BF16: f16BF16, gemmPick: pick, gemmDesc: pick.desc,
		packWeights: o.PackWeights && (pick.dnnl || pick.lazy), layOut: o.PackWeights, quantISA: quantISA}}
	if qi == QuantF32 {
		b.quantISA = -1
	}
	if attn == AttentionFused {
		b.attn = bestAttn
	}
	b.panel = simd
	blasSetThreads(1)
	return b, nil
}

// newBLASThreaded returns a backend whose matrix products are one OpenBLAS
// call threaded by OpenBLAS itself (threads of its own). Kept for
// benchmarks that compare the two strategies.
func newBLASThreaded(threads int) *Backend {
	if threads <= 0 {
		threads = runtime.NumCPU()
	}
	b := &Backend{threads: threads, bufs: new(bufPool), settings: settings{split: false, gemmDesc: BLAS() + ", threaded by OpenBLAS", quantISA: quantISA}}
	blasSetThreads(threads)
	return b
}

// Name returns "cpu".
func (b *Backend) Name() string { return "cpu" }

// Threads is the number of goroutines an operation is split over.
func (b *Backend) Threads() int { return b.threads }

// WithThreads implements backend.Threaded: a backend with b's settings
// and b's pool of freed tensors' storage (a batch's buffers are recycled
// on whichever share runs it) whose operations run on n threads (at least
// 1), for the same tensors —
// weights loaded by b, K/V and activations made by either. Every value is
// the same as b's: the threads split rows and tasks, never a sum.
func (b *Backend) WithThreads(n int) backend.Backend {
	if !b.split {
		// OpenBLAS threads its own products, process-wide (blasSetThreads).
		return b
	}
	return &Backend{threads: max(1, n), settings: b.settings, bufs: b.bufs}
}

// Weight makes a [rows, cols] tensor from little-endian checkpoint bytes.
// F32 bytes that are 4-byte aligned are used in place (the result is
// read-only and keeps raw alive). BF16 and F16 matrices stay 16-bit (a
// BF16 or F16 Tensor), in place when 2-byte aligned, else copied; vectors
// ([1, d], the norm weights), BF16 under Options.DecodeBF16 and F16
// under Options.DecodeF16 are converted to a new float32 matrix. An F16
// matrix the panel kernel takes (at most halfPanelMaxK columns, where the
// backend uses it) is also laid out for it, as an F32 one is.
func (b *Backend) Weight(dtype backend.DType, rows, cols int, raw []byte) (backend.Tensor, error) {
	if rows < 0 || cols < 0 {
		return nil, fmt.Errorf("cpu: weight shape [%d, %d] is negative", rows, cols)
	}
	n := rows * cols
	if cols != 0 && n/cols != rows {
		return nil, fmt.Errorf("cpu: weight shape [%d, %d] overflows", rows, cols)
	}
	switch dtype {
	case backend.F32, backend.F16, backend.BF16:
	default:
		return nil, fmt.Errorf("cpu: weight [%d, %d]: unsupported dtype %v", rows, cols, dtype)
	}
	if want := n * dtype.Size(); len(raw) != want {
		return nil, fmt.Errorf("cpu: weight [%d, %d] %v needs %d bytes, got %d", rows, cols, dtype, want, len(raw))
	}
	t := &Tensor{rows: rows, cols: cols, stride: cols}
	if n == 0 {
		return t, nil
	}
	switch dtype {
	case backend.F32:
		if uintptr(unsafe.Pointer(&raw[0]))%4 == 0 && littleEndian {
			t.data = unsafe.Slice((*float32)(unsafe.Pointer(&raw[0])), n)
			t.readOnly = true
		} else {
			t.data = make([]float32, n)
			b.parallel(n, 1<<16, func(lo, hi int) { decodeF32(t.data[lo:hi], raw[4*lo:4*hi]) })
		}
		if b.layOut && rows > 1 && !(b.panel && cols <= panelMaxK) {
			// Where matMulF32 multiplies it: on oneDNN, packed for it;
			// else on the blocked panel kernel, laid out for that.
			if b.packWeights && b.dnnlOK(dnnlWeightRows, rows, cols) {
				b.pack(t, false, unsafe.Pointer(&t.data[0]))
			} else if b.panel {
				b.layOutWG(t)
			}
		}
	case backend.F16:
		if uintptr(unsafe.Pointer(&raw[0]))%2 == 0 && littleEndian {
			t.f16 = unsafe.Slice((*uint16)(unsafe.Pointer(&raw[0])), n)
			t.readOnly = true
		} else {
			t.f16 = make([]uint16, n)
			for i := range t.f16 {
				t.f16[i] = binary.LittleEndian.Uint16(raw[2*i:])
			}
		}
		// Rounded to BF16 where the weight is too wide for the panel
		// kernel: a narrower one runs faster there (and exactly), as F32.
		if rows > 1 && b.f16BF16 && !(b.panel && cols <= halfPanelMaxK) {
			// In the memory map, rounded to BF16 straight into the
			// layout of bf16mm.c's kernel (no copy of its own), as a
			// BF16 file's weight is; else into a BF16 copy.
			if b.dotBF16 && t.readOnly {
				if b.layOutBF16(t); t.bfl != nil {
					return t, nil
				}
			}
			b.f16ToBF16(t)
			if b.packWeights && !b.dotBF16 && b.dnnlPick().dnnlBF16 {
				b.pack(t, true, unsafe.Pointer(&t.bf16[0]))
			}
			return t, nil
		}
		if rows > 1 && !b.decodeF16 {
			if b.panel && cols <= halfPanelMaxK {
				b.halfPanels(t, f16Rows)
			} else if b.layOut && t.readOnly && b.wgRuns(cols, rows) {
				b.layOutWG(t) // kept F16, reordered for matMulF16's kernel
			}
			return t, nil
		}
		t.data = make([]float32, n)
		b.parallel(rows, rowGrain(cols), func(lo, hi int) { f16Rows(t.data[lo*cols:], t, lo, hi) })
		t.f16, t.readOnly = nil, false
	case backend.BF16:
		if uintptr(unsafe.Pointer(&raw[0]))%2 == 0 && littleEndian {
			t.bf16 = unsafe.Slice((*uint16)(unsafe.Pointer(&raw[0])), n)
			t.readOnly = true
		} else {
			t.bf16 = make([]uint16, n)
			for i := range t.bf16 {
				t.bf16[i] = binary.LittleEndian.Uint16(raw[2*i:])
			}
		}
		if rows > 1 && !b.decodeBF16 {
			if b.panel && cols <= halfPanelMaxK {
				// As an F16 one (a small model's weights: their products,
				// fused halves included, then run as F32 ones, with F32
				// activations).
				b.halfPanels(t, bf16Rows)
			} else if b.dotBF16 && t.readOnly {
				b.layOutBF16(t)
			} else if b.packWeights && !b.dotBF16 && b.dnnlPick().dnnlBF16 {
				b.pack(t, true, unsafe.Pointer(&t.bf16[0]))
			} else if b.layOut && t.readOnly && !b.dnnlPick().dnnlBF16 && b.wgRuns(cols, rows) {
				b.layOutWG(t) // kept BF16, reordered for matMulBF16's kernel
			}
			return t, nil
		}
		// Converted: the C loop, as MatMul's panels.
		t.data = make([]float32, n)
		b.parallel(rows, rowGrain(cols), func(lo, hi int) { bf16Rows(t.data[lo*cols:], t, lo, hi) })
		t.bf16, t.readOnly = nil, false
	}
	if b.panel && rows > 1 && cols <= panelMaxK {
		t.panels = panelPack(t.data, t.stride, rows, cols)
		b.panelBytes.Add(int64(4 * len(t.panels)))
	}
	return t, nil
}

// halfPanels lays out the 16-bit or quantized weight t for the panel
// kernel, from a float32 copy (decode: f16Rows, bf16Rows or quantRows,
// exact) dropped after.
func (b *Backend) halfPanels(t *Tensor, decode func(dst []float32, w *Tensor, lo, hi int)) {
	rows, cols := t.rows, t.cols
	f := make([]float32, rows*cols)
	b.parallel(rows, rowGrain(cols), func(lo, hi int) { decode(f[lo*cols:], t, lo, hi) })
	t.panels = panelPack(f, cols, rows, cols)
	b.panelBytes.Add(int64(4 * len(t.panels)))
}

// f16ToBF16 makes the F16 weight matrix t a BF16 one (F16AsBF16): its
// halves rounded to BF16 into a copy of its own, 64 rows at a time
// through float32 (exact) on every thread.
func (b *Backend) f16ToBF16(t *Tensor) {
	rows, cols := t.rows, t.cols
	out := make([]uint16, rows*cols)
	const chunk = 64
	b.parallel(rows, rowGrain(cols), func(lo, hi int) {
		buf := b.bufs.scratch(min(chunk, hi-lo) * cols)
		for r := lo; r < hi; r += chunk {
			e := min(r+chunk, hi)
			f16Rows(buf, t, r, e)
			toBF16(out[r*cols:], buf, e-r, cols, cols)
		}
		b.bufs.put(buf)
	})
	t.bf16, t.f16, t.readOnly = out, nil, false
}

// WeightQuant implements backend.QuantWeighter: a [rows, cols] weight
// kept as ggml's Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS or IQ4_NL blocks (raw:
// rows·cols/typ.BlockValues() blocks, used in place; the tensor is
// read-only). MatMul multiplies it as Options.QuantProducts says (int8
// products, quantProduct; or a panel of rows at a time decoded into
// sgemm, convertedMatMul); Embed and ToHost decode the rows they
// read. It is never held as float32 whole, and never laid out for
// oneDNN, so products with it do not run fused (backend.Fuser reports
// false). A Q8_0 weight is laid out for the AVX512-VNNI product where
// that runs (q8Layout, Options.PackWeights): the same bytes reordered,
// the loader then releasing the file's (AliasesRaw).
func (b *Backend) WeightQuant(typ backend.QuantType, rows, cols int, raw []byte) (backend.Tensor, error) {
	bb, bv := typ.BlockBytes(), typ.BlockValues()
	if bb == 0 {
		return nil, fmt.Errorf("cpu: quantized weight type %s is not kept (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS, IQ4_NL are)", typ)
	}
	if rows < 0 || cols <= 0 || cols%bv != 0 {
		return nil, fmt.Errorf("cpu: %s weight [%d, %d]: rows must be ≥ 0 and cols a positive multiple of %d", typ, rows, cols, bv)
	}
	stride := cols / bv * bb
	if rows > (1<<62)/stride || len(raw) != rows*stride {
		return nil, fmt.Errorf("cpu: %s weight [%d, %d] needs %d bytes, got %d", typ, rows, cols, rows*stride, len(raw))
	}
	t := &Tensor{rows: rows, cols: cols, stride: cols, qStride: stride, qType: typ, readOnly: true}
	if rows > 0 {
		t.q = raw
	}
	if b.panel && rows > 1 && cols <= halfPanelMaxK {
		// A small model's matrix: decoded (exactly) and laid out for the
		// panel kernel as a 16-bit one is, its products (the fused halves
		// included) then the F32 weight's of the same values, with F32
		// activations. The int8 products lose to the panel kernel at
		// these sizes (the bundled model's Q8_0 step ran at 0.6 of its
		// F32 step on them, Zen 5).
		b.halfPanels(t, quantRows)
	} else if b.layOut && rows >= q8LayoutRows {
		b.layOutQ8(t)
	}
	return t, nil
}

// pack reorders the weight t for oneDNN (Options.PackWeights); where it
// cannot, t stays as it is and GEMM says why.
func (b *Backend) pack(t *Tensor, bf16 bool, w unsafe.Pointer) {
	pw, err := dnnlPack(bf16, t.rows, t.cols, w, t.stride, b.threads)
	if err != nil {
		b.packErr.CompareAndSwap(nil, &err)
		return
	}
	if pw != nil {
		t.packed = pw
		b.packedBytes.Add(int64(pw.bytes))
	}
}

// New returns a zeroed [rows, cols] matrix.
func (b *Backend) New(rows, cols int) backend.Tensor { return b.pooled("New", rows, cols, true) }

// NewUninit implements backend.Uninit: a [rows, cols] matrix whose
// storage is recycled as it is, not cleared. In a test binary that runs no
// benchmark its elements are NaN instead, so that an operation or a plan
// that leaves an element of its destination unwritten shows in every
// test's results (benchmarks time what a program does).
func (b *Backend) NewUninit(rows, cols int) backend.Tensor {
	t := b.pooled("NewUninit", rows, cols, false)
	if poisonUninit() {
		nan := float32(math.NaN())
		for i := range t.data {
			t.data[i] = nan
		}
	}
	return t
}

// pooled returns a [rows, cols] matrix on storage from the pool, cleared
// when zero.
func (b *Backend) pooled(op string, rows, cols int, zero bool) *Tensor {
	if rows < 0 || cols < 0 {
		panic(fmt.Sprintf("cpu: %s: negative shape [%d, %d]", op, rows, cols))
	}
	return &Tensor{rows: rows, cols: cols, stride: cols, data: b.bufs.take(rows*cols, zero), pooled: true}
}

// poisonUninit reports whether NewUninit fills its matrices with NaN: in a
// test binary, unless it was asked to run benchmarks (-test.bench).
var poisonUninit = sync.OnceValue(func() bool {
	if !testing.Testing() {
		return false
	}
	f := flag.Lookup("test.bench")
	return f == nil || f.Value.String() == ""
})

// FromHost copies data into a new [rows, cols] matrix.
func (b *Backend) FromHost(rows, cols int, data []float32) backend.Tensor {
	checked(backend.CheckFromHost(rows, cols, len(data)))
	d := make([]float32, len(data))
	copy(d, data)
	return &Tensor{rows: rows, cols: cols, stride: cols, data: d}
}

// OnHost implements backend.Hoster: a tensor on data itself.
func (b *Backend) OnHost(rows, cols int, data []float32) backend.Tensor {
	checked(backend.CheckFromHost(rows, cols, len(data)))
	return &Tensor{rows: rows, cols: cols, stride: cols, data: data}
}

// ToHost copies t into dst (allocated when nil) and returns it; a BF16 or
// F16 weight is converted (exactly).
func (b *Backend) ToHost(t backend.Tensor, dst []float32) []float32 {
	x := anyTensor(t, "ToHost")
	dst, err := backend.HostDst(x, dst)
	checked(err)
	if x.perm != nil {
		defer permuteRowsInPlace(dst, x.cols, x.perm)
	}
	if x.bf16 != nil {
		b.parallel(x.rows, rowGrain(x.cols), func(lo, hi int) { bf16Rows(dst[lo*x.cols:], x, lo, hi) })
		return dst
	}
	if x.f16 != nil {
		b.parallel(x.rows, rowGrain(x.cols), func(lo, hi int) { f16Rows(dst[lo*x.cols:], x, lo, hi) })
		return dst
	}
	if x.q != nil {
		b.parallel(x.rows, rowGrain(x.cols), func(lo, hi int) { quantRows(dst[lo*x.cols:], x, lo, hi) })
		return dst
	}
	if x.stride == x.cols {
		copy(dst, x.span())
		return dst
	}
	for i := 0; i < x.rows; i++ {
		copy(dst[i*x.cols:(i+1)*x.cols], x.Row(i))
	}
	return dst
}

// Free drops t's storage (a tensor from New goes back to the pool for the
// next New); using t afterwards panics.
func (b *Backend) Free(t backend.Tensor) {
	x := anyTensor(t, "Free")
	if x.kv != nil && x.kvRow0 == 0 && x.pooled {
		x.kv.free(b)
	}
	if x.pooled {
		b.bufs.put(x.data)
		x.pooled = false
	}
	b.dropLayout(x)
	x.data, x.bf16, x.f16, x.q, x.panels, x.perm = nil, nil, nil, nil, nil, nil
	x.rows, x.cols, x.stride = 0, 0, 0
}

// RowView returns rows [lo, hi) of t as a tensor sharing its storage (a
// BF16 or F16 weight's view is a BF16 or F16 weight).
func (b *Backend) RowView(t backend.Tensor, lo, hi int) *Tensor {
	x := anyTensor(t, "RowView")
	if x.perm != nil {
		panic(fmt.Sprintf("cpu: RowView of %v: a weight whose rows are stored out of order (PermuteRows) has no row views", x))
	}
	if lo < 0 || hi < lo || hi > x.rows {
		panic(fmt.Sprintf("cpu: RowView: rows [%d, %d) of %v", lo, hi, x))
	}
	v := &Tensor{rows: hi - lo, cols: x.cols, stride: x.stride, readOnly: x.readOnly, qStride: x.qStride, qType: x.qType,
		kv: x.kv, kvRow0: x.kvRow0 + lo, kvRole: x.kvRole}
	if hi > lo {
		if x.q != nil {
			v.q = x.q[lo*x.qStride:]
		} else if x.bf16 != nil {
			v.bf16 = x.bf16[lo*x.stride:]
		} else if x.f16 != nil {
			v.f16 = x.f16[lo*x.stride:]
		} else {
			v.data = x.data[lo*x.stride:]
		}
	}
	return v
}

// carveAlign is the alignment, in values, of each tensor Carve lays in a
// temporary: 64 bytes, a cache line and a zmm load.
const carveAlign = 16

// CarveSize implements backend.Carver: the shapes' values, each rounded
// up to carveAlign.
func (b *Backend) CarveSize(shapes ...[2]int) int {
	n := 0
	for _, s := range shapes {
		if s[0] < 0 || s[1] < 0 {
			panic(fmt.Sprintf("cpu: CarveSize: negative shape %v", s))
		}
		n += (s[0]*s[1] + carveAlign - 1) / carveAlign * carveAlign
	}
	return n
}

// Carve implements backend.Carver: dense tensors on consecutive slices of
// t's storage, each from a multiple of carveAlign values (t's own storage
// is the pool's, page-aligned where large).
func (b *Backend) Carve(t backend.Tensor, shapes ...[2]int) []backend.Tensor {
	x := writableRows(t, "Carve")
	if x.kv != nil || (x.rows > 1 && x.stride != x.cols) {
		panic(fmt.Sprintf("cpu: Carve: %v is not a dense temporary", x))
	}
	if need := b.CarveSize(shapes...); x.rows*x.cols < need {
		panic(fmt.Sprintf("cpu: Carve: %v holds %d values, %v need %d", x, x.rows*x.cols, shapes, need))
	}
	ts := make([]backend.Tensor, len(shapes))
	off := 0
	for i, s := range shapes {
		n := s[0] * s[1]
		ts[i] = &Tensor{rows: s[0], cols: s[1], stride: s[1], data: x.data[off : off+n : off+n]}
		off += (n + carveAlign - 1) / carveAlign * carveAlign
	}
	return ts
}

// ViewRows implements backend.Viewer.
func (b *Backend) ViewRows(t backend.Tensor, lo, hi int) backend.Tensor { return b.RowView(t, lo, hi) }

// ViewCols implements backend.Viewer.
func (b *Backend) ViewCols(t backend.Tensor, lo, hi int) backend.Tensor { return b.ColView(t, lo, hi) }

// ColView returns columns [lo, hi) of t as a tensor sharing its storage (a
// BF16 or F16 weight's view is a BF16 or F16 weight).
func (b *Backend) ColView(t backend.Tensor, lo, hi int) *Tensor {
	x := anyTensor(t, "ColView")
	if x.q != nil {
		panic(fmt.Sprintf("cpu: ColView of %v: a quantized weight has row views only", x))
	}
	if lo < 0 || hi < lo || hi > x.cols {
		panic(fmt.Sprintf("cpu: ColView: columns [%d, %d) of %v", lo, hi, x))
	}
	v := &Tensor{rows: x.rows, cols: hi - lo, stride: x.stride, readOnly: x.readOnly, kv: x.kv, kvRow0: x.kvRow0}
	if x.rows > 0 && hi > lo {
		if x.bf16 != nil {
			v.bf16 = x.bf16[lo:]
		} else if x.f16 != nil {
			v.f16 = x.f16[lo:]
		} else {
			v.data = x.data[lo:]
		}
	}
	return v
}

// tensor asserts that t is a live float32 CPU tensor: an operation that
// reads its data, which a BF16 weight does not have.
func tensor(t backend.Tensor, op string) *Tensor {
	x := anyTensor(t, op)
	if x.bf16 != nil || x.f16 != nil || x.q != nil {
		panic(fmt.Sprintf("cpu: %s: %v is a BF16, F16 or quantized weight, which only MatMul (as w), Embed (as the table), ToHost and the views take", op, x))
	}
	return x
}

// anyTensor asserts that t is a live CPU tensor, float32 or a kept weight.
func anyTensor(t backend.Tensor, op string) *Tensor {
	x, ok := t.(*Tensor)
	if !ok || x == nil {
		panic(fmt.Sprintf("cpu: %s: tensor %T is not a cpu tensor", op, t))
	}
	if x.data == nil && x.bf16 == nil && x.f16 == nil && x.q == nil && x.rows*x.cols != 0 {
		panic(fmt.Sprintf("cpu: %s: tensor used after Free", op))
	}
	return x
}

// writable asserts that t may be written.
func writable(t backend.Tensor, op string) *Tensor {
	x := writableRows(t, op)
	x.written(0)
	return x
}

// writableRows is writable for an operation that records the rows it
// writes itself (Tensor.written).
func writableRows(t backend.Tensor, op string) *Tensor {
	x := tensor(t, op)
	if x.readOnly {
		panic(fmt.Sprintf("cpu: %s: destination %v is a read-only weight", op, x))
	}
	return x
}

// parallel runs fn over [0, n) split into at most b.threads contiguous
// chunks of at least grain items each; below 2·grain it runs fn(0, n) on the
// calling goroutine. The caller's goroutine runs the first chunk.
func (b *Backend) parallel(n, grain int, fn func(lo, hi int)) {
	if n <= 0 {
		return
	}
	if grain < 1 {
		grain = 1
	}
	parts := b.threads
	if m := n / grain; m < parts {
		parts = m
	}
	if parts <= 1 {
		fn(0, n)
		return
	}
	fanOut(parts, func(p int) { fn(p*n/parts, (p+1)*n/parts) })
}

// fanOut runs run(p) for each p in [0, parts) at once, part 0 on the
// calling goroutine, and returns when all have returned.
func fanOut(parts int, run func(p int)) {
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

// parts16 cuts [0, total) into at most b.threads parts whose edges are on
// multiples of 16 (a whole AVX-512 register of float32), so that each part
// runs the libraries' full-width kernels: part p is [edge(p), edge(p+1)).
func (b *Backend) parts16(total int) (parts int, edge func(p int) int) {
	blocks := (total + 15) / 16
	parts = min(b.threads, blocks)
	return parts, func(p int) int { return min(total, 16*(p*blocks/parts)) }
}
