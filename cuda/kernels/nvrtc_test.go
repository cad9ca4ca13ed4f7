//go:build nvrtc

package kernels

import (
	"strings"
	"testing"
)

// TestEveryKernelCompilesForSM80AndSM90 compiles every kernel for the two architectures the cuda
// backend targets (A100 and H100/H200). NVRTC needs no GPU.
func TestEveryKernelCompilesForSM80AndSM90(t *testing.T) {
	maj, min, err := Version()
	if err != nil {
		t.Fatalf("nvrtc version: %v", err)
	}
	t.Logf("NVRTC %d.%d", maj, min)
	for _, arch := range []string{"compute_80", "compute_90"} {
		t.Run(arch, func(t *testing.T) {
			ptx, err := Compile(arch)
			if err != nil {
				t.Fatal(err)
			}
			if want := ".target sm_" + strings.TrimPrefix(arch, "compute_"); !strings.Contains(ptx, want) {
				t.Errorf("PTX does not say %q", want)
			}
			t.Logf("%s: %d kernels, %d bytes of PTX", arch, len(Names), len(ptx))
		})
	}
}

// TestCompileReportsErrors checks that compiler errors and missing kernels
// reach the caller, with NVRTC's log, so that TestEveryKernelCompilesForSM80AndSM90 can fail.
func TestCompileReportsErrors(t *testing.T) {
	for _, c := range []struct {
		name, src string
		names     []string
		want      string
	}{
		{"syntax", Source + "\nextern \"C\" __global__ void broken(float* x) { x[0] = undefined_name; }\n", Names, "undefined_name"},
		{"missing kernel", Source, append(append([]string(nil), Names...), "no_such_kernel"), "no_such_kernel"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := compile(c.src, "compute_80", c.names)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want one naming %q", err, c.want)
			}
		})
	}
}
