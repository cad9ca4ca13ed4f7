// Package cuda will implement the engine's backend interface
// (model/backend.Backend) on NVIDIA GPUs with gorgonia.org/cu, cuBLAS and
// kernels compiled at run time by NVRTC.
//
// Everything that imports gorgonia.org/cu lives behind the `cuda` build tag:
// that package's init exits the process on a machine with no GPU, so the
// default build must never link it.
package cuda
