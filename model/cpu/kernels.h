// kernels.h: every C function and type of the CPU backend that its Go
// files bind (they include this header and nothing else of the package's
// C). The C lives beside it by purpose:
//
//	vec.c     the machine's ISA; exp, softmax, SiLU·up, BF16 ↔ F32 and
//	          F16 → F32 rows
//	rowops.c  RMSNorm, RoPE and the residual add over ranges of rows
//	attn.c    the panel kernel (products with small-k weights), the
//	          blocked panel kernel (any k; F32, F16, BF16 weights packed
//	          as they are multiplied) and the fused attention kernels
//	          (AVX2+FMA, AVX-512F)
//	team.c    the thread team and the fused jobs that run on it
//	onednn.c  the oneDNN shim (dlopen'd at run time; a stub without headers)
//	blas.c    OpenBLAS's sgemm, row-major
//	peak.c    the peak-FLOP probes
//	quant.c   ggml's Q8_0 and Q4_0 weights: decoded to float32 rows, and
//	          their int8 products with activations quantized per row
//	kquant.c  ggml's K-quants (Q3_K, Q4_K, Q5_K, Q6_K) decoded to float32 rows
//	bf16mm.c  products of BF16 weights with BF16 activations (AVX512-BF16)
//
// simd.h holds the vector helpers vec.c, attn.c, quant.c and bf16mm.c
// share, half.h the binary16 block scales' conversion quant.c and kquant.c
// share. Each vector
// kernel is compiled for its ISA by a target attribute; the Go side picks
// one at run time (an int simd / avx2 argument) from dlmc_have_*.
#ifndef DLMCACHE_CPU_KERNELS_H
#define DLMCACHE_CPU_KERNELS_H

#include <stddef.h>
#include <stdint.h>

// vec.c: what this machine runs (0 or 1).
int dlmc_have_avx2(void);       // AVX2 and FMA
int dlmc_have_avx512(void);     // AVX-512F
int dlmc_have_avx512bf16(void); // AVX-512F and AVX512-BF16
int dlmc_have_f16c(void);       // AVX2 and F16C

// bf16mm.c: dlmc_bf16_pack lays the BF16 w [n × k] (k even, rows ldw
// values apart) out for dlmc_bf16_mm_packed into out (⌈n/64⌉·64·k/2
// uint32s): blocks of 64 rows, in each the pair t of rows 16g … 16g+15 at
// (4t + g)·16, rows past n zero. dlmc_bf16_mm_packed computes c[m × n]
// (row stride ldc) = x·wᵀ for BF16 x [m × k] (ldx values apart) and rows
// j0 … j0+n of a weight so laid out, j0 a multiple of 64 (p is the layout
// from row j0: its element j0·k/2), accumulated in F32 on vdpbf16ps. Both
// return -1, doing nothing, where the CPU has no AVX512-BF16 or k is odd;
// else 0.
int dlmc_bf16_pack(int n, int k, const uint16_t *w, long ldw, uint32_t *out);
int dlmc_bf16_mm_packed(int m, int n, int k, const uint16_t *x, long ldx, const uint32_t *p, float *c, long ldc);

// vec.c: each row of the m×n matrix s (contiguous) becomes e^(s−max) in
// place, inv[i] = 1/Σ of row i; simd picks the AVX2 loop.
void dlmc_softmax_rows(int simd, float *s, int m, int n, float *inv);
// dst[j] = g[j]/(1+e^(−g[j]))·u[j]; dst may be g.
void dlmc_silu_mul(int simd, float *dst, const float *g, const float *u, int n);
// dst[j] = e^x[j] on the vector path softmax and SiLU use (simd), else the
// scalar one.
void dlmc_exp_many(int simd, float *dst, const float *x, int n);
// dst (rows × cols, dense) = the bfloat16s src (rows stride apart), exactly.
void dlmc_bf16_rows(int simd, float *dst, const uint16_t *src, long rows, long cols, long stride);
// dst (rows × cols, dense) = the IEEE halves src (rows stride apart),
// exactly; f16c picks the F16C loop.
void dlmc_f16_rows(int f16c, float *dst, const uint16_t *src, long rows, long cols, long stride);
// dst (rows × cols, dense) = src (row stride lds) rounded to the nearest
// BF16, ties to even; NaN stays NaN.
void dlmc_f32_to_bf16(uint16_t *dst, const float *src, long rows, long cols, long lds);
// c[m × n] = a[m × k]·wᵀ in plain C, each element summed over k in order:
// rows independent of the product they are in (vec.c).
void dlmc_gemm_nt_plain(int m, int n, int k, const float *a, long lda, const float *w, long ldw, float *c, long ldc);

