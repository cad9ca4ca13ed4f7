// Package backend is the small interface between the model forward and the
// hardware that runs it: a handful of matrix operations on row-major float32
// activations and on weights kept in whatever form the backend likes.
//
// Every operation the network's forward (model.Network) needs is here and
// nothing else. A backend that wants to do more (fused kernels,
// device-resident caches) adds an optional interface next to this one
// instead of growing it.
//
// Shapes are written [rows, cols]. Activations are always 2-D float32
// matrices: a sequence of n tokens of width d is [n, d]. Attention heads are
// laid out contiguously along the columns: head h of a [n, H*hd] matrix is
// columns h*hd .. (h+1)*hd-1.
package backend

import "fmt"

// DType is the element type of a weight as stored in a checkpoint.
type DType int

const (
	F32 DType = iota
	F16
	BF16
)

var dtypeNames = map[DType]string{F32: "F32", F16: "F16", BF16: "BF16"}

func (d DType) String() string { return enumString(d, "DType", dtypeNames) }

// enumString is v's name in names, or typ(v) for a value without one.
func enumString[T ~int | ~uint32](v T, typ string, names map[T]string) string {
	if s, ok := names[v]; ok {
		return s
	}
	return fmt.Sprintf("%s(%d)", typ, v)
}

// Size is the number of bytes of one element.
func (d DType) Size() int {
	if d == F32 {
		return 4
	}
	return 2
}

// Tensor is a 2-D matrix owned by a backend. Vectors (norm weights) are
// [1, d].
type Tensor interface {
	Rows() int
	Cols() int
}

// Backend runs the operations of a transformer forward.
//
// Unless said otherwise, dst may not alias an input, and the shapes must
// agree; a backend panics on a shape mismatch (a programming error, not a
// user error). Row index lists are int32 positions into the matrix's rows.
type Backend interface {
	// Name identifies the backend ("cpu", "cuda").
	Name() string

	// Weight makes a backend tensor of shape [rows, cols] from raw
	// little-endian checkpoint bytes of the given dtype. The backend may keep
	// a reference to raw (it is memory-mapped and lives as long as the
	// model) or convert it.
	Weight(dtype DType, rows, cols int, raw []byte) (Tensor, error)

	// New returns a zeroed float32 matrix [rows, cols].
	New(rows, cols int) Tensor
	// FromHost copies data (row-major, len rows*cols) into a new matrix.
	FromHost(rows, cols int, data []float32) Tensor
	// ToHost copies t into dst (len rows*cols) and returns it; a nil dst is
	// allocated.
	ToHost(t Tensor, dst []float32) []float32
	// Free releases t. Using t afterwards is an error.
	Free(t Tensor)

	// Embed: dst[i] = table[ids[i]]. table [vocab, d], dst [len(ids), d].
	Embed(dst, table Tensor, ids []int32)
	// RMSNorm: dst[i] = x[i] / sqrt(mean(x[i]²) + eps) * w. w [1, d].
	RMSNorm(dst, x, w Tensor, eps float32)
	// MatMul: dst = x · wᵀ. x [n, in], w [out, in], dst [n, out].
	MatMul(dst, x, w Tensor)
	// RoPE rotates x [n, heads*headDim] in place, row i at position pos[i],
	// in the rotate-half (NeoX) form with inv_freq = theta^(-2j/headDim).
	RoPE(x Tensor, pos []int32, headDim int, theta float64)
	// Attention: bidirectional softmax attention of every row of q against
	// every row of k and v, scaled by 1/sqrt(headDim).
	// q [nq, nHeads*headDim], k and v [nk, nKVHeads*headDim],
	// dst [nq, nHeads*headDim]. nHeads is a multiple of nKVHeads (grouped
	// query attention: query head h reads kv head h/(nHeads/nKVHeads)).
	Attention(dst, q, k, v Tensor, nHeads, nKVHeads int)
	// SiLUMul: dst = silu(gate) * up, elementwise. dst may alias gate.
	SiLUMul(dst, gate, up Tensor)
	// Add: dst += x, elementwise.
	Add(dst, x Tensor)
	// CopyRows: dst[dstRows[i]] = src[srcRows[i]] for every i. A nil
	// dstRows (srcRows) means 0, 1, 2, … ; when both are nil the copy is
	// min(rows) rows. Column counts must match.
	CopyRows(dst Tensor, dstRows []int32, src Tensor, srcRows []int32)
}

