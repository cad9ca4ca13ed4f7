// Command benchckpt writes the random-weights checkpoints that `make bench`
// times: a LLaDA-tiny-like shape (8 layers, d 256) and a larger one
// (16 layers, d 2048), both F32 in LLaDA's Hugging Face layout.
//
//	go run ./tools/benchckpt -out /tmp/dlmcache-bench
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/dlmcache/dlmcache/model"
	"github.com/dlmcache/dlmcache/model/safetensors"
)

var shapes = map[string]model.Config{
	"l8-d256":   {DModel: 256, NLayers: 8, NHeads: 4, NKVHeads: 4, MLPHiddenSize: 768, VocabSize: 2048, RopeTheta: 10000, RMSNormEps: 1e-5},
	"l16-d2048": {DModel: 2048, NLayers: 16, NHeads: 16, NKVHeads: 16, MLPHiddenSize: 5632, VocabSize: 8192, RopeTheta: 500000, RMSNormEps: 1e-5},
}

func main() {
	out := flag.String("out", filepath.Join(os.TempDir(), "dlmcache-bench"), "directory to write one checkpoint per shape into")
	only := flag.String("shape", "", "write only this shape")
	flag.Parse()
	for name, c := range shapes {
		if *only != "" && name != *only {
			continue
		}
		dir := filepath.Join(*out, name)
		if _, err := os.Stat(filepath.Join(dir, "model.safetensors")); err == nil {
			fmt.Fprintf(os.Stderr, "%s: exists, kept\n", dir)
			continue
		}
		fmt.Fprintf(os.Stderr, "writing %s\n", dir)
		if err := model.WriteRandom(dir, c, 7, safetensors.F32); err != nil {
			fmt.Fprintln(os.Stderr, "benchckpt:", err)
			os.Exit(1)
		}
	}
}