// quant.c: ggml's quantized weight types (their ggml_type numbers), and
// the instruction sets of the int8 products.
#define DLMC_Q4_0 2 // blocks of 32: float16 d, 16 bytes of 4-bit q; (q − 8)·d
#define DLMC_Q4_1 3 // d, float16 m, Q4_0's q; q·d + m
#define DLMC_Q5_0 6 // d, uint32 of fifth bits (bit t: value t), Q4_0's q; (q − 16)·d
#define DLMC_Q5_1 7 // d, m, Q5_0's fifth bits and q; q·d + m
#define DLMC_Q8_0 8 // blocks of 32: float16 d, 32 int8 q; q·d
#define DLMC_IQ4_NL 20 // d, Q4_0's q, each standing for one of 16 int8 levels; level·d
// K-quants (kquant.c), super-blocks of 256: ggml's block_q3_K (110 bytes),
// block_q4_K (144), block_q5_K (176), block_q6_K (210).
#define DLMC_Q3_K 11
#define DLMC_Q4_K 12
#define DLMC_Q5_K 13
#define DLMC_Q6_K 14
// IQ4_XS (ggml's block_iq4_xs, 136 bytes), super-blocks of 256 as the
// K-quants, taken by the same functions.
#define DLMC_IQ4_XS 23
#define DLMC_ISA_GENERIC 0
#define DLMC_ISA_AVX2 1       // AVX2, FMA, F16C: vpmaddwd on int16
#define DLMC_ISA_AVXVNNI 2    // AVX-VNNI: vpdpbusd (VEX)
#define DLMC_ISA_AVX512VNNI 3 // AVX512-VNNI + AVX512-VL: vpdpbusd on zmm
// The best of the above this machine runs.
int dlmc_quant_isa(void);
// dlmc_quant_isa_supported reports whether this CPU runs the int8 products' instruction set isa.
int dlmc_quant_isa_supported(int isa);
// dst (rows × cols, dense) = the blocks of type wt of src (rows stride
// bytes apart; cols a multiple of the type's block, 32 or 256), exactly as
// ggml dequantizes them; simd picks the AVX2 loop. A K-quant goes to
// dlmc_kquant_rows.
void dlmc_quant_rows(int simd, int wt, float *dst, const uint8_t *src, long rows, long cols, long stride);
// kquant.c: dlmc_quant_rows for the K-quants (wt DLMC_Q3_K, DLMC_Q4_K,
// DLMC_Q5_K, DLMC_Q6_K; cols a multiple of 256); dlmc_kquant_block_bytes is the size
// of one block of wt (0 for another type).
void dlmc_kquant_rows(int simd, int wt, float *dst, const uint8_t *src, long rows, long cols, long stride);
long dlmc_kquant_block_bytes(int wt);
// dlmc_kq_block decodes one super-block b of the K-quant wt for the int8
// products: q[256] the quants (Q4_K, Q5_K: q ∈ [0, 32); Q6_K: q − 32;
// Q3_K: q ∈ [−4, 4); IQ4_XS: its levels, in [−127, 113]),
// isc[16·ls] the integer scale of values 16s … 16s+15 at isc[s·ls],
// im[8·ls] the integer minimum of values 32s … 32s+31 at im[s·ls] (0 for
// Q6_K, Q3_K and IQ4_XS), dd[0], dd[1] the block's d and dmin (0 for
// them): value v is
// dd[0]·isc[v/16]·q[v] − dd[1]·im[v/32], as ggml dequantizes it. simd
// picks the AVX2 loop.
void dlmc_kq_block(int simd, int wt, int8_t *q, int16_t *isc, int16_t *im, long ls, float *dd, const uint8_t *b);
// Activations quantized per row as llama.cpp's Q8_0 (float32 scales):
// for each block of 32 of each row of x (row stride ldx; cols a multiple
// of 32), d = max|x|/127 into d (rows·cols/32, dense) and x·(127/max|x|)
// rounded to nearest, ties to even, into q (rows × cols, dense): int16
// for isa DLMC_ISA_AVX2 (its product's form), u8 q + 128 for
// DLMC_ISA_AVX512VNNI (its product's unsigned operand), int8 for the
// others; with sums set (rows·cols/32), each block's d·Σq into it, for the
// K-quants' minima.
void dlmc_quantize_act(int isa, void *q, float *d, float *sums, const float *x, long rows, long cols, long ldx);
// c[m × n] (row stride ldc) = x·wᵀ: row i of x (q, d and the sums xs as
// dlmc_quantize_act writes them for isa, k values) times row j of the
// weight w (type wt, rows wstride bytes apart), block by block in int32,
// each block's sum scaled by d_w·d_x and accumulated in float32; a
// K-quant's each 16 values' sum by d·isc·d_x, less dmin·im·xs per block
// of 32. pack is the caller's scratch of DLMC_QPACK_BYTES for the
// weights' packs (any alignment). It returns −1, having written nothing,
// for a K-quant with k not a multiple of 256, Q4_K or Q5_K without xs, or
// isa DLMC_ISA_AVXVNNI (whose K-quant products run as DLMC_ISA_AVX2's),
// and for Q4_1 and Q5_1 (no int8 product: they are decoded); else 0.
#define DLMC_QPACK_BYTES (147456 + 64)
int dlmc_qmatmul(int isa, int wt, int m, int n, int k, const void *xq, const float *xd, const float *xs,
	const uint8_t *w, long wstride, float *c, long ldc, void *pack);
