package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/dlmcache/dlmcache/model/cpu"
)

// commit is set by the Makefile (-ldflags -X main.commit=…) for builds
// whose build info carries no VCS stamp (GOFLAGS=-buildvcs=false).
var commit string

type versionOptions struct {
	f    *factory
	JSON bool
}

// versionInfo is what `dlmcache version` reports.
type versionInfo struct {
	Version   string `json:"version"`  // module version ("(devel)" for a source build)
	Commit    string `json:"commit"`   // VCS revision the binary was built from
	Modified  bool   `json:"modified"` // built from a tree with uncommitted changes
	BuildTime string `json:"commit_time,omitempty"`
	Go        string `json:"go"`
	Platform  string `json:"platform"`
	Backend   string `json:"backend"`
	BLAS      string `json:"blas"` // library and the kernel it chose for this CPU
	// GEMM: the library the CPU backend's matrix products run on here
	// ($DLMCACHE_CPU_GEMM, default auto: oneDNN where it has AVX-512
	// kernels, else OpenBLAS), or why it could not be set up.
	GEMM string `json:"gemm"`
	// QuantProducts: how products with Q8_0/Q4_0 weights run here
	// ($DLMCACHE_CPU_QUANT, default int8: activations quantized per row,
	// integer products on the widest instruction set the CPU has).
	QuantProducts string `json:"quant_products"`
	// Weights: where weights are read from ($DLMCACHE_CPU_WEIGHTS,
	// default packed: laid out at load for their kernels, the file's
	// pages released; mapped: in place in the memory map).
	Weights string `json:"weights"`
	// ISA: the instruction-set level the CPU backend's kernels run at
	// ($DLMCACHE_CPU_ISA caps it: generic, avx2, avx512, native) and
	// what this CPU has.
	ISA string `json:"isa"`
}

func buildVersion() versionInfo {
	v := versionInfo{Version: "unknown", Commit: cmp.Or(commit, "unknown"), Go: runtime.Version(),
		Platform: runtime.GOOS + "/" + runtime.GOARCH, Backend: "cpu", BLAS: cpu.BLAS(), ISA: cpu.ISADescription()}
	if b, err := cpu.NewFromEnv(1); err != nil {
		v.GEMM = err.Error()
	} else {
		b.ProbeGEMM() // what products would run on, oneDNN loaded to say
		v.GEMM = b.GEMM()
		v.QuantProducts = b.QuantProducts()
		v.Weights = b.Weights()
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		v.Version = bi.Main.Version
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				v.Commit = s.Value
			case "vcs.time":
				v.BuildTime = s.Value
			case "vcs.modified":
				v.Modified = s.Value == "true"
			}
		}
	}
	return v
}

func (opts *versionOptions) run(context.Context) error {
	v := buildVersion()
	if opts.JSON {
		enc := json.NewEncoder(opts.f.Out)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	mod := ""
	if v.Modified {
		mod = " (modified)"
	}
	fmt.Fprintf(opts.f.Out, "dlmcache %s\ncommit   %s%s\ngo       %s %s\nbackend  %s (the CUDA backend needs a build with -tags cuda)\nblas     %s\ngemm     %s\nquant    %s\nweights  %s\nisa      %s\n",
		v.Version, v.Commit, mod, v.Go, v.Platform, v.Backend, v.BLAS, v.GEMM, v.QuantProducts, v.Weights, v.ISA)
	return nil
}

func (opts *versionOptions) flags(fl *pflag.FlagSet) {
	fl.BoolVar(&opts.JSON, "json", false, "print JSON")
}

func newCmdVersion(f *factory, runF func(*versionOptions) error) *cobra.Command {
	return newCommand(&versionOptions{f: f}, runF, &cobra.Command{
		Use:   "version",
		Short: "Print the version, commit, backend, BLAS kernel, GEMM library, quantized products, weight layouts and ISA level in use",
		Args:  cobra.NoArgs,
	})
}
