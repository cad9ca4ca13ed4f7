package sample

import (
	"context"
	"slices"
	"testing"

	"github.com/dlmcache/dlmcache/model"
)

// TestGenerateHooks: the Forward hook runs every forward (and a batch of one
// changes nothing), and OnStep sees every step with the canvas after it.
func TestGenerateHooks(t *testing.T) {
	m, g, _ := loadFixture(t, "tiny-f32")
	gc := g.Generate[0]
	o := GenOptions{Regime: gc.Regime}
	want, err := Generate(context.Background(), m.Network, gc.PromptIDs, 0, o, nil)
	if err != nil {
		t.Fatal(err)
	}
	forwards, steps, committed := 0, 0, 0
	o.Forward = func(in model.Input, plan model.Plan) (*model.Output, error) {
		forwards++
		outs, err := m.ForwardBatch([]model.Input{in}, []model.Plan{plan})
		if err != nil {
			return nil, err
		}
		return outs[0], nil
	}
	o.OnStep = func(s *Step, c []int32) {
		if s.Index != steps {
			t.Errorf("step %d reported as %d", steps, s.Index)
		}
		steps++
		for _, p := range c {
			if s.Canvas[p] == int32(m.Config.MaskTokenID) {
				t.Errorf("step %d: committed position %d still masked", s.Index, p)
			}
		}
		committed += len(c)
	}
	got, err := Generate(context.Background(), m.Network, gc.PromptIDs, 0, o, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Answer, want.Answer) {
		t.Errorf("answer through the hook %v, without %v", got.Answer, want.Answer)
	}
	if forwards != want.NFE || steps != want.Steps || committed != gc.GenLength {
		t.Errorf("%d forwards, %d steps, %d committed; want %d, %d, %d", forwards, steps, committed, want.NFE, want.Steps, gc.GenLength)
	}
}

// TestGeneratePositions: explicit position ids 0..n-1 are the default; a
// global shift of every position leaves RoPE's relative attention, and so
// the answer, unchanged; a gap is honoured (the logits move); malformed ids
// are refused.
func TestGeneratePositions(t *testing.T) {
	m, g, _ := loadFixture(t, "tiny-f32")
	gc := g.Generate[0]
	p := gc.PromptIDs
	o := GenOptions{Regime: gc.Regime}
	want, err := Generate(context.Background(), m.Network, p, 0, o, nil)
	if err != nil {
		t.Fatal(err)
	}
	shifted := func(by int32, gapAt int, gap int32) []int32 {
		pos := make([]int32, len(p))
		for i := range pos {
			pos[i] = int32(i) + by
			if i >= gapAt {
				pos[i] += gap
			}
		}
		return pos
	}
	for _, tc := range []struct {
		name string
		pos  []int32
	}{{"0..n-1", shifted(0, 0, 0)}, {"shifted by 7", shifted(7, 0, 0)}} {
		o.Positions = tc.pos
		got, err := Generate(context.Background(), m.Network, p, 0, o, nil)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if !slices.Equal(got.Answer, want.Answer) {
			t.Errorf("%s: answer %v, want %v", tc.name, got.Answer, want.Answer)
		}
	}
	// A gap changes the relative positions across it: the forward's logits
	// differ from the contiguous ones (checked on one forward, where the
	// answer could coincide).
	n := len(p)
	gapped := append(shifted(0, n/2, 5), make([]int32, 0)...)
	full := append(append([]int32(nil), p...), int32(m.Config.MaskTokenID))
	a, err := m.Forward(model.Input{Tokens: full, LogitRows: []int32{int32(n)}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.Forward(model.Input{Tokens: full, Positions: append(gapped, gapped[n-1]+1), LogitRows: []int32{int32(n)}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Equal(a.Logits, b.Logits) {
		t.Error("a gap in the position ids left the logits unchanged")
	}
	for _, bad := range [][]int32{shifted(0, 0, 0)[:n-1], append([]int32{3}, shifted(0, 0, 0)[1:]...)} {
		o.Positions = bad
		if _, err := Generate(context.Background(), m.Network, p, 0, o, nil); err == nil {
			t.Errorf("positions %v: no error", bad)
		}
	}
}