// dlmc_q8_layout lays out groups [g0, g1) of 16 rows of a Q8_0 weight w
// (rows rows of k values, wstride bytes apart) for dlmc_qmatmul_laid: per
// group g and block b of 32 values, 512 bytes of quants at q + (g·nb +
// b)·128 (vector t: each of the 16 rows' values 4t … 4t+3) and the 16
// rows' F16 scales at s + (g·nb + b)·16, nb = k/32 — the Q8_0 blocks' own
// bytes, reordered (rows past the end: zeros). It returns −1, having
// written nothing, where the CPU has no AVX512-VNNI or k is no multiple
// of 32.
int dlmc_q8_layout(const uint8_t *w, long wstride, long rows, long k, long g0, long g1, int32_t *q, uint16_t *s);
// dlmc_qmatmul_laid is dlmc_qmatmul on DLMC_ISA_AVX512VNNI for a Q8_0
// weight laid out by dlmc_q8_layout, its n columns from the groups at lq
// and ls on: the same results, bit for bit, without packing the weight.
int dlmc_qmatmul_laid(int m, int n, int k, const void *xq, const float *xd, const int32_t *lq, const uint16_t *ls,
	float *c, long ldc, void *pack);

// rowops.c: RMSNorm of rows of x (stride ldx) by the weight w into dst.
void dlmc_rms_norm_rows(int simd, float *dst, long ldd, const float *x, long ldx, const float *w,
	int rows, int cols, float eps);
// RoPE of one row's heads by the angles cs (hd/2 cosines, then hd/2 sines).
void dlmc_rope_row(int simd, float *row, int heads, int hd, const float *cs);
// RoPE of the rows whose position p has 0 ≤ p < npos, by cs + p·hd; the
// other rows are left to the caller.
void dlmc_rope_rows(int simd, float *x, long ldx, int rows, int heads, int hd, const int32_t *pos,
	const float *cs, int npos);
// dst += x over rows × cols.
void dlmc_add_rows(int simd, float *dst, long ldd, const float *x, long ldx, int rows, int cols);

