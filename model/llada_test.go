package model

import (
	"fmt"
	"math"
	"path/filepath"
	"testing"

	"github.com/dlmcache/dlmcache/internal/testutil"
	"github.com/dlmcache/dlmcache/internal/testutil/goldencpu"
	"github.com/dlmcache/dlmcache/model/backend"
	"github.com/dlmcache/dlmcache/model/cpu"
	"github.com/dlmcache/dlmcache/model/safetensors"
)

// The golden files in testdata/tiny-* were written by tools/golden/make_golden.py,
// an independent PyTorch implementation of LLaDA (tools/pyllada) run in float64.

type goldenCase struct {
	InputIDs    []int32 `json:"input_ids"`
	PositionIDs []int32 `json:"position_ids"`
	Pos2        struct {
		InputIDs    []int32 `json:"input_ids"`
		PositionIDs []int32 `json:"position_ids"`
	} `json:"pos2"`
	Generate []testutil.Generation `json:"generate"`
}

var fixtures = []string{"tiny-f32", "tiny-bf16"}

// goldenBackends are the CPU backends the golden tests run on.
func goldenBackends(t testing.TB) map[string]*cpu.Backend { return goldencpu.Backends(t) }

func loadFixture(t testing.TB, name string) (*Checkpoint, *goldenCase, *safetensors.Set) {
	return loadFixtureOn(t, name, fixtureBackend())
}

// fixtureBackend is the backend loadFixture loads on: two threads, OpenBLAS.
func fixtureBackend() *cpu.Backend {
	return cpu.NewWithOptions(cpu.Options{Threads: 2, GEMM: cpu.GEMMOpenBLAS})
}

func loadFixtureOn(t testing.TB, name string, be *cpu.Backend) (*Checkpoint, *goldenCase, *safetensors.Set) {
	t.Helper()
	return loadGolden[goldenCase](t, name, be)
}

// loadGolden loads testdata/name on be with its golden.json (decoded into a
// G) and golden.safetensors; all are closed when the test ends.
func loadGolden[G any](t testing.TB, name string, be *cpu.Backend) (*Checkpoint, *G, *safetensors.Set) {
	t.Helper()
	open := func(dir string) (*Checkpoint, error) { return loadCheckpoint(dir, be) }
	return testutil.LoadGolden[G](t, filepath.Join("testdata", name), open, func(m *Checkpoint) { m.Close() }, safetensors.OpenFile)
}

func goldenF32(t testing.TB, s *safetensors.Set, name string) []float32 {
	t.Helper()
	ts, err := s.Tensor(name)
	if err != nil {
		t.Fatal(err)
	}
	if ts.DType != backend.F32 {
		t.Fatalf("%s: dtype %v", name, ts.DType)
	}
	out := make([]float32, len(ts.Data)/4)
	for i := range out {
		out[i] = math.Float32frombits(uint32(ts.Data[4*i]) | uint32(ts.Data[4*i+1])<<8 | uint32(ts.Data[4*i+2])<<16 | uint32(ts.Data[4*i+3])<<24)
	}
	return out
}

// capture records every layer's full K and V.
type capture struct {
	EveryRow
	b    backend.Backend
	k, v [][]float32
}

func (c *capture) Observe(l int, _ []int32, _, k, v backend.Tensor) {
	c.k = append(c.k, c.b.ToHost(k, nil))
	c.v = append(c.v, c.b.ToHost(v, nil))
}

func TestForwardGolden(t *testing.T) {
	for _, fx := range fixtures {
		for lib, be := range goldenBackends(t) {
			t.Run(fx+"/"+lib, func(t *testing.T) { testForwardGolden(t, fx, be) })
		}
	}
}

