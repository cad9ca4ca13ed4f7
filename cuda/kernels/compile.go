//go:build cuda || nvrtc

package kernels

import (
	"fmt"
	"strings"

	"gorgonia.org/cu/nvrtc"
)

// Compile compiles Source with NVRTC to PTX for a virtual architecture such
// as "compute_80" or "compute_90", and checks that the PTX defines every
// kernel of Names. The error carries NVRTC's log.
func Compile(arch string) (string, error) { return compile(Source, arch, Names) }

// compile compiles src for arch and checks that the PTX defines names.
func compile(src, arch string, names []string) (string, error) {
	prog, err := nvrtc.CreateProgram(src, "dlmcache_kernels.cu")
	if err != nil {
		return "", fmt.Errorf("nvrtc: create program: %w", err)
	}
	defer prog.Destroy()
	opts := []string{
		"--gpu-architecture=" + arch,
		"--std=c++14",
		"--fmad=true",
	}
	if err := prog.Compile(opts...); err != nil {
		log, _ := prog.GetLog()
		return "", fmt.Errorf("nvrtc: compile for %s: %w\n%s", arch, err, log)
	}
	ptx, err := prog.GetPTX()
	if err != nil {
		return "", fmt.Errorf("nvrtc: PTX for %s: %w", arch, err)
	}
	for _, name := range names {
		if !strings.Contains(ptx, ".entry "+name+"(") {
			return "", fmt.Errorf("nvrtc: PTX for %s has no kernel %q", arch, name)
		}
	}
	return ptx, nil
}

// Version is NVRTC's version.
func Version() (major, minor int, err error) { return nvrtc.Version() }