// QuantType is a quantized weight format, numbered as ggml numbers it
// (ggml_type), so that a GGUF tensor's type converts to it as it is.
type QuantType uint32

// The quantized formats a QuantWeighter may keep: blocks of values of a
// row (32 for Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1, each block a float16 scale
// d, Q4_1's and Q5_1's a float16 minimum m, and its quants; 256 for the
// K-quants, super-blocks of sub-blocks with their own scales, laid out as
// ggml's block_q3_K, block_q4_K, block_q5_K and block_q6_K).
const (
	// Q4_0: 16 bytes of 4-bit quants q (q[t] in the low nibble of byte t,
	// q[t+16] in its high nibble), each value (q − 8)·d; 18 bytes.
	Q4_0 QuantType = 2
	// Q4_1: m, then Q4_0's quants, each value q·d + m; 20 bytes.
	Q4_1 QuantType = 3
	// Q5_0: 32 fifth bits (a uint32: value j's is bit j), then Q4_0's
	// quants, each value (q − 16)·d; 22 bytes.
	Q5_0 QuantType = 6
	// Q5_1: m, then Q5_0's fifth bits and quants, each value q·d + m; 24
	// bytes.
	Q5_1 QuantType = 7
	// Q8_0: 32 int8 quants q, each value q·d; 34 bytes.
	Q8_0 QuantType = 8
	// IQ4_NL: Q4_0's quants, each standing for one of 16 int8 levels
	// (ggml's kvalues_iq4nl), value level·d; 18 bytes.
	IQ4_NL QuantType = 20
	// Q3_K: 256 quants of 3 bits (2 low, 1 high, apart), sixteen 6-bit
	// scales, d; 110 bytes.
	Q3_K QuantType = 11
	// Q4_K: d, dmin, eight 6-bit scales and minima, 256 4-bit quants; 144
	// bytes.
	Q4_K QuantType = 12
	// Q5_K: Q4_K's fields and 32 bytes of fifth bits; 176 bytes.
	Q5_K QuantType = 13
	// Q6_K: 256 6-bit quants, sixteen int8 scales, d; 210 bytes.
	Q6_K QuantType = 14
	// IQ4_XS: d, eight 6-bit scales, 256 4-bit quants standing for 16
	// int8 levels (ggml's block_iq4_xs); 136 bytes. Not a K-quant by
	// name, but of their super-blocks of 256 (KQuant reports it).
	IQ4_XS QuantType = 23
)

var quantNames = map[QuantType]string{Q4_0: "Q4_0", Q4_1: "Q4_1", Q5_0: "Q5_0", Q5_1: "Q5_1", Q8_0: "Q8_0", Q3_K: "Q3_K", Q4_K: "Q4_K", Q5_K: "Q5_K", Q6_K: "Q6_K", IQ4_XS: "IQ4_XS", IQ4_NL: "IQ4_NL"}

func (q QuantType) String() string { return enumString(q, "QuantType", quantNames) }

// BlockBytes is the size of one block (BlockValues values; 0 for an
// unknown type).
func (q QuantType) BlockBytes() int {
	switch q {
	case Q4_0, IQ4_NL:
		return 18
	case Q4_1:
		return 20
	case Q5_0:
		return 22
	case Q5_1:
		return 24
	case Q8_0:
		return 34
	case Q3_K:
		return 110
	case Q4_K:
		return 144
	case Q5_K:
		return 176
	case Q6_K:
		return 210
	case IQ4_XS:
		return 136
	}
	return 0
}

// BlockValues is the number of values one block holds (0 for an unknown
// type).
func (q QuantType) BlockValues() int {
	switch q {
	case Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL:
		return 32
	case Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS:
		return 256
	}
	return 0
}

