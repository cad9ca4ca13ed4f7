//go:build cuda

package cuda

import (
	"fmt"
	"math"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/dlmcache/dlmcache/cuda/kernels"
	"github.com/dlmcache/dlmcache/model/backend"
)

// maxScoreBytes bounds the attention score buffer of the cuBLAS path:
// heads are processed in chunks whose [heads, nq, nk] float32 scores fit.
const maxScoreBytes = 512 << 20

// Embed: dst[i] = table[ids[i]]. table [vocab, d] of any weight type, dst
// [len(ids), d].
func (b *Backend) Embed(dst, table backend.Tensor, ids []int32) {
	d, t := act(dst, "Embed"), tensor(table, "Embed")
	checked(backend.CheckEmbed(d, t, ids))
	if d.elems() == 0 {
		return
	}
	defer b.enter()()
	k := byType(t.dtype, kernels.EmbedF32, kernels.EmbedBF16, kernels.EmbedF16)
	b.elementwise(k, d.elems(), d.ptr, t.ptr, b.indices(ids), len(ids), d.cols)
}

// RMSNorm: dst[i] = x[i] / sqrt(mean(x[i]²) + eps) * w, one block per row,
// the mean of squares in float64. w [1, d] of any weight type.
func (b *Backend) RMSNorm(dst, x, w backend.Tensor, eps float32) {
	d, xs, ws := act(dst, "RMSNorm"), act(x, "RMSNorm"), tensor(w, "RMSNorm")
	checked(backend.CheckRMSNorm(d, xs, ws))
	if xs.elems() == 0 {
		return
	}
	defer b.enter()()
	k := byType(ws.dtype, kernels.RMSNormF32, kernels.RMSNormBF16, kernels.RMSNormF16)
	b.launch(k, xs.rows, 1, kernels.RowThreads, 0, d.ptr, xs.ptr, ws.ptr, xs.cols, float64(eps))
}

// MatMul: dst = x · wᵀ. x [n, in] float32, w [out, in], dst [n, out]
// float32, with cuBLAS (row-major dst is column-major dstᵀ = w·xᵀ).
//
// BF16 (F16) w: x is rounded to BF16 (F16) into scratch and
// cublasGemmEx multiplies on tensor cores, accumulating in FP32. F32 w:
// an FP32 product.
func (b *Backend) MatMul(dst, x, w backend.Tensor) {
	d, xs, ws := act(dst, "MatMul"), act(x, "MatMul"), tensor(w, "MatMul")
	checked(backend.CheckMatMul(d, xs, ws))
	n, in, out := xs.rows, xs.cols, ws.rows
	if n == 0 || out == 0 {
		return
	}
	defer b.enter()()
	if in == 0 {
		if err := cu.MemsetD32(d.ptr, 0, d.elems()); err != nil {
			panic(fmt.Sprintf("cuda: MatMul: memset: %v", err))
		}
		return
	}
	switch ws.dtype {
	case backend.F32:
		b.blas.gemm(opT, opN, out, n, in, 1, ws.ptr, typeF32, in, xs.ptr, in, 0, d.ptr, typeF32, out, compute32F)
	case backend.BF16, backend.F16:
		half, sz := b.alloc(2 * xs.elems())
		defer b.release(half, sz)
		k, ty := kernels.CvtF32BF16, typeBF16
		if ws.dtype == backend.F16 {
			k, ty = kernels.CvtF32F16, typeF16
		}
		b.elementwise(k, xs.elems(), half, xs.ptr, xs.elems())
		b.blas.gemm(opT, opN, out, n, in, 1, ws.ptr, ty, in, half, in, 0, d.ptr, typeF32, out, compute32F)
	default:
		shapePanic("MatMul", "weight %v has an unsupported type", ws)
	}
}

