package main

import (
	"path/filepath"
	"testing"

	"github.com/dlmcache/dlmcache/model/safetensors"
)

// TestWeightBytes: the size the free-disk check asks for is the size of the
// weights written; LLaDA-8B's shape holds 8,015,581,184 parameters (the
// file benchckpt wrote: those bytes plus an 8-byte length and a
// 35,096-byte header).
func TestWeightBytes(t *testing.T) {
	for _, name := range []string{"l8-d256"} {
		s := shapes[name]
		s.dtype = safetensors.BF16
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
		if want := weightBytes(s.c, s.dtype); n != want {
			t.Errorf("%s: %d bytes of weights written, weightBytes says %d", name, n, want)
		}
	}
	s := shapes["llada-8b"]
	if err := s.c.Validate(); err != nil {
		t.Fatal(err)
	}
	if got := weightBytes(s.c, s.dtype); got != 2*8_015_581_184 {
		t.Errorf("llada-8b: %d bytes of weights, want %d", got, 2*8_015_581_184)
	}
}
