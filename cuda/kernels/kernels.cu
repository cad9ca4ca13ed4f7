// kernels.cu: the CUDA C of every kernel of the cuda backend, one
// translation unit, compiled at run time by NVRTC (kernels.go embeds it;
// Names lists its entry points).
//
// Layout conventions: matrices are row-major and contiguous; a [rows, cols]
// matrix's element (i, j) is at i*cols + j. Index lists are int32.
// Elementwise kernels use grid-stride loops, so any grid size is correct.
// Every kernel parameter is 8 bytes wide (pointers, long long, double)
// because gorgonia.org/cu's Function.Launch copies each argument as 8
// bytes. No header is included: NVRTC has no system include path.
typedef unsigned short u16;

// ---- element conversions (no cuda_bf16.h / cuda_fp16.h under NVRTC) ----

__device__ __forceinline__ float bf16_to_f32(u16 h) {
	return __uint_as_float(((unsigned int)h) << 16);
}

__device__ __forceinline__ u16 f32_to_bf16(float f) {
	unsigned int u = __float_as_uint(f);
	if ((u & 0x7fffffffu) > 0x7f800000u) {
		return (u16)((u >> 16) | 0x40u); // NaN stays a quiet NaN
	}
	u += 0x7fffu + ((u >> 16) & 1u); // round to nearest even
	return (u16)(u >> 16);
}

__device__ __forceinline__ float f16_to_f32(u16 h) {
	float f;
	asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
	return f;
}

__device__ __forceinline__ u16 f32_to_f16(float f) {
	u16 h;
	asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
	return h;
}

__device__ __forceinline__ float ld_f32(const float* p, long long i) { return p[i]; }
__device__ __forceinline__ float ld_bf16(const u16* p, long long i) { return bf16_to_f32(p[i]); }
__device__ __forceinline__ float ld_f16(const u16* p, long long i) { return f16_to_f32(p[i]); }

#define NEG_INF __int_as_float(0xff800000)

#define GRID_STRIDE(e, n) \
	for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < (n); \
	     e += (long long)gridDim.x * blockDim.x)

// ---- block reductions (blockDim.x a multiple of 32, at most 1024) ----
// Every thread gets the result. They synchronise the block.

