package model

import (
	"slices"
	"testing"

	"github.com/dlmcache/dlmcache/internal/testutil"
	"github.com/dlmcache/dlmcache/model/backend"
)

// carrier is a Carrier that records a full forward (record: it carries
// nothing and keeps every layer's K/V, V as Carry saw it, and attention
// and MLP outputs) or replays one, carrying the rows of carry at every
// layer from the second on the recorded outputs and K/V.
type carrier struct {
	t              *testing.T
	b              backend.Backend
	n, d, kvDim    int
	record         bool
	carry          []int32
	k, v, seen     [][]float32 // per layer, [n, kv]
	att, mlp       [][]float32 // per layer, [n, d]
	computedAt     [][]int32   // replay: the rows ObserveOutputs saw
	carriedOutputs int         // replay: the rows Outputs filled
}

func newCarrier(t *testing.T, m *Network, n int) *carrier {
	L := len(m.Blocks)
	return &carrier{t: t, b: m.Backend, n: n, d: m.Config.DModel, kvDim: m.Config.KVDim(), record: true,
		k: make([][]float32, L), v: make([][]float32, L), seen: make([][]float32, L),
		att: make([][]float32, L), mlp: make([][]float32, L)}
}

func (c *carrier) replaying(carry []int32) *carrier {
	r := *c
	r.record, r.carry, r.computedAt = false, carry, make([][]int32, len(c.k))
	return &r
}

func (c *carrier) Rows(int) []int32 { return nil }

func (c *carrier) Hidden(l int, _ []int32, _ backend.Tensor) error {
	c.t.Errorf("layer %d: hidden states asked of a plan with every row at every layer", l)
	return nil
}

func (c *carrier) KV(l int, rows []int32, k, v backend.Tensor) error {
	c.b.CopyRows(k, rows, c.b.FromHost(c.n, c.kvDim, c.k[l]), rows)
	c.b.CopyRows(v, rows, c.b.FromHost(c.n, c.kvDim, c.v[l]), rows)
	return nil
}

func (c *carrier) Observe(l int, computed []int32, _, k, v backend.Tensor) {
	if c.record {
		c.k[l], c.v[l] = c.b.ToHost(k, nil), c.b.ToHost(v, nil)
	}
}

func (c *carrier) Carries(int) bool { return true }

func (c *carrier) Carry(l int, rows []int32, v backend.Tensor) []int32 {
	if len(rows) != c.n {
		c.t.Errorf("layer %d: Carry asked with %d rows, want %d", l, len(rows), c.n)
	}
	if c.record {
		c.seen[l] = c.b.ToHost(v, nil)
		return nil
	}
	// The rows enter with the full forward's hidden states: the same V.
	if e := testutil.RelErr(c.b.ToHost(v, nil), c.seen[l]); e > 1e-5 {
		c.t.Errorf("layer %d: Carry's V: relative error %.3g against the full forward's", l, e)
	}
	if l == 0 {
		return nil
	}
	return c.carry
}

func (c *carrier) Outputs(l int, carried []int32, att, mlp backend.Tensor) error {
	c.b.CopyRows(att, nil, c.b.FromHost(c.n, c.d, c.att[l]), carried)
	c.b.CopyRows(mlp, nil, c.b.FromHost(c.n, c.d, c.mlp[l]), carried)
	c.carriedOutputs += len(carried)
	return nil
}

func (c *carrier) ObserveOutputs(l int, computed []int32, att, mlp backend.Tensor) {
	if c.record {
		c.att[l], c.mlp[l] = c.b.ToHost(att, nil), c.b.ToHost(mlp, nil)
		return
	}
	c.computedAt[l] = slices.Clone(computed)
}

// A row carried through a layer on the attention and MLP outputs it had
// there leaves it as if computed: a forward that carries a third of the
// rows at every layer past the first, on a full forward's outputs and
// K/V, gives every row's logits (carried rows' too) as the full forward
// does, computing only the others; alone and in a batch.
func TestCarrierReplaysFullForward(t *testing.T) {
	for _, fx := range []string{"tiny-f32", "tiny-dream", "tiny-llada-moe"} {
		t.Run(fx, func(t *testing.T) {
			m, g, _ := loadFixture(t, fx)
			ids := g.InputIDs
			n, L := len(ids), len(m.Blocks)
			in := Input{Tokens: ids, LogitRows: iota32(n)}
			plain, err := m.Forward(in, nil)
			if err != nil {
				t.Fatal(err)
			}
			rec := newCarrier(t, m.Network, n)
			full, err := m.Forward(in, rec)
			if err != nil {
				t.Fatal(err)
			}
			if e := testutil.RelErr(full.Logits, plain.Logits); e > 1e-6 {
				t.Errorf("carrying nothing: relative error %.3g against the plain forward", e)
			}
			var carry []int32
			for p := 1; p < n; p += 3 {
				carry = append(carry, int32(p))
			}
			computed := complement(carry, n)
			check := func(name string, out *Output, p *carrier) {
				t.Helper()
				if e := testutil.RelErr(out.Logits, full.Logits); e > 1e-5 {
					t.Errorf("%s: relative error %.3g against the full forward", name, e)
				}
				if want := n + (L-1)*len(computed); out.RowsComputed != want {
					t.Errorf("%s: %d rows computed, want %d", name, out.RowsComputed, want)
				}
				if out.FLOPs >= full.FLOPs {
					t.Errorf("%s: %g FLOPs, not below the full forward's %g", name, out.FLOPs, full.FLOPs)
				}
				for l := 1; l < L; l++ {
					if !slices.Equal(p.computedAt[l], computed) {
						t.Errorf("%s: layer %d: outputs observed for rows %v, want %v", name, l, p.computedAt[l], computed)
						break
					}
				}
				if want := (L - 1) * len(carry); p.carriedOutputs != want {
					t.Errorf("%s: outputs asked for %d carried rows, want %d", name, p.carriedOutputs, want)
				}
			}
			p := rec.replaying(carry)
			got, err := m.Forward(in, p)
			if err != nil {
				t.Fatal(err)
			}
			check("alone", got, p)
			// In a batch beside a plain request and a second carrier.
			p1, p2 := rec.replaying(carry), rec.replaying(carry)
			outs, err := m.ForwardBatch([]Input{in, {Tokens: ids[:n/2], LogitRows: []int32{0}}, in}, []Plan{p1, nil, p2})
			if err != nil {
				t.Fatal(err)
			}
			check("batch 0", outs[0], p1)
			check("batch 2", outs[2], p2)
			// A plan that carries every row is refused.
			if _, err := m.Forward(in, rec.replaying(iota32(n))); err == nil {
				t.Error("carrying every row: no error")
			}
		})
	}
}