// attn.c: the panel kernel. dlmc_panel_pack lays out the weight w [n × k]
// (row stride ldw) as ⌈n/16⌉ panels of 16 rows, k-major, zero-padded;
// dlmc_panel_gemm computes c[m × n] = a[m × k]·wᵀ from them (AVX2+FMA).
void dlmc_panel_pack(const float *w, long ldw, int n, int k, float *p);
void dlmc_panel_gemm(int m, int n, int k, const float *a, long lda, const float *p, float *c, long ldc);
// dlmc_panel_set_avx512(1) runs the panel kernels (dlmc_panel_gemm,
// dlmc_wg_block, the fused halves) on AVX-512F tiles of 12 rows × 32
// columns instead of AVX2's 6 × 16: the same bits, each element one chain
// of FMAs in k's order either way. Set once by the Go side (its ISA cap).
void dlmc_panel_set_avx512(int on);
// attn.c: the fused attention of one head. dlmc_attn_pack lays out keys
// [lo, hi) of one kv head (kᵀ into kt, v into vp) for the kernel avx2 picks
// (1: AVX2, 0: AVX-512) in layouts of pnk keys (lo a multiple of 16; the
// other keys' places left as they are); dlmc_attn_scratch is the floats of
// scratch dlmc_attn_rows needs; dlmc_attn_rows computes
// o = softmax(scale·q·kᵀ)·v for m query rows over the first nk keys of the
// layouts (AVX2: ldv is the stride of v's column panels, 16·pnk).
void dlmc_attn_pack(int avx2, int lo, int hi, int pnk, int hd, const float *k, long ldk, const float *v, long ldv,
	float *kt, long ldt, float *vp);
long dlmc_attn_scratch(int avx2, long ldt, int hd);
void dlmc_attn_rows(int avx2, int m, int nk, int hd, float scale, const float *q, long ldq,
	const float *kt, long ldt, const float *v, long ldv, float *o, long ldo, float *s);

// team.c: the fused layer halves and products, run on the thread team in
// tasks of DLMC_FUSED_ROWS rows; workers counts the caller's thread.
#define DLMC_FUSED_ROWS 48
void dlmc_panel_matmul(int workers, int m, int n, int k, const float *a, long lda, const float *p, float *c, long ldc);
// The blocked panel kernel (attn.c), for weights of any k: columns [c0,
// c0 + nc) (nc ≤ DLMC_WG_NB) of c[m × n] = a[m × k]·wᵀ, w [n × k] of type
// (0 float32, 1 IEEE half, 2 bfloat16; row stride ldw values) laid out
// DLMC_WG_KC columns at a time into p (DLMC_WG_KC·DLMC_WG_NB floats),
// AVX2+FMA; or, with laid set, read from dlmc_wg_layout's layout of w
// (the same panels: an F32 one's read in place, a 16-bit one's converted
// in order into p; the same bits).
// dlmc_wg_matmul runs it on the team (team.c), a task a block of
// DLMC_WG_NB columns.
#define DLMC_WG_KC 512
#define DLMC_WG_NB 64
void dlmc_wg_block(int type, int m, int k, const float *a, long lda, const void *w, long ldw, int c0, int nc,
		float *c, long ldc, float *p, const void *laid);
void dlmc_wg_matmul(int workers, int type, int m, int n, int k, const float *a, long lda, const void *w, long ldw,
		const void *laid, float *c, long ldc);
// dlmc_wg_layout lays out the blocks [b0, b1) of DLMC_WG_NB rows of the
// weight w [n × k] of type (as dlmc_wg_block's; row stride ldw values)
// into dst (round16(n)·k values of w's type for the whole weight: a
// 16-bit weight's stay 16-bit) as dlmc_wg_block packs them: block b's
// KC-column chunk from column pc at element b·DLMC_WG_NB·k +
// pc·round16(nc), nc its rows. AVX2+FMA.
void dlmc_wg_layout(int type, const void *w, long ldw, int n, int k, int b0, int b1, void *dst);
void dlmc_attn_input(int workers, int rows, int d, int nq, int nk, int nv, int hd, int simd, float eps,
	const float *x, long ldx, const float *norm, const float *pq, const float *pk, const float *pv,
	float *q, long ldq, float *k, long ldk, float *v, long ldv, const int32_t *pos, const float *cs, int npos);
void dlmc_block_output(int workers, int rows, int d, int na, int h, int simd, int vsimd, float eps,
	float *x, long ldx, const float *att, long lda, const float *norm,
	const float *po, const float *pg, const float *pu, const float *pd);

