package model

import (
	"path/filepath"
	"sync"
	"testing"

	"github.com/dlmcache/dlmcache/model/backend"
	"github.com/dlmcache/dlmcache/model/cpu"
)

// liveCount is a backend that counts the tensors New made and Free has not
// freed yet, and their peak (a batch allocates from several goroutines).
type liveCount struct {
	backend.Backend
	mu         sync.Mutex
	live, peak int
}

func (c *liveCount) New(r, cols int) backend.Tensor {
	c.mu.Lock()
	c.live++
	c.peak = max(c.peak, c.live)
	c.mu.Unlock()
	return c.Backend.New(r, cols)
}

func (c *liveCount) Free(t backend.Tensor) {
	c.mu.Lock()
	c.live--
	c.mu.Unlock()
	c.Backend.Free(t)
}

// TestForwardFreesEachLayer: a forward holds one layer's temporaries at a
// time, not every layer's, and frees everything by its end; alone and
// batched.
func TestForwardFreesEachLayer(t *testing.T) {
	be := &liveCount{Backend: cpu.New(1)}
	m, err := loadCheckpoint(filepath.Join("testdata", "tiny-f32"), be)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	toks := make([]int32, 40)
	for i := range toks {
		toks[i] = int32(5 + i*7%200)
	}
	in := Input{Tokens: toks, LogitRows: []int32{39}}
	// One layer allocates 11 tensors alone and 23 for two requests
	// batched; every layer's, as before the arena, was 34 and 68 on this
	// 3-layer model.
	for _, c := range []struct {
		name string
		max  int
		run  func() error
	}{
		{"Forward", 15, func() error { _, err := m.Forward(in, nil); return err }},
		{"ForwardBatch", 30, func() error { _, err := m.ForwardBatch([]Input{in, in}, nil); return err }},
	} {
		be.live, be.peak = 0, 0
		if err := c.run(); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: peak %d live", c.name, be.peak)
		if be.live != 0 || be.peak > c.max {
			t.Errorf("%s: %d tensors left, peak %d live, want 0 and ≤ %d", c.name, be.live, be.peak, c.max)
		}
	}
}