// KQuant reports whether q is one of the K-quants or IQ4_XS (blocks of
// 256, which the int8 products take apart the same way).
func (q QuantType) KQuant() bool { return q.BlockValues() == 256 }

// RawAliaser is an optional interface of a weight Tensor: AliasesRaw
// reports whether the tensor still reads the bytes Weight (or
// WeightQuant) was given, in place. A loader releases the file pages of a
// weight that does not (one the backend converted or copied), so that the
// copy and the file are not both resident.
type RawAliaser interface {
	AliasesRaw() bool
}

// TableMarker is an optional interface of a Backend: MarkTable tells it
// that the weight t is only gathered from (Embed), never multiplied (an
// untied embedding), so that a layout it made for products can go. A
// network's builder calls it right after loading the table.
type TableMarker interface {
	MarkTable(t Tensor)
}

// QuantWeighter is an optional Backend method: a [rows, cols] weight kept
// in the quantized format typ (cols a multiple of typ.BlockValues()) and
// decoded inside the products that use it, never as a whole float32 copy.
// raw is rows·cols/BlockValues blocks, row-major; the backend may keep a reference to it.
// It reports an error for a format it does not keep; a backend without
// it is handed such weights dequantized to float32.
type QuantWeighter interface {
	WeightQuant(typ QuantType, rows, cols int, raw []byte) (Tensor, error)
}

// RowPermuter is an optional Backend method: it makes w, a matrix weight
// from Weight or WeightQuant whose raw rows are stored out of order
// (stored row s is row perm[s] of the matrix: a GGUF file's query and
// key weights, in ggml's RoPE pair order), the matrix itself — products
// and ToHost in the matrix's order, the same values as a reordered copy
// gives. A weight still in the memory map stays there (each product's
// output columns are put in order instead, so the file's bytes stay the
// only copy); one the backend copied is reordered in its copy. It reports
// false, changing nothing, for a weight it laid out otherwise (the caller
// then makes the weight from reordered bytes).
type RowPermuter interface {
	PermuteRows(w Tensor, perm []int32) bool
}

// Lender is an optional Backend method pair: host memory from the
// backend's own recycled storage, for a forward's logits (given back by
// model.Output.Release), so that they take memory the layers'
// temporaries left free rather than memory beside it.
type Lender interface {
	// Lend returns n values, contents arbitrary.
	Lend(n int) []float32
	// Return takes back a slice Lend returned; nobody may use it after.
	Return(s []float32)
}

// Hoster is an optional Backend method: a [rows, cols] matrix whose
// storage is data itself (row-major, len rows·cols), written in place by
// the operations and the caller's after Free. The forward writes its
// logits through one straight into the slice it returns, with no
// buffer of the backend's and no copy beside it.
type Hoster interface {
	OnHost(rows, cols int, data []float32) Tensor
}

// AttentionWeigher is an optional Backend method: the head-mean attention
// weights softmax(q·kᵀ/√hd) [nq·nk] that Attention applies (shapes as
// Attention's). The forward asks for them only for plans that want them;
// backends without it get a host-side computation.
type AttentionWeigher interface {
	AttentionWeights(dst []float32, q, k Tensor, nHeads, nKVHeads int)
}

// Uninit is an optional Backend method: a [rows, cols] matrix whose
// contents are unspecified, for a destination that the operation it is made
// for writes in full (every temporary of a forward is one), where New's
// clearing is wasted work.
type Uninit interface {
	NewUninit(rows, cols int) Tensor
}

// NewUninit is a [rows, cols] matrix its maker writes in full: b's
// NewUninit where it has one, else New.
func NewUninit(b Backend, rows, cols int) Tensor {
	if u, ok := b.(Uninit); ok {
		return u.NewUninit(rows, cols)
	}
	return b.New(rows, cols)
}

