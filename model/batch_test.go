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

// TestLogitsRelease: a forward alone on a backend.Lender lends its logits
// from the backend's storage, and Release gives it back: the next
// forward's logits reuse it, the same values as before; Logits is nil
// after, and a second Release does nothing. A batch's logits are its own
// (Release a no-op).
func TestLogitsRelease(t *testing.T) {
	m, g, _ := loadFixture(t, "tiny-f32")
	ids := g.InputIDs
	n := len(ids)
	rows := make([]int32, n) // every row: enough values for the backend's pool
	for i := range rows {
		rows[i] = int32(i)
	}
	in := Input{Tokens: ids, LogitRows: rows}
	first, err := m.Forward(in, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := slices.Clone(first.Logits)
	at := &first.Logits[0]
	first.Release()
	first.Release()
	if first.Logits != nil {
		t.Fatal("Logits kept after Release")
	}
	again, err := m.Forward(in, nil)
	if err != nil {
		t.Fatal(err)
	}
	if &again.Logits[0] != at || !slices.Equal(again.Logits, want) {
		t.Errorf("after Release: storage reused %v, the same logits %v", &again.Logits[0] == at, slices.Equal(again.Logits, want))
	}
	outs, err := m.ForwardBatch([]Input{in, in}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if &outs[0].Logits[0] == &again.Logits[0] || !slices.Equal(outs[1].Logits, want) {
		t.Error("a batch's logits: lent storage, or other values")
	}
	outs[0].Release()
	if !slices.Equal(outs[1].Logits, want) {
		t.Error("releasing one of a batch's outputs changed another's")
	}
}