func testForwardGolden(t *testing.T, fx string, be *cpu.Backend) {
	// PyTorch's golden forward multiplies BF16 weights (upcast) with F32
	// activations; oneDNN's BF16 matmul rounds the activations to BF16
	// too (8 bits of mantissa), which moved tiny-bf16's K/V by up to
	// 0.6% and its logits by less than that when this was written.
	tol := 1e-4
	if fx == "tiny-bf16" && be.BF16Activations() {
		tol = 2e-2
	}
	{
		{
			m, g, gs := loadFixtureOn(t, fx, be)
			cases := []struct {
				prefix   string
				ids, pos []int32
			}{
				{"", g.InputIDs, g.PositionIDs},
				{"pos2.", g.Pos2.InputIDs, g.Pos2.PositionIDs},
			}
			for _, tc := range cases {
				cap := &capture{b: m.Backend}
				out, err := m.Forward(Input{Tokens: tc.ids, Positions: tc.pos, LogitRows: iota32(len(tc.ids))}, cap)
				if err != nil {
					t.Fatal(err)
				}
				if e := testutil.RelErr(out.Logits, goldenF32(t, gs, tc.prefix+"logits")); e > tol {
					t.Errorf("%slogits: relative error %.3g > %g", tc.prefix, e, tol)
				}
				for l := range m.Blocks {
					for _, kv := range []struct {
						name string
						got  []float32
					}{{"k", cap.k[l]}, {"v", cap.v[l]}} {
						name := fmt.Sprintf("%s%s.%d", tc.prefix, kv.name, l)
						if e := testutil.RelErr(kv.got, goldenF32(t, gs, name)); e > tol {
							t.Errorf("%s: relative error %.3g > %g", name, e, tol)
						}
					}
				}
			}
			// The same requests side by side in one batch (and in the
			// other order): each still matches the reference.
			for _, order := range [][]int{{0, 1}, {1, 0}} {
				var ins []Input
				for _, i := range order {
					ins = append(ins, Input{Tokens: cases[i].ids, Positions: cases[i].pos, LogitRows: iota32(len(cases[i].ids))})
				}
				outs, err := m.ForwardBatch(ins, nil)
				if err != nil {
					t.Fatal(err)
				}
				for j, i := range order {
					if e := testutil.RelErr(outs[j].Logits, goldenF32(t, gs, cases[i].prefix+"logits")); e > tol {
						t.Errorf("%slogits in a batch of two at %d: relative error %.3g > %g", cases[i].prefix, j, e, tol)
					}
				}
			}
		}
	}
}

// replay is a plan that computes only rows ≥ from at layers below upTo (and
// all rows above), taking the K/V and hidden states of the others from a
// full forward's capture: the forward must reproduce the full result.
type replay struct {
	b        backend.Backend
	n, from  int
	upTo     int
	k, v, h  [][]float32 // per layer, full [n, ·]
	d, kvDim int
}

func (p *replay) Rows(l int) []int32 {
	if l >= p.upTo {
		return nil
	}
	r := make([]int32, 0, p.n-p.from)
	for i := p.from; i < p.n; i++ {
		r = append(r, int32(i))
	}
	return r
}

func (p *replay) rows(src []float32, cols int, rows []int32) backend.Tensor {
	t := p.b.New(len(rows), cols)
	all := p.b.FromHost(p.n, cols, src)
	p.b.CopyRows(t, nil, all, rows)
	return t
}

func (p *replay) Hidden(l int, rows []int32, dst backend.Tensor) error {
	p.b.CopyRows(dst, nil, p.rows(p.h[l], p.d, rows), nil)
	return nil
}

func (p *replay) KV(l int, rows []int32, k, v backend.Tensor) error {
	p.b.CopyRows(k, rows, p.rows(p.k[l], p.kvDim, rows), nil)
	p.b.CopyRows(v, rows, p.rows(p.v[l], p.kvDim, rows), nil)
	return nil
}

func (p *replay) Observe(int, []int32, backend.Tensor, backend.Tensor, backend.Tensor) {}

// fullCapture records K, V and the hidden state entering every layer.
type fullCapture struct {
	capture
	h [][]float32
}

