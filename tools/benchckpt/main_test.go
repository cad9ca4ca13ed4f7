package main

import (
	"path/filepath"
	"testing"

	"github.com/dlmcache/dlmcache/model"
	"github.com/dlmcache/dlmcache/model/load"
	"github.com/dlmcache/dlmcache/model/safetensors"
)

// TestWeightBytes: the size the free-disk check asks for is the size of the
// weights written, in each architecture's layout; LLaDA-8B's shape holds
// 8,015,581,184 parameters (the file benchckpt wrote: those bytes plus an
// 8-byte length and a 35,096-byte header), Dream-7B's 7,615,616,512 and
// LLaDA-MoE-7B-A1B's 7,356,880,896 (their published totals: 7.6B, 7B).
func TestWeightBytes(t *testing.T) {
	small := map[string]model.Config{
		"l8-d256": shapes["l8-d256"].c,
		"dream":   {Arch: "dream", DModel: 64, NLayers: 2, NHeads: 4, NKVHeads: 2, MLPHiddenSize: 96, VocabSize: 272, RopeTheta: 1e6, RMSNormEps: 1e-6, QKVBias: true, ShiftLogits: true},
		"llada-moe": {Arch: "llada-moe", DModel: 64, NLayers: 2, NHeads: 4, NKVHeads: 4, MLPHiddenSize: 128, VocabSize: 272, RopeTheta: 50000, RMSNormEps: 1e-5, QKNorm: true,
			MoE: &model.MoEConfig{Experts: 8, TopK: 2, Hidden: 16}},
	}
	for name, c := range small {
		s := shape{c: c, dtype: safetensors.BF16}
		dir := filepath.Join(t.TempDir(), name)
		if err := write(dir, s); err != nil {
			t.Fatal(err)
		}
		set, err := safetensors.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		var n int64
		for _, tn := range set.Names() {
			x, err := set.Tensor(tn)
			if err != nil {
				t.Fatal(err)
			}
			n += int64(len(x.Data))
		}
		set.Close()
		want, err := load.RandomWeightBytes(s.c, s.dtype)
		if err != nil {
			t.Fatal(err)
		}
		if n != want {
			t.Errorf("%s: %d bytes of weights written, RandomWeightBytes says %d", name, n, want)
		}
	}
	for name, params := range map[string]int64{"llada-8b": 8_015_581_184, "dream-7b": 7_615_616_512, "llada-moe-7b": 7_356_880_896} {
		s := shapes[name]
		if err := s.c.Validate(); err != nil {
			t.Fatal(err)
		}
		got, err := load.RandomWeightBytes(s.c, s.dtype)
		if err != nil {
			t.Fatal(err)
		}
		if got != 2*params {
			t.Errorf("%s: %d bytes of weights, want %d", name, got, 2*params)
		}
	}
}
