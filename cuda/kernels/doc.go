// Package kernels holds the CUDA C sources of the cuda backend's kernels and
// the NVRTC call that compiles them to PTX.
//
// The source is kernels.cu, embedded as the string Source with no build
// tag, so any build can read it. Compile (in compile.go, build tags cuda
// or nvrtc) imports only gorgonia.org/cu/nvrtc — never gorgonia.org/cu,
// whose package init exits the process on a machine without a GPU — so
// the kernels can be compiled and checked for compute_80 and compute_90 on
// a machine with no GPU:
//
//	go test -tags nvrtc ./cuda/kernels/
//
// It includes no header: NVRTC has no system include path, so the
// half-precision conversions are written out (bf16 by bit shifts with
// round-to-nearest-even, f16 by PTX cvt instructions). Every kernel
// parameter is 8 bytes wide (pointers, long long, double) because
// gorgonia.org/cu's Function.Launch copies each argument as 8 bytes.
package kernels
