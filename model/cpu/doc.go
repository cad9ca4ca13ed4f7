// Package cpu is the CPU implementation of backend.Backend.
//
// Activations are row-major float32 matrices (*Tensor). Weights in F32 are
// used in place when the memory-mapped checkpoint bytes are 4-byte aligned
// (those tensors are read-only); BF16 and F16 weights are converted to
// float32 once, at load.
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
