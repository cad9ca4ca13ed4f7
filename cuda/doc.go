// Package cuda implements the engine's backend interface
// (model/backend.Backend) on NVIDIA GPUs with gorgonia.org/cu (driver API:
// primary context, device memory, modules loaded from PTX, kernel
// launches), cuBLAS (cublasGemmEx with BF16 inputs and FP32 accumulation,
// wrapped here with cgo) and kernels compiled at run time by NVRTC for the
// device's architecture (sources in cuda/kernels).
//
// Everything that imports gorgonia.org/cu lives behind the `cuda` build tag:
// that package's init exits the process on a machine with no GPU, so the
// default build must never link it. Without the tag, New returns
// ErrNotBuilt. Build with `go build -tags cuda`; see docs/gpu.md.
//
// Precision. Weights stay on the device in their checkpoint type (BF16 for
// LLaDA-8B; F16 and F32 accepted); activations are float32. A product with
// a BF16 weight rounds its float32 input to BF16 into scratch (one
// conversion kernel) and runs on BF16 tensor cores with FP32 accumulation;
// attention's two products use TF32 tensor cores. Options.F32 (or
// DLMCACHE_CUDA_PRECISION=f32) widens every weight to float32 and computes
// in FP32 instead: slower, but equal to the CPU backend to float rounding.
//
// Tests that need a GPU carry the tags `cuda gpu` (make gpu-test); the
// NVRTC compile check of every kernel runs anywhere (make cuda-check).
package cuda