// block_reduce folds v over the block with op, pad standing in for the
// lanes of absent warps.
struct op_sum {
	template <typename T> __device__ __forceinline__ T operator()(T a, T b) const { return a + b; }
};
struct op_max {
	__device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

template <typename T, typename Op>
__device__ T block_reduce(T v, T pad, Op op) {
	__shared__ T sh[32];
	for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
	if (lane == 0) sh[w] = v;
	__syncthreads();
	if (w == 0) {
		v = lane < nw ? sh[lane] : pad;
		for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
		if (lane == 0) sh[0] = v;
	}
	__syncthreads();
	T r = sh[0];
	__syncthreads();
	return r;
}

__device__ float block_sum_f(float v) { return block_reduce(v, 0.0f, op_sum()); }
__device__ double block_sum_d(double v) { return block_reduce(v, 0.0, op_sum()); }
__device__ float block_max_f(float v) { return block_reduce(v, NEG_INF, op_max()); }

// better reports whether (v, i) beats (bv, bi): larger value, or the same
// value at a smaller index (the first maximum wins, as in a serial scan).
__device__ __forceinline__ bool better(float v, long long i, float bv, long long bi) {
	return v > bv || (v == bv && i < bi);
}

// block_argmax reduces (v, i) pairs; every thread gets the winner.
__device__ void block_argmax(float* v, long long* i) {
	__shared__ float shv[32];
	__shared__ long long shi[32];
	float bv = *v;
	long long bi = *i;
	for (int o = 16; o > 0; o >>= 1) {
		float ov = __shfl_xor_sync(0xffffffffu, bv, o);
		long long oi = __shfl_xor_sync(0xffffffffu, bi, o);
		if (better(ov, oi, bv, bi)) { bv = ov; bi = oi; }
	}
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
	if (lane == 0) { shv[w] = bv; shi[w] = bi; }
	__syncthreads();
	if (w == 0) {
		bv = lane < nw ? shv[lane] : NEG_INF;
		bi = lane < nw ? shi[lane] : 0x7fffffffffffffffLL;
		for (int o = 16; o > 0; o >>= 1) {
			float ov = __shfl_xor_sync(0xffffffffu, bv, o);
			long long oi = __shfl_xor_sync(0xffffffffu, bi, o);
			if (better(ov, oi, bv, bi)) { bv = ov; bi = oi; }
		}
		if (lane == 0) { shv[0] = bv; shi[0] = bi; }
	}
	__syncthreads();
	*v = shv[0];
	*i = shi[0];
	__syncthreads();
}

__device__ __forceinline__ float warp_sum_f(float v) {
	for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

// ---- conversions ----

extern "C" __global__ void cvt_f32_bf16(u16* dst, const float* src, long long n) {
	GRID_STRIDE(e, n) dst[e] = f32_to_bf16(src[e]);
}

extern "C" __global__ void cvt_f32_f16(u16* dst, const float* src, long long n) {
	GRID_STRIDE(e, n) dst[e] = f32_to_f16(src[e]);
}

extern "C" __global__ void cvt_bf16_f32(float* dst, const u16* src, long long n) {
	GRID_STRIDE(e, n) dst[e] = bf16_to_f32(src[e]);
}

extern "C" __global__ void cvt_f16_f32(float* dst, const u16* src, long long n) {
	GRID_STRIDE(e, n) dst[e] = f16_to_f32(src[e]);
}

// ---- embedding gather: dst [n, d] = table[ids[i]], table [vocab, d] ----

#define EMBED(NAME, T, LD) \
extern "C" __global__ void NAME(float* dst, const T* table, const int* ids, long long n, long long d) { \
	GRID_STRIDE(e, n * d) { \
		long long i = e / d, j = e - i * d; \
		dst[e] = LD(table, (long long)ids[i] * d + j); \
	} \
}
EMBED(embed_f32, float, ld_f32)
EMBED(embed_bf16, u16, ld_bf16)
EMBED(embed_f16, u16, ld_f16)

// ---- RMSNorm: one block per row; x, dst [rows, cols], w [cols] ----
// dst[i] = x[i] * (1/sqrt(mean(x[i]^2) + eps)) * w, the mean of squares in
// double as the CPU backend does. dst may alias x.

#define RMSNORM(NAME, T, LD) \
extern "C" __global__ void NAME(float* dst, const float* x, const T* w, long long cols, double eps) { \
	const float* xr = x + (long long)blockIdx.x * cols; \
	float* dr = dst + (long long)blockIdx.x * cols; \
	double s = 0.0; \
	for (long long j = threadIdx.x; j < cols; j += blockDim.x) { double a = xr[j]; s += a * a; } \
	s = block_sum_d(s); \
	float r = (float)(1.0 / sqrt(s / (double)cols + eps)); \
	for (long long j = threadIdx.x; j < cols; j += blockDim.x) dr[j] = xr[j] * r * LD(w, j); \
}
RMSNORM(rmsnorm_f32, float, ld_f32)
RMSNORM(rmsnorm_bf16, u16, ld_bf16)
RMSNORM(rmsnorm_f16, u16, ld_f16)

// ---- RoPE, rotate-half form, in place: x [rows, cols], cols = heads*headDim ----
// For j < headDim/2, angle = pos[i] * theta^(-2j/headDim) in double (as the
// CPU backend does), cos and sin rounded to float:
//   x[j]        <- x[j]*cos - x[j+half]*sin
//   x[j+half]   <- x[j+half]*cos + x[j]*sin
extern "C" __global__ void rope(float* x, const int* pos, long long rows, long long cols, long long headDim, double theta) {
	long long half = headDim / 2, heads = cols / headDim;
	GRID_STRIDE(e, rows * heads * half) {
		long long j = e % half, t = e / half;
		long long h = t % heads, i = t / heads;
		double inv = pow(theta, -(double)(2 * j) / (double)headDim);
		double s, c;
		sincos((double)pos[i] * inv, &s, &c);
		float cf = (float)c, sf = (float)s;
		float* p = x + i * cols + h * headDim;
		float a = p[j], b = p[j + half];
		p[j] = a * cf - b * sf;
		p[j + half] = b * cf + a * sf;
	}
}

// ---- elementwise ----

extern "C" __global__ void silu_mul(float* dst, const float* gate, const float* up, long long n) {
	GRID_STRIDE(e, n) {
		float g = gate[e];
		dst[e] = g / (1.0f + expf(-g)) * up[e];
	}
}

extern "C" __global__ void add(float* dst, const float* x, long long n) {
	GRID_STRIDE(e, n) dst[e] += x[e];
}

// ---- row gather/scatter: dst[dstRows[i]] = src[srcRows[i]], i < n ----
// A null index list means the identity. The host removes duplicate
// destination rows (keeping the last copy) before the launch.
extern "C" __global__ void copy_rows(float* dst, const int* dstRows, const float* src, const int* srcRows, long long n, long long cols) {
	GRID_STRIDE(e, n * cols) {
		long long i = e / cols, j = e - i * cols;
		long long di = dstRows ? (long long)dstRows[i] : i;
		long long si = srcRows ? (long long)srcRows[i] : i;
		dst[di * cols + j] = src[si * cols + j];
	}
}

// exp_max_sum replaces each of the block's n values x[j] with
// exp(x[j] − max x) and returns their sum; every replaced value is visible
// to the whole block on return.
__device__ __forceinline__ float exp_max_sum(float* x, long long n) {
	float m = NEG_INF;
	for (long long j = threadIdx.x; j < n; j += blockDim.x) m = fmaxf(m, x[j]);
	m = block_max_f(m);
	float sum = 0.0f;
	for (long long j = threadIdx.x; j < n; j += blockDim.x) {
		float e = expf(x[j] - m);
		x[j] = e;
		sum += e;
	}
	return block_sum_f(sum);
}

// ---- softmax over each row, in place: s [rows, cols], one block per row ----
extern "C" __global__ void softmax_rows(float* s, long long cols) {
	float* r = s + (long long)blockIdx.x * cols;
	float sum = exp_max_sum(r, cols);
	float inv = 1.0f / sum;
	for (long long j = threadIdx.x; j < cols; j += blockDim.x) r[j] *= inv;
}

// ---- bidirectional attention, one block per (query row, head) ----
// grid (nq, nHeads); q, out [nq, nHeads*hd]; k, v [nk, nKV*hd]. Query head h
// reads kv head h/(nHeads/nKV). Dynamic shared memory: (hd + nk) floats —
// the scaled query row, then the scores. One warp per key for the scores,
// one thread per output column for the weighted sum of v.
extern "C" __global__ void attention_rowhead(float* out, const float* q, const float* k, const float* v,
		long long nk, long long nHeads, long long nKV, long long hd, double scale) {
	extern __shared__ float sh[];
	float* qs = sh;
	float* sc = sh + hd;
	long long i = blockIdx.x, h = blockIdx.y;
	long long kh = h / (nHeads / nKV);
	long long qc = nHeads * hd, kc = nKV * hd;
	const float* qr = q + i * qc + h * hd;
	for (long long d = threadIdx.x; d < hd; d += blockDim.x) qs[d] = qr[d];
	__syncthreads();
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
	float fs = (float)scale;
	for (long long j = w; j < nk; j += nw) {
		const float* kr = k + j * kc + kh * hd;
		float a = 0.0f;
		for (long long d = lane; d < hd; d += 32) a += qs[d] * kr[d];
		a = warp_sum_f(a);
		if (lane == 0) sc[j] = a * fs;
	}
	__syncthreads();
	float sum = exp_max_sum(sc, nk);
	float inv = nk > 0 ? 1.0f / sum : 0.0f;
	const float* vb = v + kh * hd;
	float* o = out + i * qc + h * hd;
	for (long long d = threadIdx.x; d < hd; d += blockDim.x) {
		float acc = 0.0f;
		for (long long j = 0; j < nk; j++) acc += sc[j] * vb[j * kc + d];
		o[d] = acc * inv;
	}
}

// ---- argmax and confidence, one block per row: logits [rows, cols] ----
// ids[r] = the first index of the row's maximum; conf[r] = its softmax
// probability, 1 / sum_j exp(x_j - max), the sum in double.
extern "C" __global__ void argmax_conf(int* ids, double* conf, const float* logits, long long cols) {
	const float* r = logits + (long long)blockIdx.x * cols;
	float bv = NEG_INF;
	long long bi = 0x7fffffffffffffffLL;
	for (long long j = threadIdx.x; j < cols; j += blockDim.x) {
		float x = r[j];
		if (better(x, j, bv, bi)) { bv = x; bi = j; }
	}
	block_argmax(&bv, &bi);
	double sum = 0.0;
	for (long long j = threadIdx.x; j < cols; j += blockDim.x) sum += exp((double)r[j] - (double)bv);
	sum = block_sum_d(sum);
	if (threadIdx.x == 0) {
		ids[blockIdx.x] = (int)bi;
		conf[blockIdx.x] = 1.0 / sum;
	}
}
