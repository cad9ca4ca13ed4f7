package model

import (
	"context"
	"slices"
	"testing"

	"github.com/dlmcache/dlmcache/internal/testutil"
	"github.com/dlmcache/dlmcache/model/backend"
)

// TestForwardBatchMatchesForward runs requests of different lengths and
// plans (full, suffix only, rows joining at a later layer, no logits) as one
// batch and checks each against its own Forward: the same logits, bit for
// bit, rows and FLOPs.
func TestForwardBatchMatchesForward(t *testing.T) {
	m, g, _ := loadFixture(t, "tiny-f32")
	ids := g.InputIDs
	n := len(ids)
	logitRows := []int32{int32(n - 3), int32(n - 2), int32(n - 1)}
	fc := &fullCapture{capture: capture{b: m.Backend}}
	if _, err := m.Forward(Input{Tokens: ids}, fc); err != nil {
		t.Fatal(err)
	}
	replayFrom := func(from, upTo int) Plan {
		return &replay{b: m.Backend, n: n, from: from, upTo: upTo, k: fc.k, v: fc.v, h: fc.h,
			d: m.Config.DModel, kvDim: m.Config.KVDim()}
	}
	short := ids[:n/2]
	ins := []Input{
		{Tokens: ids, LogitRows: logitRows},
		{Tokens: short, LogitRows: []int32{0, int32(len(short) - 1)}},
		{Tokens: ids, LogitRows: logitRows},
		{Tokens: ids, LogitRows: logitRows},
		{Tokens: short},
		{Tokens: ids, Positions: g.PositionIDs, LogitRows: logitRows},
	}
	plans := []Plan{nil, nil, replayFrom(n/2, len(m.Blocks)), replayFrom(n/2, 1), nil, nil}
	if len(g.PositionIDs) != n {
		ins[5].Positions = nil
	}
	// On a backend without views the batch copies each request's rows of
	// q, k, v and the attention out and back instead.
	copies := *m.LLaDA
	copies.Backend = noViews{m.Backend}
	for _, size := range []int{1, 2, len(ins)} {
		got, err := m.ForwardBatch(ins[:size], plans[:size])
		if err != nil {
			t.Fatal(err)
		}
		copied, err := copies.ForwardBatch(ins[:size], plans[:size])
		if err != nil {
			t.Fatal(err)
		}
		for i := range size {
			if !slices.Equal(got[i].Logits, copied[i].Logits) {
				t.Errorf("batch of %d, request %d: logits with views and with copies differ (relative error %.3g)", size, i, testutil.RelErr(got[i].Logits, copied[i].Logits))
			}
		}
		for i := range size {
			want, err := m.Forward(ins[i], plans[i])
			if err != nil {
				t.Fatal(err)
			}
			// Alone or with others, a row's products do not depend on the
			// batch (docs/performance.md, "Batch and thread invariance"):
			// bit for bit.
			if !slices.Equal(got[i].Logits, want.Logits) {
				t.Errorf("batch of %d, request %d: logits differ from its own forward (relative error %.3g)", size, i, testutil.RelErr(got[i].Logits, want.Logits))
			}
			if got[i].RowsComputed != want.RowsComputed || got[i].FLOPs != want.FLOPs {
				t.Errorf("batch of %d, request %d: %d rows %g FLOPs, its own forward %d rows %g FLOPs",
					size, i, got[i].RowsComputed, got[i].FLOPs, want.RowsComputed, want.FLOPs)
			}
		}
	}
}

// noViews is a backend without the optional interfaces (backend.Viewer
// among them) of the one it wraps.
type noViews struct{ backend.Backend }

func TestForwardBatchBadInput(t *testing.T) {
	m, g, _ := loadFixture(t, "tiny-f32")
	ok := Input{Tokens: g.InputIDs}
	for _, tc := range []struct {
		name  string
		ins   []Input
		plans []Plan
	}{
		{"no inputs", nil, nil},
		{"plans count", []Input{ok, ok}, []Plan{nil}},
		{"bad token in the second", []Input{ok, {Tokens: []int32{-1}}}, nil},
		{"logits of a row not computed", []Input{ok, {Tokens: g.InputIDs, LogitRows: []int32{int32(len(g.InputIDs))}}}, nil},
	} {
		if _, err := m.ForwardBatch(tc.ins, tc.plans); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
}

// TestGenerateHooks: the Forward hook runs every forward (and a batch of one
// changes nothing), and OnStep sees every step with the canvas after it.
func TestGenerateHooks(t *testing.T) {
	m, g, _ := loadFixture(t, "tiny-f32")
	gc := g.Generate[0]
	o := GenOptions{GenLength: gc.GenLength, Steps: gc.Steps, BlockLength: gc.BlockLength}
	want, err := m.Generate(context.Background(), gc.PromptIDs, 0, o, nil)
	if err != nil {
		t.Fatal(err)
	}
	forwards, steps, committed := 0, 0, 0
	o.Forward = func(in Input, plan Plan) (*Output, error) {
		forwards++
		outs, err := m.ForwardBatch([]Input{in}, []Plan{plan})
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
	got, err := m.Generate(context.Background(), gc.PromptIDs, 0, o, nil)
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
	o := GenOptions{GenLength: gc.GenLength, Steps: gc.Steps, BlockLength: gc.BlockLength}
	want, err := m.Generate(context.Background(), p, 0, o, nil)
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
		got, err := m.Generate(context.Background(), p, 0, o, nil)
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
	a, err := m.Forward(Input{Tokens: full, LogitRows: []int32{int32(n)}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.Forward(Input{Tokens: full, Positions: append(gapped, gapped[n-1]+1), LogitRows: []int32{int32(n)}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Equal(a.Logits, b.Logits) {
		t.Error("a gap in the position ids left the logits unchanged")
	}
	for _, bad := range [][]int32{shifted(0, 0, 0)[:n-1], append([]int32{3}, shifted(0, 0, 0)[1:]...)} {
		o.Positions = bad
		if _, err := m.Generate(context.Background(), p, 0, o, nil); err == nil {
			t.Errorf("positions %v: no error", bad)
		}
	}
}
