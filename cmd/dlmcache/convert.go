package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/spf13/pflag"

	"github.com/dlmcache/dlmcache/engine"
	"github.com/dlmcache/dlmcache/model/gguf"
	"github.com/dlmcache/dlmcache/model/load"
	"github.com/dlmcache/dlmcache/model/safetensors"
)

type convertOptions struct {
	f       *factory
	Src     string
	Out     string
	OutType string
}

func (opts *convertOptions) run(context.Context) error {
	out := opts.f.Out
	if load.IsGGUF(opts.Src) {
		if opts.OutType != "auto" {
			return fmt.Errorf("--outtype applies to safetensors → GGUF; a GGUF converts back in its own types")
		}
		rep, err := load.FromGGUF(opts.Src, opts.Out)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "wrote %s: %d tensors (%s), %.1f MB\n", opts.Out, len(rep.Tensors), typeCounts(rep), float64(rep.Bytes)/1e6)
		return nil
	}
	dir, err := engine.ResolveModel(opts.Src)
	if err != nil {
		return err
	}
	typ, how, err := outType(opts.OutType, dir)
	if err != nil {
		return err
	}
	if st, err := os.Stat(opts.Out); err == nil && st.IsDir() {
		return fmt.Errorf("%s is a directory; name the .gguf file to write", opts.Out)
	}
	fmt.Fprintf(out, "converting %s → %s, 2-D weights %s (%s)\n", dir, opts.Out, typ, how)
	rep, err := load.ToGGUF(dir, opts.Out, typ)
	if err != nil {
		return err
	}
	for _, t := range rep.Tensors {
		if t.Note != "" {
			fmt.Fprintf(out, "  %s: %s\n", t.Name, t.Note)
		}
	}
	fmt.Fprintf(out, "wrote %s: %d tensors (%s), %.1f MB of tensor data\n", opts.Out, len(rep.Tensors), typeCounts(rep), float64(rep.Bytes)/1e6)
	return nil
}

func (opts *convertOptions) setArgs(args []string) { opts.Src, opts.Out = args[0], args[1] }

func (opts *convertOptions) flags(fl *pflag.FlagSet) {
	fl.StringVar(&opts.OutType, "outtype", "auto",
		"type of the 2-D weights: f32, f16, bf16, q8_0, q4_0, or auto (the checkpoint's own type, so nothing is rounded)")
}

// outType resolves --outtype; auto is the checkpoint's widest weight type.
func outType(s, dir string) (gguf.GGMLType, string, error) {
	if s != "auto" {
		t, err := gguf.ParseGGMLType(s)
		if err != nil || (t != gguf.F32 && t != gguf.F16 && t != gguf.BF16 && t != gguf.Q8_0 && t != gguf.Q4_0) {
			return 0, "", fmt.Errorf("--outtype %q: want f32, f16, bf16, q8_0, q4_0 or auto", s)
		}
		return t, "--outtype", nil
	}
	set, err := safetensors.Open(dir)
	if err != nil {
		return 0, "", err
	}
	defer set.Close()
	seen := map[safetensors.DType]bool{}
	for _, n := range set.Names() {
		in, _, _ := set.Info(n)
		seen[in.DType] = true
	}
	switch {
	case seen[safetensors.F32]:
		return gguf.F32, "auto: the checkpoint holds F32 weights", nil
	case seen[safetensors.BF16] && seen[safetensors.F16]:
		return gguf.F32, "auto: the checkpoint mixes BF16 and F16", nil
	case seen[safetensors.BF16]:
		return gguf.BF16, "auto: the checkpoint's weights are BF16", nil
	case seen[safetensors.F16]:
		return gguf.F16, "auto: the checkpoint's weights are F16", nil
	}
	return 0, "", fmt.Errorf("%s: no F32, F16 or BF16 weights to convert", filepath.Clean(dir))
}

func typeCounts(rep *load.ConvertReport) string {
	n := map[string]int{}
	for _, t := range rep.Tensors {
		n[t.To]++
	}
	var parts []string
	for k, v := range n {
		parts = append(parts, fmt.Sprintf("%d %s", v, k))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}
