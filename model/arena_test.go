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

// carvingCount is liveCount on a backend that carves (backend.Carver).
type carvingCount struct {
	*liveCount
	c backend.Carver
}

func (c carvingCount) CarveSize(shapes ...[2]int) int { return c.c.CarveSize(shapes...) }
func (c carvingCount) Carve(t backend.Tensor, shapes ...[2]int) []backend.Tensor {
	return c.c.Carve(t, shapes...)
}

// TestArenaCarve: carved temporaries share one allocation, freed when the
// last of them is released, kept while keepOnly keeps one of them, and
// freed with the arena; the forward carves q, k and v and gives the same
// logits, bit for bit, as with three allocations.
func TestArenaCarve(t *testing.T) {
	cb := cpu.New(1)
	be := carvingCount{&liveCount{Backend: cb}, cb}
	ar := &arena{b: be}
	ts := ar.carve([2]int{3, 5}, [2]int{3, 2}, [2]int{3, 2})
	if be.live != 1 || be.values < 15+6+6 {
		t.Fatalf("carve: %d tensors live, %d values; want 1 holding ≥ 27", be.live, be.values)
	}
	for i, x := range ts {
		if want := [3]int{5, 2, 2}[i]; x.Rows() != 3 || x.Cols() != want {
			t.Fatalf("carved %d: [%d, %d], want [3, %d]", i, x.Rows(), x.Cols(), want)
		}
	}
	// The three do not overlap: each holds its own values.
	for i, x := range ts {
		v := make([]float32, x.Rows()*x.Cols())
		for j := range v {
			v[j] = float32(100*i + j)
		}
		cb.CopyRows(x, nil, cb.FromHost(x.Rows(), x.Cols(), v), nil)
	}
	for i, x := range ts {
		for j, got := range cb.ToHost(x, nil) {
			if got != float32(100*i+j) {
				t.Fatalf("carved %d element %d = %g, overwritten", i, j, got)
			}
		}
	}
	ar.release(ts[0], ts[1])
	if be.live != 1 {
		t.Fatalf("two of three released: %d live, want 1", be.live)
	}
	ar.release(ts[2])
	if be.live != 0 {
		t.Fatalf("all three released: %d live, want 0", be.live)
	}
	ts = ar.carve([2]int{4, 4}, [2]int{4, 4})
	x := ar.alloc(2, 2)
	ar.keepOnly(ts[1])
	if be.live != 1 {
		t.Fatalf("keepOnly(a carved tensor): %d live, want its allocation alone", be.live)
	}
	ar.release(ts[0])
	if be.live != 1 {
		t.Fatalf("one of two kept carved released: %d live, want 1", be.live)
	}
	ar.free()
	if be.live != 0 || len(ar.carved) != 0 || len(ar.parts) != 0 || x.Rows() != 0 {
		t.Fatalf("after free: %d live, %d carved, %d parents", be.live, len(ar.carved), len(ar.parts))
	}

	plain, carving := &liveCount{Backend: cpu.New(1)}, carvingCount{&liveCount{Backend: cb}, cb}
	var logits [2][]float32
	for i, b := range []backend.Backend{plain, carving} {
		m, err := loadCheckpoint(filepath.Join("testdata", "tiny-f32"), b)
		if err != nil {
			t.Fatal(err)
		}
		toks := make([]int32, 40)
		for j := range toks {
			toks[j] = int32(5 + j*7%200)
		}
		out, err := m.Forward(Input{Tokens: toks, LogitRows: []int32{3, 39}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		logits[i] = append([]float32(nil), out.Logits...)
		out.Release()
		m.Close()
	}
	if carving.live != 0 || carving.peak >= plain.peak {
		t.Errorf("carving forward: %d tensors left, peak %d live; want 0 and fewer than %d (q, k and v one tensor)", carving.live, carving.peak, plain.peak)
	}
	for j := range logits[0] {
		if logits[0][j] != logits[1][j] {
			t.Fatalf("logit %d: %g carved, %g not", j, logits[1][j], logits[0][j])
		}
	}
}