// RoPE rotates x [n, heads*headDim] in place, row i at position pos[i], in
// the rotate-half form with inv_freq = theta^(-2j/headDim); the angle is
// computed in float64, as on the CPU backend.
func (b *Backend) RoPE(x backend.Tensor, pos []int32, headDim int, theta float64) {
	xs := act(x, "RoPE")
	checked(backend.CheckRoPE(xs, pos, headDim))
	if xs.elems() == 0 {
		return
	}
	defer b.enter()()
	b.elementwise(kernels.RoPE, xs.elems()/2, xs.ptr, b.indices(pos), xs.rows, xs.cols, headDim, theta)
}

// Attention: bidirectional softmax attention of every row of q against
// every row of k and v, scaled by 1/sqrt(headDim); query head h reads kv
// head h/(nHeads/nKVHeads).
//
// The default path is the CPU backend's in cuBLAS terms: for each head,
// S = scale·q_h·k_hᵀ [nq, nk] (strided-batched over kv heads), a
// softmax kernel over the rows of S, then dst_h = S·v_h written straight
// into dst's columns — two tensor-core (TF32; FP32 with Options.F32)
// products and O(nq·nk) score memory per head, chunked so that the scores
// stay under 512 MiB. Options.KernelAttention selects the
// one-block-per-(row, head) kernel instead.
func (b *Backend) Attention(dst, q, k, v backend.Tensor, nHeads, nKVHeads int) {
	d, qs, ks, vs := act(dst, "Attention"), act(q, "Attention"), act(k, "Attention"), act(v, "Attention")
	hd, err := backend.CheckAttention("Attention", d, qs, ks, vs, nHeads, nKVHeads)
	checked(err)
	nq, nk := qs.rows, ks.rows
	if nq == 0 || hd == 0 {
		return
	}
	defer b.enter()()
	if nk == 0 { // an empty sum: every output is 0
		if err := cu.MemsetD32(d.ptr, 0, d.elems()); err != nil {
			panic(fmt.Sprintf("cuda: Attention: memset: %v", err))
		}
		return
	}
	scale := 1 / math.Sqrt(float64(hd))
	if shared := 4 * (hd + nk); b.opts.KernelAttention && shared <= 48<<10 && nHeads <= 65535 {
		b.launch(kernels.AttnRowHead, nq, nHeads, kernels.AttnThreads, shared,
			d.ptr, qs.ptr, ks.ptr, vs.ptr, nk, nHeads, nKVHeads, hd, scale)
		return
	}
	compute := compute32FTF32
	if b.opts.F32 {
		compute = compute32F
	}
	group := nHeads / nKVHeads
	qc, kc := nHeads*hd, nKVHeads*hd
	perKV := int64(group) * int64(nq) * int64(nk) * 4 // score bytes of one kv head's group
	chunk := int(max(1, min(int64(nKVHeads), maxScoreBytes/perKV)))
	S, sz := b.alloc(int64(chunk) * perKV)
	defer b.release(S, sz)
	f32 := int64(4)
	for g0 := 0; g0 < nKVHeads; g0 += chunk {
		nb := min(chunk, nKVHeads-g0)
		plane := int64(nq) * int64(nk) // one head's scores
		for j := 0; j < group; j++ {
			// Column-major: S_hᵀ [nk, nq] = k_h [nk, hd] · q_hᵀ, batched
			// over kv heads g0.. with query head h = g·group + j.
			kp := ks.ptr + cu.DevicePtr(int64(g0*hd)*f32)
			qp := qs.ptr + cu.DevicePtr(int64((g0*group+j)*hd)*f32)
			sp := S + cu.DevicePtr(int64(j)*plane*f32)
			b.blas.gemmBatched(opT, opN, nk, nq, hd, float32(scale),
				kp, kc, int64(hd), qp, qc, int64(group*hd),
				0, sp, nk, int64(group)*plane, nb, compute)
		}
		b.launch(kernels.SoftmaxRows, nb*group*nq, 1, kernels.RowThreads, 0, S, nk)
		for j := 0; j < group; j++ {
			// Column-major: dst_hᵀ [hd, nq] = v_hᵀ [hd, nk] · Sᵀ [nk, nq].
			vp := vs.ptr + cu.DevicePtr(int64(g0*hd)*f32)
			sp := S + cu.DevicePtr(int64(j)*plane*f32)
			op := d.ptr + cu.DevicePtr(int64((g0*group+j)*hd)*f32)
			b.blas.gemmBatched(opN, opN, hd, nq, nk, 1,
				vp, kc, int64(hd), sp, nk, int64(group)*plane,
				0, op, qc, int64(group*hd), nb, compute)
		}
	}
}

