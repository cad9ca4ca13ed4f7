package model

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/dlmcache/dlmcache/internal/testutil"
	"github.com/dlmcache/dlmcache/model/backend"
	"github.com/dlmcache/dlmcache/model/cpu"
)

// A backend's WithThreads gives the same logits, bit for bit, on any
// number of threads, for the same loaded weights: a server may run a
// request's steps on different thread counts (serve's workers) and its
// answers must not depend on it.
func TestWithThreadsSameLogits(t *testing.T) {
	for _, fixture := range []string{"tiny-f32", "tiny-block"} {
		m, err := loadCheckpoint(filepath.Join("testdata", fixture), cpu.New(3))
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		var ins []Input
		for _, n := range []int{7, 40, 150} {
			toks := make([]int32, n)
			for i := range toks {
				toks[i] = int32(5 + i*7%200)
			}
			ins = append(ins, Input{Tokens: toks, LogitRows: []int32{0, int32(n / 2), int32(n - 1)}})
		}
		want, err := m.ForwardBatch(ins, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, threads := range []int{1, 2, 3, 4} {
			other := *m.Network
			other.Backend = m.Backend.(backend.Threaded).WithThreads(threads)
			if got := other.Backend.(backend.Threaded).Threads(); got != threads {
				t.Fatalf("WithThreads(%d).Threads() = %d", threads, got)
			}
			single, err := other.Forward(ins[1], nil)
			if err != nil {
				t.Fatal(err)
			}
			batch, err := other.ForwardBatch(ins, nil)
			if err != nil {
				t.Fatal(err)
			}
			// The batch's outputs, then ins[1] alone against its batched one.
			got, exp := append(batch, single), append(slices.Clip(want), want[1])
			for i, out := range got {
				if d := testutil.FirstDiff(out.Logits, exp[i].Logits); d >= 0 {
					t.Errorf("%s, %d threads, output %d: logit %d is %v, %v on 3 threads", fixture, threads, i, d, out.Logits[d], exp[i].Logits[d])
				}
			}
		}
	}
}