func (c *fullCapture) Observe(l int, rows []int32, h, k, v backend.Tensor) {
	c.capture.Observe(l, rows, h, k, v)
	c.h = append(c.h, c.b.ToHost(h, nil))
}

func TestPlanReplaysFullForward(t *testing.T) {
	for _, fx := range []string{"tiny-f32", "tiny-dream", "tiny-llada-moe"} {
		t.Run(fx, func(t *testing.T) { testPlanReplays(t, fx) })
	}
}

func testPlanReplays(t *testing.T, fx string) {
	m, g, _ := loadFixture(t, fx)
	ids := g.InputIDs
	n := len(ids)
	logitRows := []int32{int32(n - 3), int32(n - 2), int32(n - 1)}
	fc := &fullCapture{capture: capture{b: m.Backend}}
	want, err := m.Forward(Input{Tokens: ids, LogitRows: logitRows}, fc)
	if err != nil {
		t.Fatal(err)
	}
	if f := m.Config.StepFLOPs(n, n, len(logitRows)); want.FLOPs != f {
		t.Errorf("full forward: %g FLOPs, want StepFLOPs %g", want.FLOPs, f)
	}
	for _, tc := range []struct{ from, upTo int }{
		{from: n / 2, upTo: len(m.Blocks)}, // suffix only at every layer
		{from: n / 2, upTo: 1},             // prefix rows join at layer 1: hidden from the plan
		{from: n - 3, upTo: 2},
	} {
		p := &replay{b: m.Backend, n: n, from: tc.from, upTo: tc.upTo, k: fc.k, v: fc.v, h: fc.h,
			d: m.Config.DModel, kvDim: m.Config.KVDim()}
		got, err := m.Forward(Input{Tokens: ids, LogitRows: logitRows}, p)
		if err != nil {
			t.Fatal(err)
		}
		if e := testutil.RelErr(got.Logits, want.Logits); e > 1e-5 {
			t.Errorf("from %d upTo %d: relative error %.3g against the full forward", tc.from, tc.upTo, e)
		}
		wantRows, wantFLOPs := 0, m.Config.HeadFLOPs(len(logitRows))
		for l := range m.Blocks {
			r := n
			if l < tc.upTo {
				r = n - tc.from
			}
			wantRows += r
			wantFLOPs += m.Config.LayerFLOPs(n, r)
		}
		if got.RowsComputed != wantRows {
			t.Errorf("from %d upTo %d: %d rows computed, want %d", tc.from, tc.upTo, got.RowsComputed, wantRows)
		}
		if math.Abs(got.FLOPs-wantFLOPs) > 1e-9*wantFLOPs || got.FLOPs >= want.FLOPs {
			t.Errorf("from %d upTo %d: %g FLOPs, want %g (full forward %g)", tc.from, tc.upTo, got.FLOPs, wantFLOPs, want.FLOPs)
		}
	}
	// Logits for a row that the last layer does not compute are an error.
	p := &replay{b: m.Backend, n: n, from: n - 1, upTo: len(m.Blocks), k: fc.k, v: fc.v, h: fc.h, d: m.Config.DModel, kvDim: m.Config.KVDim()}
	if _, err := m.Forward(Input{Tokens: ids, LogitRows: []int32{0}}, p); err == nil {
		t.Error("logits of an uncomputed row: no error")
	}
}

func TestForwardBadInput(t *testing.T) {
	m, _, _ := loadFixture(t, "tiny-f32")
	for _, tc := range []struct {
		name string
		in   Input
	}{
		{"empty", Input{}},
		{"token out of range", Input{Tokens: []int32{1, int32(m.Config.Embeddings())}}},
		{"negative token", Input{Tokens: []int32{-1}}},
		{"positions length", Input{Tokens: []int32{1, 2}, Positions: []int32{0}}},
	} {
		if _, err := m.Forward(tc.in, nil); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
}
