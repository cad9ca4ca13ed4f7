package model

import (
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
	copies := *m.Network
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

// TestLogitsTo: a forward writes its logits into Input.LogitsTo where it
// holds them, the values it writes into storage of its own, and into
// storage of its own where LogitsTo is too small; a batch's share one
// buffer whatever the inputs' LogitsTo.
func TestLogitsTo(t *testing.T) {
	m, g, _ := loadFixture(t, "tiny-f32")
	ids := g.InputIDs
	n := len(ids)
	rows := []int32{int32(n - 2), int32(n - 1)}
	own, err := m.Forward(Input{Tokens: ids, LogitRows: rows}, nil)
	if err != nil {
		t.Fatal(err)
	}
	e := m.Config.Embeddings()
	for _, c := range []struct {
		name string
		to   []float32
		in   bool // written in place
	}{
		{"room to spare", make([]float32, 2*e+5), true},
		{"exact", make([]float32, 2*e), true},
		{"too small", make([]float32, 2*e-1), false},
	} {
		out, err := m.Forward(Input{Tokens: ids, LogitRows: rows, LogitsTo: c.to}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Logits) != 2*e || (&out.Logits[0] == &c.to[0]) != c.in {
			t.Errorf("%s: %d logits, in LogitsTo %v, want %d, %v", c.name, len(out.Logits), &out.Logits[0] == &c.to[0], 2*e, c.in)
		}
		if !slices.Equal(out.Logits, own.Logits) {
			t.Errorf("%s: the logits differ from the forward's own", c.name)
		}
	}
	to := make([]float32, 2*e)
	outs, err := m.ForwardBatch([]Input{{Tokens: ids, LogitRows: rows, LogitsTo: to}, {Tokens: ids, LogitRows: rows}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if &outs[0].Logits[0] == &to[0] || !slices.Equal(outs[0].Logits, own.Logits) {
		t.Errorf("batch: first request's logits in its LogitsTo %v, equal to alone %v", &outs[0].Logits[0] == &to[0], slices.Equal(outs[0].Logits, own.Logits))
	}
}