// KVAllocator is an optional Backend method: a pair of [rows, cols]
// key and value buffers (contents unspecified, as Uninit's) that attention
// reads many times while only some of their rows change between reads —
// the K/V a planner keeps across a request's steps (model.KVHolder). The
// backend may keep what it derives from them for attention (the CPU's
// layouts of keys and values) and derive again only the rows written since
// (through any operation, CopyRows included), so the two must be written
// through the backend alone. Free both when done.
type KVAllocator interface {
	NewKV(rows, cols int) (k, v Tensor)
}

// Threaded is an optional Backend interface of a backend whose operations
// run on a number of threads: WithThreads returns a backend of the same
// kind and settings over the same tensors (weights loaded by the
// receiver, buffers made by either) whose operations run on n threads,
// with the same values. A server runs several forwards side by side on
// such backends, each on its share of the cores.
type Threaded interface {
	Threads() int
	WithThreads(n int) Backend
}

// NewKV is a pair of [rows, cols] key and value buffers kept across a
// request's steps: b's NewKV where it has one, else two NewUninit.
func NewKV(b Backend, rows, cols int) (k, v Tensor) {
	if a, ok := b.(KVAllocator); ok {
		return a.NewKV(rows, cols)
	}
	return NewUninit(b, rows, cols), NewUninit(b, rows, cols)
}

// AttentionBatcher is an optional Backend method: the attentions of
// several independent sets of operands (each as Attention's; the same head
// counts) as one operation, for the requests of a batched forward. It
// must give what Attention gives for each.
type AttentionBatcher interface {
	AttentionBatch(dst, q, k, v []Tensor, nHeads, nKVHeads int)
}

// Fuser is an optional Backend method pair: the two row-wise halves of a
// pre-norm transformer block, each as one operation that a backend may run
// a block of rows at a time (the intermediates of a block stay in cache,
// and one parallel region replaces several). Each must give what the
// Backend calls it names give one after the other; false means the backend
// cannot fuse these operands (it touched nothing, the caller makes the
// calls).
type Fuser interface {
	// AttnInput: n = RMSNorm(x, norm, eps); q = n·wqᵀ, k = n·wkᵀ,
	// v = n·wvᵀ; RoPE(q, pos, headDim, theta), RoPE(k, pos, headDim, theta).
	AttnInput(q, k, v, x, norm, wq, wk, wv Tensor, pos []int32, headDim int, theta float64, eps float32) bool
	// BlockOutput: x += att·woᵀ; n = RMSNorm(x, norm, eps);
	// x += (SiLU(n·gateᵀ) ⊙ n·upᵀ)·downᵀ.
	BlockOutput(x, att, wo, norm, gate, up, down Tensor, eps float32) bool
}

// GateUpper is an optional Backend method: dst = SiLU(x·gateᵀ) ⊙ x·upᵀ
// (x [r, d], gate and up [h, d], dst [r, h]), the values MatMul, MatMul
// and SiLUMul give, without a second [r, h] tensor beside dst: a backend
// may run it a slice of gate's and up's rows at a time. False means it
// cannot for these weights (it touched nothing, the caller makes the
// calls).
type GateUpper interface {
	GateUp(dst, x, gate, up Tensor) bool
}

// Carver is an optional Backend method pair: dense tensors of the given
// [rows, cols] shapes laid one after the other in the storage of t, a
// dense temporary of at least CarveSize(shapes) values, sharing it as
// views do (freeing t frees them; a carved tensor is never freed). The
// model carves a layer's q, k and v out of one temporary, so that a later
// temporary larger than each of them (the MLP's [r, hidden], the logits)
// can reuse their storage whole.
type Carver interface {
	CarveSize(shapes ...[2]int) int
	Carve(t Tensor, shapes ...[2]int) []Tensor
}

// Viewer is an optional Backend method pair: rows [lo, hi) or columns
// [lo, hi) of t as a tensor sharing t's storage (freeing t frees it; a view
// is never freed). Every operation must accept views. With it the model
// fuses its q/k/v and gate/up products at load.
type Viewer interface {
	ViewRows(t Tensor, lo, hi int) Tensor
	ViewCols(t Tensor, lo, hi int) Tensor
}