// A part of dlmc_attn_parts' job: the kv heads [g0, g0 + kvn) of one
// attention (one request's) and their query heads, with the layouts'
// buffers kt and vp. A part that owns its layouts (own) lays out keys
// [plo, phi) in layouts of pnk keys (pnk = phi = nk, plo 0 for layouts of
// its own; a kept layout, whose keys before plo are laid out already, has
// room for pnk ≥ nk); one that shares another's (own 0: its keys are the
// first nk of that part's, the same k and v) reads them, with that part's
// kt, vp, ldt, pnk and pack0.
typedef struct {
	const float *q, *k, *v;
	float *o, *kt, *vp;
	long ldq, ldk, ldv, ldo, ldt;
	int nq, nk, pnk, plo, phi, own, g0, kvn, blocks, block;
	int pack0, row0; // the part's first layout task, its first row task
} dlmc_attn_part;

// dlmc_attn_parts runs the parts (their pack0 and row0 set) as one job; ldt
// is the largest of their ldt.
void dlmc_attn_parts(int workers, int avx2, int hd, int group, float scale, const dlmc_attn_part *parts,
	int nparts, long ldt);

// onednn.c: oneDNN 2, loaded with dlopen (0 on success, else -1 and
// dlmc_dnnl_reason says why).
int dlmc_dnnl_open(int max_isa);
const char *dlmc_dnnl_reason(void);
int dlmc_dnnl_isa(void); // dnnl_cpu_isa_t
void dlmc_dnnl_describe(char *buf, int n);
// c[m,n] = alpha · a[m,k] · B, B = b[n,k]ᵀ (bt) or b[k,n]; a, b F32 or BF16
// (bf16), c F32; a dnnl_status_t (-2: not loaded, -1: built without oneDNN).
int dlmc_dnnl_mm(int bf16, int bt, long m, long n, long k, float alpha,
	const void *a, long lda, const void *b, long ldb, float *c, long ldc,
	char *impl, int implLen, int threads);
// A weight reordered once into the layout oneDNN's matmul picks for it.
typedef struct dlmc_dnnl_packed dlmc_dnnl_packed;
dlmc_dnnl_packed *dlmc_dnnl_pack(int bf16, long n, long k, const void *w, long ldw, int threads, int *status);
size_t dlmc_dnnl_packed_bytes(const dlmc_dnnl_packed *pk);
void dlmc_dnnl_packed_free(dlmc_dnnl_packed *pk);
// c[m,n] = a[m,k] · the packed weight ᵀ; 1 (nothing written) when the
// matmul for this m wants another layout.
int dlmc_dnnl_mm_packed(int bf16, long m, long n, long k, const void *a, long lda,
	const dlmc_dnnl_packed *pk, float *c, long ldc, int threads);

// blas.c: C[m,n] = alpha·A[m,k]·B + beta·C, B = b[n,k]ᵀ (bt) or b[k,n],
// row-major with leading dimensions, on OpenBLAS.
void dlmc_sgemm(int bt, int m, int n, int k, float alpha, const float *a, int lda, const float *b, int ldb,
	float beta, float *c, int ldc);

// peak.c: iters rounds of independent FMA chains (8 wide, 16 wide) or
// vdpbf16ps chains; the sum returned keeps the work from being dropped.
float dlmc_peak_f32_fma(long iters);
float dlmc_peak_f32_fma512(long iters);
float dlmc_peak_bf16_dp(long iters);
// The int8 dot-product peaks (peak.c): vpdpbusd zmm (AVX512-VNNI), ymm
// (AVX-VNNI), and AVX2's vpmaddubsw/vpmaddwd/vpaddd, each on chains whose
// lanes start at PEAK_I8_SEED·(chain + 1); the sum of every lane.
#define PEAK_I8_SEED 0x01030507u
#define DLMC_PEAK_I8_VNNI_CHAINS 20
#define DLMC_PEAK_I8_AVX2_CHAINS 12
long dlmc_peak_i8_vnni512(long iters);
long dlmc_peak_i8_avxvnni(long iters);
long dlmc_peak_i8_avx2(long iters);

#endif