// SiLUMul: dst = silu(gate) * up, elementwise. dst may alias gate.
func (b *Backend) SiLUMul(dst, gate, up backend.Tensor) {
	d, g, u := act(dst, "SiLUMul"), act(gate, "SiLUMul"), act(up, "SiLUMul")
	checked(backend.CheckSiLUMul(d, g, u))
	defer b.enter()()
	b.elementwise(kernels.SiLUMul, g.elems(), d.ptr, g.ptr, u.ptr, g.elems())
}

// Add: dst += x, elementwise.
func (b *Backend) Add(dst, x backend.Tensor) {
	d, xs := act(dst, "Add"), act(x, "Add")
	checked(backend.CheckAdd(d, xs))
	defer b.enter()()
	b.elementwise(kernels.Add, d.elems(), d.ptr, xs.ptr, d.elems())
}

// CopyRows: dst[dstRows[i]] = src[srcRows[i]] for every i; a nil list means
// 0, 1, 2, …; both nil copy min(rows) rows. When dstRows repeats a row the
// last copy wins, as in a serial loop (the host drops the earlier ones).
func (b *Backend) CopyRows(dst backend.Tensor, dstRows []int32, src backend.Tensor, srcRows []int32) {
	d, s := act(dst, "CopyRows"), act(src, "CopyRows")
	n, err := backend.CheckCopyRows(d, dstRows, s, srcRows)
	checked(err)
	if n == 0 || d.cols == 0 {
		return
	}
	dstRows, srcRows, n = lastCopies(dstRows, srcRows, n)
	defer b.enter()()
	b.elementwise(kernels.CopyRows, int64(n)*int64(d.cols), d.ptr, b.indices(dstRows), s.ptr, b.indices(srcRows), n, d.cols)
}

// ArgmaxConf returns, for each row of logits [r, E], the index of its first
// maximum and that entry's softmax probability (1/Σ exp(x−max), summed in
// float64), computed on the device: only 12 bytes a row come back.
func (b *Backend) ArgmaxConf(logits backend.Tensor) ([]int32, []float64) {
	l := act(logits, "ArgmaxConf")
	if l.cols == 0 && l.rows > 0 {
		shapePanic("ArgmaxConf", "logits %v have no columns", l)
	}
	ids, conf := make([]int32, l.rows), make([]float64, l.rows)
	if l.rows == 0 {
		return ids, conf
	}
	defer b.enter()()
	ip, isz := b.alloc(int64(4 * l.rows))
	defer b.release(ip, isz)
	cp, csz := b.alloc(int64(8 * l.rows))
	defer b.release(cp, csz)
	b.launch(kernels.ArgmaxConf, l.rows, 1, kernels.RowThreads, 0, ip, cp, l.ptr, l.cols)
	if err := cu.MemcpyDtoH(unsafe.Pointer(&ids[0]), ip, int64(4*l.rows)); err != nil {
		panic(fmt.Sprintf("cuda: ArgmaxConf: %v", err))
	}
	if err := cu.MemcpyDtoH(unsafe.Pointer(&conf[0]), cp, int64(8*l.rows)); err != nil {
		panic(fmt.Sprintf("cuda: ArgmaxConf: %v", err))
	}
	return ids, conf
}
