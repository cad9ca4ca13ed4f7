package kernels

import _ "embed"

// Kernel entry points (extern "C" names) defined by Source. A weight
// operand comes in three element types; the suffix names it.
const (
	CvtF32BF16 = "cvt_f32_bf16" // dst u16[n] = bf16(src f32[n]), round to nearest even
	CvtF32F16  = "cvt_f32_f16"  // dst u16[n] = f16(src f32[n]), round to nearest even
	CvtBF16F32 = "cvt_bf16_f32" // dst f32[n] = src bf16[n]
	CvtF16F32  = "cvt_f16_f32"  // dst f32[n] = src f16[n]

	EmbedF32  = "embed_f32" // dst [n, d] = table[ids[i]]
	EmbedBF16 = "embed_bf16"
	EmbedF16  = "embed_f16"

	RMSNormF32  = "rmsnorm_f32" // one block per row; w [d]
	RMSNormBF16 = "rmsnorm_bf16"
	RMSNormF16  = "rmsnorm_f16"

	RoPE        = "rope"         // in place, rotate-half, arbitrary position ids
	SiLUMul     = "silu_mul"     // dst = silu(gate)·up
	Add         = "add"          // dst += x
	CopyRows    = "copy_rows"    // dst[dstRows[i]] = src[srcRows[i]]
	SoftmaxRows = "softmax_rows" // in place, one block per row
	AttnRowHead = "attention_rowhead"
	ArgmaxConf  = "argmax_conf" // one block per row: argmax and its softmax probability
)

// Names lists every kernel entry point of Source.
var Names = []string{
	CvtF32BF16, CvtF32F16, CvtBF16F32, CvtF16F32,
	EmbedF32, EmbedBF16, EmbedF16,
	RMSNormF32, RMSNormBF16, RMSNormF16,
	RoPE, SiLUMul, Add, CopyRows, SoftmaxRows, AttnRowHead, ArgmaxConf,
}

// Block sizes the kernels are written for (threads per block; multiples of
// 32 and at most 1024).
const (
	// RowThreads is the block size of the one-block-per-row kernels
	// (rmsnorm, softmax_rows, argmax_conf).
	RowThreads = 256
	// AttnThreads is the block size of attention_rowhead.
	AttnThreads = 128
	// ElemThreads is the block size of the elementwise grid-stride kernels.
	ElemThreads = 256
)

// Source is the CUDA C of every kernel (kernels.cu), one translation unit.
//
//go:embed kernels.cu
var Source string
