// Command benchckpt writes the random-weights checkpoints that `make bench`
// times: a LLaDA-tiny-like shape (8 layers, d 256) and a larger one
// (16 layers, d 2048), both F32 in LLaDA's Hugging Face layout. Asked by
// name (-shape), it also writes the shapes `make bench-8b` times:
// l16-d2048-bf16 (the larger shape's weights in BF16), llada-8b
// (LLaDA-8B-Instruct's shape, BF16, 16 GB), dream-7b (Dream-v0-7B's shape
// in Dream's layout, BF16, 15.2 GB) and llada-moe-7b (LLaDA-MoE-7B-A1B's
// shape in its layout, BF16, 14.7 GB); it checks the free disk first.
//
//	go run ./tools/benchckpt -out /tmp/dlmcache-bench
//	go run ./tools/benchckpt -out /tmp/dlmcache-bench-8b -shape llada-8b
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/dlmcache/dlmcache/model"
	"github.com/dlmcache/dlmcache/model/load"
	"github.com/dlmcache/dlmcache/model/safetensors"
)

type shape struct {
	c     model.Config
	dtype safetensors.DType
	// byName: written only when -shape names it.
	byName bool
}

var (
	l16d2048 = model.Config{DModel: 2048, NLayers: 16, NHeads: 16, NKVHeads: 16, MLPHiddenSize: 5632, VocabSize: 8192, RopeTheta: 500000, RMSNormEps: 1e-5}
	shapes   = map[string]shape{
		"l8-d256":   {c: model.Config{DModel: 256, NLayers: 8, NHeads: 4, NKVHeads: 4, MLPHiddenSize: 768, VocabSize: 2048, RopeTheta: 10000, RMSNormEps: 1e-5}, dtype: safetensors.F32},
		"l16-d2048": {c: l16d2048, dtype: safetensors.F32},
		// The same draws as l16-d2048 (same seed), rounded to BF16.
		"l16-d2048-bf16": {c: l16d2048, dtype: safetensors.BF16, byName: true},
		// LLaDA-8B-Instruct's config.json: 32 layers, d 4096, 32 heads
		// (no grouping), MLP 12288, vocabulary 126464, untied head.
		"llada-8b": {c: model.Config{DModel: 4096, NLayers: 32, NHeads: 32, NKVHeads: 32, MLPHiddenSize: 12288, VocabSize: 126464, EmbeddingSize: 126464, MaxSequenceLength: 4096, RopeTheta: 500000, RMSNormEps: 1e-5}, dtype: safetensors.BF16, byName: true},
		// Dream-v0-Instruct-7B's config.json (Qwen2.5-7B's layout): 28
		// layers, d 3584, 28 query and 4 key/value heads of 128, q/k/v
		// biases, MLP 18944, vocabulary 152064, untied head, RoPE θ 1e6,
		// eps 1e-6; shifted logits.
		"dream-7b": {c: model.Config{Arch: "dream", DModel: 3584, NLayers: 28, NHeads: 28, NKVHeads: 4, MLPHiddenSize: 18944, VocabSize: 152064, MaxSequenceLength: 131072, RopeTheta: 1e6, RMSNormEps: 1e-6, QKVBias: true, ShiftLogits: true}, dtype: safetensors.BF16, byName: true},
		// LLaDA-MoE-7B-A1B's config.json: 16 layers, d 2048, 16 heads of
		// 128 (no grouping), per-head q/k RMSNorm, 64 experts of width
		// 1024 in every layer, top 8 by softmax (not renormalised), no
		// shared expert, vocabulary 157184, untied head, RoPE θ 50000;
		// dense_intermediate_size 8192 (unused).
		"llada-moe-7b": {c: model.Config{Arch: "llada-moe", DModel: 2048, NLayers: 16, NHeads: 16, NKVHeads: 16, MLPHiddenSize: 8192, VocabSize: 157184, MaxSequenceLength: 8192, RopeTheta: 50000, RMSNormEps: 1e-5, QKNorm: true, MoE: &model.MoEConfig{Experts: 64, TopK: 8, Hidden: 1024}}, dtype: safetensors.BF16, byName: true},
	}
)

func main() {
	out := flag.String("out", filepath.Join(os.TempDir(), "dlmcache-bench"), "directory to write one checkpoint per shape into")
	only := flag.String("shape", "", "write only this shape (l16-d2048-bf16, llada-8b, dream-7b and llada-moe-7b are written only when named)")
	flag.Parse()
	if _, ok := shapes[*only]; *only != "" && !ok {
		fmt.Fprintf(os.Stderr, "benchckpt: no shape %q\n", *only)
		os.Exit(2)
	}
	names := make([]string, 0, len(shapes))
	for name := range shapes {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		s := shapes[name]
		if *only != name && (*only != "" || s.byName) {
			continue
		}
		dir := filepath.Join(*out, name)
		if _, err := os.Stat(filepath.Join(dir, "model.safetensors")); err == nil {
			fmt.Fprintf(os.Stderr, "%s: exists, kept\n", dir)
			continue
		}
		if err := write(dir, s); err != nil {
			fmt.Fprintln(os.Stderr, "benchckpt:", err)
			os.Exit(1)
		}
	}
}

// write writes one checkpoint after checking that the disk has room for it
// (and 1 GiB more), printing its progress every 5% when it is over 1 GiB.
func write(dir string, s shape) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	size, err := load.RandomWeightBytes(s.c, s.dtype)
	if err != nil {
		return err
	}
	var fs syscall.Statfs_t
	if err := syscall.Statfs(dir, &fs); err != nil {
		return err
	}
	if free := int64(fs.Bavail) * fs.Bsize; free < size+1<<30 {
		return fmt.Errorf("%s: needs %.1f GB (and 1 GiB spare), the disk has %.1f GB free", dir, float64(size)/1e9, float64(free)/1e9)
	}
	fmt.Fprintf(os.Stderr, "writing %s (%s, %.2f GB)\n", dir, s.dtype, float64(size)/1e9)
	start := time.Now()
	var next int64
	progress := func(written, total int64) {
		if total < 1<<30 || written < next && written < total {
			return
		}
		next = written + total/20
		fmt.Fprintf(os.Stderr, "  %5.1f%%  %.2f of %.2f GB  %s\n", 100*float64(written)/float64(total), float64(written)/1e9, float64(total)/1e9, time.Since(start).Round(time.Second))
	}
	return load.WriteRandomProgress(dir, s.c, 7, s.dtype, progress)
}
