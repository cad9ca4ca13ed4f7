package cpu

/*
#include "kernels.h"
*/
import "C"

import (
	"fmt"
	"os"
	"strings"
)

// ISAEnv is the environment variable that caps the instruction sets the
// CPU backend's kernels use (ISALevel): read once, when the package is
// initialised, so it holds for the whole process.
const ISAEnv = "DLMCACHE_CPU_ISA"

// ISALevel is a cap on the instruction sets the backend's kernels run:
// its own C kernels (attention, the panel products, the row-wise
// operations, the int8 products) and oneDNN's (dnnl_set_max_cpu_isa). An
// AVX-512 machine capped at ISAAVX2 computes as an AVX2-only processor
// does, so both classes can be measured and tested on one machine.
// OpenBLAS's kernel is not capped: it is chosen by OpenBLAS (or pinned by
// OPENBLAS_CORETYPE, which the backend never sets) and named by BLAS().
type ISALevel int

// The ISA levels, lowest first.
const (
	// ISAGeneric: plain C loops, no vector extensions beyond the
	// compiler's baseline.
	ISAGeneric ISALevel = iota
	// ISAAVX2: AVX2, FMA and F16C (Haswell, Zen 1–3 class).
	ISAAVX2
	// ISAAVX512: AVX-512 F/BW/DQ/VL without AVX512-BF16 or VNNI
	// (Skylake-X class): the int8 products stay on AVX2.
	ISAAVX512
	// ISANative: everything this CPU has (AVX512-BF16, AVX512-VNNI,
	// AVX-VNNI): the default.
	ISANative
)

var isaLevelNames = map[ISALevel]string{ISAGeneric: "generic", ISAAVX2: "avx2", ISAAVX512: "avx512", ISANative: "native"}

func (l ISALevel) String() string {
	if s, ok := isaLevelNames[l]; ok {
		return s
	}
	return fmt.Sprintf("ISALevel(%d)", int(l))
}

// ParseISA parses an ISALevel: generic, avx2, avx512 or native ("" is
// native).
func ParseISA(s string) (ISALevel, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	if s == "" {
		return ISANative, nil
	}
	for l, name := range isaLevelNames {
		if s == name {
			return l, nil
		}
	}
	return ISANative, fmt.Errorf("unknown ISA level %q (want generic, avx2, avx512 or native)", s)
}

// isaCap is the process's cap ($DLMCACHE_CPU_ISA); isaCapErr says why a
// value set there was refused (NewFromEnv returns it; the kernels then
// run uncapped).
var isaCap, isaCapErr = func() (ISALevel, error) {
	l, err := ParseISA(os.Getenv(ISAEnv))
	if err != nil {
		return ISANative, fmt.Errorf("%s: %w", ISAEnv, err)
	}
	return l, nil
}()

// ISA is the level the kernels are capped at ($DLMCACHE_CPU_ISA).
func ISA() ISALevel { return isaCap }

// MachineISA is the highest level this processor runs, whatever the cap:
// the levels below it and it are the ones a test run can cover.
func MachineISA() ISALevel {
	switch {
	case C.dlmc_have_avx512() != 0 && (C.dlmc_have_avx512bf16() != 0 || C.dlmc_quant_isa() == C.DLMC_ISA_AVX512VNNI):
		return ISANative
	case C.dlmc_have_avx512() != 0:
		return ISAAVX512
	case C.dlmc_have_avx2() != 0 && C.dlmc_quant_isa() != C.DLMC_ISA_GENERIC:
		return ISAAVX2
	}
	return ISAGeneric
}

// ISADescription says what the cap leaves on, e.g. "avx512 (capped by
// DLMCACHE_CPU_ISA; this CPU: native: AVX-512, AVX512-BF16, AVX512-VNNI)".
func ISADescription() string {
	feats := []string{}
	if C.dlmc_have_avx2() != 0 {
		feats = append(feats, "AVX2")
	}
	if C.dlmc_have_avx512() != 0 {
		feats = append(feats, "AVX-512")
	}
	if C.dlmc_have_avx512bf16() != 0 {
		feats = append(feats, "AVX512-BF16")
	}
	for _, isa := range []int{isaAVXVNNI, isaAVX512VNNI} {
		if C.dlmc_quant_isa_supported(C.int(isa)) != 0 {
			feats = append(feats, isaNames[isa])
		}
	}
	cpu := strings.Join(feats, ", ")
	if cpu == "" {
		cpu = "no AVX2"
	}
	if isaCap >= MachineISA() {
		return fmt.Sprintf("%s (%s)", MachineISA(), cpu)
	}
	return fmt.Sprintf("%s (capped by %s; this CPU: %s: %s)", isaCap, ISAEnv, MachineISA(), cpu)
}

// capQuantISA caps the int8 products' instruction set at isaCap.
func capQuantISA(isa int) int {
	switch {
	case isaCap == ISAGeneric:
		return isaGeneric
	case isaCap < ISANative:
		return min(isa, isaAVX2)
	}
	return isa
}

// dnnlMaxISA is oneDNN's dnnl_cpu_isa_t for the cap (0: no cap).
func dnnlMaxISA() int {
	switch isaCap {
	case ISAGeneric:
		return dnnlISASSE41
	case ISAAVX2:
		return dnnlISAAVX2
	case ISAAVX512:
		return dnnlISAAVX512Core
	}
	return 0
}
