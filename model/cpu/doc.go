// Package cpu is the CPU implementation of backend.Backend.
//
// Activations are row-major float32 matrices (*Tensor). Weights in F32 are
// used in place when the memory-mapped checkpoint bytes are 4-byte aligned
// (those tensors are read-only); F16 weights are converted to float32 once,
// at load.
//
// BF16 weight matrices stay BF16, in place in the memory map (a BF16
// *Tensor: no copy, half the memory of float32; LLaDA-8B's 16 GB fit a
// 24 GB machine), and only MatMul (as w), Embed (as the table), ToHost
// and the views accept one. MatMul cuts w's rows into one range per
// goroutine, as for a float32 w, and each goroutine converts its range a
// panel at a time (up to 16 MB of float32) into a buffer
// of its own and calls sgemm on the panel: F32 activations, F32
// accumulation, the same results as converting w first (the conversion,
// a 16-bit shift, is exact; a small C loop, AVX2 where present). A small w
// under a tall x is converted whole, once per product. BF16 norm vectors
// ([1, d]) are converted at load. Options.DecodeBF16, or
// DLMCACHE_CPU_BF16=f32 for New, converts every BF16 weight at load
// instead, as before: twice the memory, no conversion per product.
//
// On CPUs with AVX512-BF16 a vdpbf16ps kernel (BF16 products accumulated
// in F32, no conversion pass) would be the fast path; it is not written:
// the machines this package is developed on have AVX2/FMA only, and an
// untested kernel is not shipped. PeakBF16 measures that instruction's
// throughput where it exists.
//
// Matrix products and the two products inside attention call OpenBLAS's
// cblas_sgemm through cgo (link with -lopenblas; Debian: libopenblas-dev).
// New sets OpenBLAS to one thread, process-wide, and splits each product
// over its own goroutines: with OpenBLAS's thread pool next to Go's, the
// two oversubscribe the cores and OpenBLAS's idle threads spin while Go
// code runs. bench_test.go records the measurements behind the choice.
//
// The remaining operations (RMSNorm, RoPE, SiLU·up, softmax, Add, Embed,
// CopyRows) are Go loops split over the backend's threads when the input is
// large enough to pay for the goroutines. The two that evaluate e^x for
// every element, the softmax inside attention and SiLU, call small C
// kernels (kernels.go) instead: a float32 e^x accurate to about 1 ulp,
// vectorised with AVX2+FMA where the CPU has them (checked at start-up),
// scalar elsewhere. A scalar Go e^x ran at 6 ns, as slow as math.Exp, and
// made both ops the bottleneck of attention. RMSNorm accumulates in
// float64; RoPE computes its angles in float64.
package cpu
