package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/spf13/cobra"
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

func newCmdConvert(f *factory, runF func(*convertOptions) error) *cobra.Command {
	return newCommand(&convertOptions{f: f}, runF, &cobra.Command{
		Use:   "convert SRC OUT",
		Short: "Convert a Hugging Face LLaDA checkpoint to GGUF, or a GGUF back to safetensors",
		Long: `convert writes a Hugging Face LLaDA model directory (or a bundled model's
name) as a GGUF file laid out as llama.cpp's convert_hf_to_gguf.py lays it out
(architecture llada, its tensor names and metadata keys, q/k rows permuted for
ggml's RoPE, the tokenizer as tokenizer.ggml.*), so that llama.cpp's
llama-diffusion-cli and dlmcache both run it. 2-D weights take --outtype; 1-D
tensors and norms stay F32, and a weight whose rows are not a multiple of 32
is written F16 where Q8_0 or Q4_0 is asked, as llama.cpp does. A Q4_0 file
keeps its output head Q8_0 (llama-quantize keeps it at 6 bits).

Given a .gguf file as SRC, convert writes it back as a model directory OUT
(config.json, model.safetensors, tokenizer.json, tokenizer_config.json),
which is lossless for F32, F16 and BF16 files; quantized files are refused.`,
		Example: `  dlmcache convert llada-tiny llada-tiny-q8_0.gguf --outtype q8_0
  dlmcache convert llada-tiny llada-tiny-q4_0.gguf --outtype q4_0
  dlmcache convert ~/models/LLaDA-8B-Instruct llada-8b-bf16.gguf
  dlmcache convert llada-tiny-f32.gguf ./llada-tiny-back`,
		Args: cobra.ExactArgs(2),
	})
}
