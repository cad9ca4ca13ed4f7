package model

import (
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"testing"

	"github.com/dlmcache/dlmcache/model/backend"
	"github.com/dlmcache/dlmcache/model/cpu"
)

// hideViews is a backend without backend.Viewer: the model loads unfused.
type hideViews struct{ backend.Backend }

// The fused q/k/v and gate/up products give the separate products' logits,
// alone and batched.
func TestFusedProducts(t *testing.T) {
	dir := filepath.Join("testdata", "tiny-f32")
	fused, err := loadCheckpoint(dir, cpu.New(1))
	if err != nil {
		t.Fatal(err)
	}
	defer fused.Close()
	plain, err := loadCheckpoint(dir, hideViews{cpu.New(1)})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if !fused.Fuse() || plain.Fuse() {
		t.Fatal("Fuse: want true on the CPU backend, false without views")
	}
	if fused.Blocks[0].QKV == nil || plain.Blocks[0].QKV != nil {
		t.Fatalf("fused: QKV %v, plain: QKV %v", fused.Blocks[0].QKV != nil, plain.Blocks[0].QKV != nil)
	}
	toks := make([]int32, 40)
	for i := range toks {
		toks[i] = int32(5 + i*7%200)
	}
	in := Input{Tokens: toks, LogitRows: []int32{30, 35, 39}}
	a, err := fused.Forward(in, nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := plain.Forward(in, nil)
	if err != nil {
		t.Fatal(err)
	}
	bt, err := fused.ForwardBatch([]Input{in, in}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, got := range [][]float32{a.Logits, bt[0].Logits, bt[1].Logits} {
		var d, scale float64
		for i := range got {
			d = max(d, math.Abs(float64(got[i]-p.Logits[i])))
			scale = max(scale, math.Abs(float64(p.Logits[i])))
		}
		if d > 1e-5*scale {
			t.Errorf("fused logits differ from the separate products' by %g (scale %g)", d, scale)
		}
	}
}

// BenchmarkFused times a full and a 40-row forward of the bundled model,
// fused and with separate products.
func BenchmarkFused(b *testing.B) {
	dir := filepath.Join("..", "models", "llada-tiny")
	for _, fusedOn := range []bool{true, false} {
		var be backend.Backend = cpu.New(1)
		if !fusedOn {
			be = hideViews{be}
		}
		m, err := loadCheckpoint(dir, be)
		if err != nil {
			b.Skip(err)
		}
		m.Fuse()
		n := 230
		toks := make([]int32, n)
		for i := range toks {
			toks[i] = int32(5 + i*7%1000)
		}
		for _, rows := range []int{n, 40} {
			b.Run(fmt.Sprintf("fused=%v/rows=%d", fusedOn, rows), func(b *testing.B) {
				var plan Plan
				if rows < n {
					plan = &lastRows{n: n, r: rows, L: len(m.Blocks), kv: m.Config.KVDim(), b: m.Backend}
				}
				in := Input{Tokens: toks, LogitRows: []int32{int32(n - 1)}}
				for i := 0; i < b.N; i++ {
					if _, err := m.Forward(in, plan); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
		m.Close()
	}
}

// lastRows computes the last r rows at every layer; the others' K/V are
// zeros (timing only).
type lastRows struct {
	n, r, L, kv int
	b           backend.Backend
}

func (p *lastRows) Rows(int) []int32 {
	rows := make([]int32, p.r)
	for i := range rows {
		rows[i] = int32(p.n - p.r + i)
	}
	return rows
}
func (p *lastRows) Hidden(int, []int32, backend.Tensor) error                            { return nil }
func (p *lastRows) KV(int, []int32, backend.Tensor, backend.Tensor) error                { return nil }
func (p *lastRows) Observe(int, []int32, backend.Tensor, backend.Tensor, backend.Tensor) {}

// The logits written straight into the returned slice (backend.Hoster)
// are those a backend without it copies out, bit for bit; each forward's
// slices are the caller's: a later forward leaves them as they were.
func TestLogitsOnHost(t *testing.T) {
	dir := filepath.Join("testdata", "tiny-f32")
	host, err := loadCheckpoint(dir, cpu.New(1))
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	if _, ok := host.Backend.(backend.Hoster); !ok {
		t.Fatal("the CPU backend is not a backend.Hoster")
	}
	copied, err := loadCheckpoint(dir, struct{ backend.Backend }{cpu.New(1)})
	if err != nil {
		t.Fatal(err)
	}
	defer copied.Close()
	toks := make([]int32, 40)
	for i := range toks {
		toks[i] = int32(3 + i*5%200)
	}
	in := Input{Tokens: toks, LogitRows: []int32{1, 20, 39}}
	a, err := host.ForwardBatch([]Input{in, in}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kept := slices.Clone(a[0].Logits)
	b, err := copied.Forward(in, nil)
	if err != nil {
		t.Fatal(err)
	}
	other := in
	other.Tokens = slices.Clone(toks)
	other.Tokens[0] = 9
	if _, err := host.Forward(other, nil); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(a[0].Logits, b.Logits) || !slices.Equal(a[1].Logits, b.Logits) {
		t.Fatal("logits on the host differ from the copied ones")
	}
	if !slices.Equal(a[0].Logits, kept) {
		t.Fatal("a later forward changed an earlier one's logits")
	}
}
