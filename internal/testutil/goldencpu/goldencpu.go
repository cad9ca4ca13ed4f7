// Package goldencpu holds the CPU backends that the golden tests of model
// and model/sample run on.
package goldencpu

import (
	"testing"

	"github.com/dlmcache/dlmcache/model/cpu"
)

// OpenBLAS is the CPU backend on OpenBLAS with two threads.
func OpenBLAS() *cpu.Backend {
	return cpu.NewWithOptions(cpu.Options{Threads: 2, GEMM: cpu.GEMMOpenBLAS})
}

// Backends are the CPU backends the golden tests run on: OpenBLAS, and
// oneDNN where it loads and passes its check, with the checkpoint's
// weights in place and packed at load.
func Backends(t testing.TB) map[string]*cpu.Backend {
	out := map[string]*cpu.Backend{"openblas": OpenBLAS()}
	if b, err := cpu.NewChecked(cpu.Options{Threads: 2, GEMM: cpu.GEMMOneDNN}); err == nil {
		out["onednn"] = b
		out["onednn-packed"] = cpu.NewWithOptions(cpu.Options{Threads: 2, GEMM: cpu.GEMMOneDNN, PackWeights: true})
	} else {
		t.Logf("oneDNN not tested: %v", err)
	}
	return out
}
