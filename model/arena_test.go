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
	// values and peakValues count the live tensors' values.
	values, peakValues int
}

func (c *liveCount) New(r, cols int) backend.Tensor {
	c.mu.Lock()
	c.live++
	c.peak = max(c.peak, c.live)
	c.values += r * cols
	c.peakValues = max(c.peakValues, c.values)
	c.mu.Unlock()
	return c.Backend.New(r, cols)
}

func (c *liveCount) Free(t backend.Tensor) {
	c.mu.Lock()
	c.live--
	c.values -= t.Rows() * t.Cols()
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
	// Each temporary is freed after its last reader: a layer of one
	// request holds its attention's operands (x, q, k, v and the
	// attention's output) or its MLP's (x, the normed x, gate's and up's
	// products), never both — the unfused forward (liveCount is no
	// backend.Fuser) held 6·d + 2·kv + 2·hidden values a row.
	c := m.Config
	n, d, kv, h := len(toks), c.DModel, c.KVDim(), c.MLPHiddenSize
	layerMost := n * max(3*d+2*kv, 2*d+2*h)
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
		be.live, be.peak, be.values, be.peakValues = 0, 0, 0, 0
		if err := c.run(); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: peak %d live, %d values (a layer's operands at most: %d)", c.name, be.peak, be.peakValues, layerMost)
		if be.live != 0 || be.peak > c.max {
			t.Errorf("%s: %d tensors left, peak %d live, want 0 and ≤ %d", c.name, be.live, be.peak, c.max)
		}
		if c.name == "Forward" && be.peakValues > layerMost {
			t.Errorf("Forward: peak %d values live, want ≤ %d", be.peakValues, layerMost)
		}
	}
}
