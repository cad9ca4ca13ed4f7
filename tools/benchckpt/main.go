// Command benchckpt writes the random-weights checkpoints that `make bench`
// times: a LLaDA-tiny-like shape (8 layers, d 256) and a larger one
// (16 layers, d 2048), both F32 in LLaDA's Hugging Face layout. Asked by
// name (-shape), it also writes the shapes `make bench-8b` times:
// l16-d2048-bf16 (the larger shape's weights in BF16) and llada-8b
// (LLaDA-8B-Instruct's shape, BF16, 16 GB; it checks the free disk first).
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
	}
)

func main() {
	out := flag.String("out", filepath.Join(os.TempDir(), "dlmcache-bench"), "directory to write one checkpoint per shape into")
	only := flag.String("shape", "", "write only this shape (l16-d2048-bf16 and llada-8b are written only when named)")
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
	size := weightBytes(s.c, s.dtype)
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
	return model.WriteRandomProgress(dir, s.c, 7, s.dtype, progress)
}

// weightBytes is the size of a checkpoint's weights.
func weightBytes(c model.Config, dtype safetensors.DType) int64 {
	d, kv, hid, e := int64(c.DModel), int64(c.KVDim()), int64(c.MLPHiddenSize), int64(c.Embeddings())
	n := e*d + int64(c.NLayers)*(2*d+2*d*d+2*kv*d+3*hid*d) + d
	if !c.WeightTying {
		n += e * d
	}
	return n * int64(dtype.Size())
}
