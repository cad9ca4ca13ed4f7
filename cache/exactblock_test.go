package cache

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlmcache/dlmcache/internal/testmodel"
	"github.com/dlmcache/dlmcache/model"
	"github.com/dlmcache/dlmcache/model/load"
	"github.com/dlmcache/dlmcache/model/sample"
	"github.com/dlmcache/dlmcache/model/tokenizer"
	"github.com/dlmcache/dlmcache/regime"
)

// loadBlockTiny is the random-weight test model made block-causal with
// blocks of B (and token-shifted logits with shift): the same weights, its
// config.json marked.
func loadBlockTiny(t testing.TB, B int, shift ...bool) *load.Model {
	t.Helper()
	dir := testmodel.Derive(t, "tiny-f32", []string{"model.safetensors", "tokenizer.json", "tokenizer_config.json"}, func(c map[string]any) {
		c["block_causal"], c["block_size"], c["shift_logits"] = true, B, len(shift) > 0 && shift[0]
	})
	m := testmodel.LoadDir(t, dir)
	if got := m.Config.CausalBlock(); got != B {
		t.Fatalf("block-causal test model: block size %d, want %d", got, B)
	}
	return m
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// exactRegimes are the schedules the exact cache is checked in: fixed
// steps with LLaDA's low-confidence remasking, and threshold decoding.
// exactBlockPair loads the block-causal tiny model for blocks of B tokens
// and makes exact-block over an unbounded store of its own, with none
// to compare against, for the threshold regime.
func exactBlockPair(t *testing.T, B int) (*load.Model, sample.GenOptions, *BlockStore, Method, Method) {
	t.Helper()
	m, o, none := exactBlockBase(t, B)
	store := NewBlockStore(m.Backend, B, 1<<30, true, nil)
	return m, o, store, mk(t, "exact-block", Options{Store: store, Fingerprint: m.Fingerprint}), none
}

// exactBlockBase loads the block-causal tiny model for blocks of B tokens,
// with the threshold regime and none to compare against.
func exactBlockBase(t *testing.T, B int) (*load.Model, sample.GenOptions, Method) {
	t.Helper()
	return loadBlockTiny(t, B), exactRegimes(B)["threshold"], mk(t, "none", Options{})
}

func exactRegimes(B int) map[string]sample.GenOptions {
	return map[string]sample.GenOptions{
		"low-confidence": {Regime: regime.Regime{GenLength: 4 * B, Steps: 2 * B, BlockLength: B}},
		"threshold":      {Regime: regime.Regime{GenLength: 4 * B, Steps: 4 * B, BlockLength: B}, Decoder: sample.Threshold{T: 0.2}},
	}
}

// The exact cache inside a request: the tokens of computing every row,
// from fewer rows.
func TestExactBlockEqualsNone(t *testing.T) {
	const B = 8
	none, exact := mk(t, "none", Options{}), mk(t, "exact-block", Options{})
	for _, shift := range []bool{false, true} {
		m := loadBlockTiny(t, B, shift)
		for regime, o := range exactRegimes(B) {
			for i := range 2 {
				name := fmt.Sprintf("%s, shifted logits %v, request %d", regime, shift, i)
				ids, pl := request(t, m, i)
				var wantLogits, gotLogits [][]float32
				want, _ := generate(t, m, none, ids, pl, logged(m, o, &wantLogits))
				got, _ := generate(t, m, exact, ids, pl, logged(m, o, &gotLogits))
				if !slices.Equal(got.Canvas, want.Canvas) {
					t.Errorf("%s: exact-block %v\nnone %v", name, got.Answer, want.Answer)
				}
				if d := logitsDiff(gotLogits, wantLogits); d > 1e-4 {
					t.Errorf("%s: the steps' logits differ from none's by %g", name, d)
				}
				if got.NFE != want.NFE || got.RowsComputed*2 > want.RowsComputed {
					t.Errorf("%s: exact-block %d forwards, %d rows; none %d, %d", name, got.NFE, got.RowsComputed, want.NFE, want.RowsComputed)
				}
			}
		}
	}
}

// logged is o with every forward's logits appended to logits.
func logged(m *load.Model, o sample.GenOptions, logits *[][]float32) sample.GenOptions {
	o.Forward = func(in model.Input, plan model.Plan) (*model.Output, error) {
		out, err := m.Forward(in, plan)
		if err == nil {
			*logits = append(*logits, slices.Clone(out.Logits))
		}
		return out, err
	}
	return o
}

// logitsDiff is the largest difference between two runs' logits relative
// to the largest logit (+Inf when the runs' forwards do not pair up).
func logitsDiff(a, b [][]float32) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	var d, scale float64
	for i := range a {
		if len(a[i]) != len(b[i]) {
			return math.Inf(1)
		}
		for j := range a[i] {
			d = max(d, math.Abs(float64(a[i][j]-b[i][j])))
			scale = max(scale, math.Abs(float64(b[i][j])))
		}
	}
	return d / max(scale, 1e-30)
}

// Rows computed: the first step computes the prompt's full blocks with the
// current block, a block's first step the block just committed with it,
// every other step the current block alone — up to the end of the current
// block's model block.
func TestExactBlockRows(t *testing.T) {
	const B = 8
	m := loadBlockTiny(t, B)
	L := len(m.Blocks)
	ids, pl := request(t, m, 1)
	o := sample.GenOptions{Regime: regime.Regime{GenLength: 4 * B, Steps: 2 * B, BlockLength: B}}
	var steps []recorded
	p := mk(t, "exact-block", Options{}).Planner(m.Network, "", nil)
	g, err := sample.Generate(context.Background(), m.Network, ids, pl, o, &rowRecorder{Planner: p, steps: &steps})
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	prevStart := 0 // model block start of the previous step's block
	for i, r := range steps {
		total += len(r.rows)
		start := r.BlockStart / B * B
		want := start
		switch {
		case i == 0:
			want = 0
		case r.BlockStep == 0:
			want = prevStart
		}
		end := min(fedLen(&r.Step), (r.BlockEnd+B-1)/B*B) // the end of the block's model block, within the input
		if len(r.rows) == 0 || int(r.rows[0]) != want || int(r.rows[len(r.rows)-1]) != end-1 || len(r.rows) != end-want {
			t.Errorf("step %d (block %d step %d, block %d..%d): rows %v, want %d..%d", i, r.Block, r.BlockStep, r.BlockStart, r.BlockEnd, r.rows, want, end-1)
		}
		prevStart = start
	}
	if L*total != g.RowsComputed {
		t.Errorf("%d rows over %d layers, the forwards counted %d", total, L, g.RowsComputed)
	}
}

type recorded struct {
	sample.Step
	rows []int32
}

// rowRecorder records each step and the rows its plan computes.
type rowRecorder struct {
	sample.Planner
	steps *[]recorded
}

func (r *rowRecorder) Plan(s *sample.Step) model.Plan {
	p := r.Planner.Plan(s)
	*r.steps = append(*r.steps, recorded{*s, slices.Clone(p.Rows(0))})
	return p
}

// Across requests: a shared system message's full blocks come from the
// store at every layer (a block store at the model's block size and at a
// multiple of it, and a whole-prefix store), and the tokens are those of
// computing every row.
func TestExactBlockStore(t *testing.T) {
	const B = 8
	m := loadBlockTiny(t, B)
	L := len(m.Blocks)
	o := exactRegimes(B)["threshold"]
	none := mk(t, "none", Options{})
	wants := map[int]*sample.Generation{}
	for _, tc := range []struct {
		name  string
		store func() PrefixStore
		unit  int // the store's reuse granularity
	}{
		{"blocks of B", func() PrefixStore { return NewBlockStore(m.Backend, B, 1<<30, true, nil) }, B},
		{"blocks of 2B", func() PrefixStore { return NewBlockStore(m.Backend, 2*B, 1<<30, true, nil) }, 2 * B},
		{"blocks of B, whole fill", func() PrefixStore { return NewBlockStore(m.Backend, B, 1<<30, false, nil) }, B},
		{"whole prefixes", func() PrefixStore { return NewStore(m.Backend, 1<<30, LRU) }, B},
	} {
		meth := mk(t, "exact-block", Options{Store: tc.store(), Fingerprint: m.Fingerprint})
		_, whole := StoreOf(meth).(*Store)
		var seen [][]int32                 // earlier requests' prefixes
		for _, i := range []int{0, 1, 3} { // requests 0 and 3 share a system message
			ids, pl := request(t, m, i)
			if wants[i] == nil {
				wants[i], _ = generate(t, m, none, ids, pl, o)
			}
			want := wants[i]
			var steps []recorded
			var info Info
			got, err := sample.Generate(context.Background(), m.Network, ids, pl, o, &rowRecorder{Planner: meth.Planner(m.Network, "", &info), steps: &steps})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got.Canvas, want.Canvas) {
				t.Errorf("%s, request %d: with the store %v\nnone %v", tc.name, i, got.Answer, want.Answer)
			}
			full := pl / tc.unit * tc.unit
			// Stored before: the full blocks this prompt shares with an
			// earlier one (the chat template's header at least; requests 0
			// and 3 their system message and the start of the question:
			// a block store keeps every full block of a prompt); the
			// whole-prefix store finds only an equal prefix.
			key := ids
			if whole {
				key = ids[:pl]
			}
			stored := 0
			for _, e := range seen {
				n := commonPrefix(e, key)
				if whole && n < pl || whole && len(e) != pl {
					n = 0
				}
				stored = max(stored, n/tc.unit*tc.unit)
			}
			seen = append(seen, key)
			// A block store's missing blocks are computed by the request's
			// first step (from the stored ones on) and stored from it; the
			// whole-prefix store computes a missing prefix alone.
			wantRows, first := 0, stored
			if whole && stored == 0 {
				wantRows, first = L*pl, full // computed whole; its partial block is not served
			}
			hit := min(stored, pl) // the prefix's tokens served
			if full == 0 || info.HitTokens != hit || info.PrefixRows != wantRows || info.Hit != (stored >= full) || info.Depth != L {
				t.Errorf("%s, request %d (prefix %d tokens): hit %d tokens, filled %d rows, hit %v, depth %d; want %d, %d, %v, %d",
					tc.name, i, pl, info.HitTokens, info.PrefixRows, info.Hit, info.Depth, hit, wantRows, stored >= full, L)
			}
			if r := steps[0].rows; len(r) == 0 || int(r[0]) != first {
				t.Errorf("%s, request %d: the first step computes from row %v, want %d", tc.name, i, r[:min(1, len(r))], first)
			}
		}
		if _, pl0 := request(t, m, 0); commonPrefix(seen[2], seen[0]) < pl0 {
			t.Fatalf("requests 0 and 3 do not share their prefix")
		}
	}
}

// commonPrefix is the length of the longest common prefix of a and b.
func commonPrefix(a, b []int32) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// A multi-turn conversation reuses every earlier turn's full blocks: each
// turn's prompt starts with the previous turn's answered conversation,
// stored after it (serve --store-answers), and its tokens are those of
// computing every row.
func TestExactBlockConversation(t *testing.T) {
	const B = 8
	m, o, store, meth, none := exactBlockPair(t, B)
	tok := m.Tokenizer
	msgs := []tokenizer.Message{{Role: "system", Content: "You answer questions about the house rules. Be brief."}}
	prevStored := 0
	for turn := range 3 {
		msgs = append(msgs, tokenizer.Message{Role: "user", Content: fmt.Sprintf("Question %d: %s", turn, strings.Repeat("why? ", 1+turn))})
		ids, pl, err := tok.EncodeMessages(msgs, len(msgs)-1)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := generate(t, m, none, ids, pl, o)
		got, info := generate(t, m, meth, ids, pl, o)
		if !slices.Equal(got.Canvas, want.Canvas) {
			t.Errorf("turn %d: with the store %v\nnone %v", turn, got.Answer, want.Answer)
		}
		if turn > 0 && (info.HitTokens < prevStored || info.HitTokens == 0) {
			t.Errorf("turn %d: %d prefix tokens from the store, want the earlier turns' %d at least", turn, info.HitTokens, prevStored)
		}
		msgs = append(msgs, tokenizer.Message{Role: "assistant", Content: m.AnswerText(got.Answer)})
		answered, err := tok.EncodeConversation(context.Background(), msgs, false)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := StorePrefix(m.Network, meth, answered, ""); err != nil {
			t.Fatal(err)
		}
		prevStored = len(answered) / B * B
		// The next turn's prompt starts with this turn's answered
		// conversation, whose full blocks are now stored.
		next, _, _ := tok.EncodeMessages(append(slices.Clone(msgs), tokenizer.Message{Role: "user", Content: "x"}), len(msgs))
		if !slices.Equal(next[:len(answered)], answered) {
			t.Fatalf("turn %d: the next turn does not start with the answered conversation", turn)
		}
	}
	// The blocks a request stored and those of the answered conversations'
	// fills keep K and V only: nothing reads a block-causal model's hidden
	// states, and the budget counts what is kept.
	store.mu.Lock()
	defer store.mu.Unlock()
	kv := int64(4 * B * 2 * m.Config.KVDim() * len(m.Blocks))
	for _, n := range store.nodes {
		if n.h != nil || len(n.k) != len(m.Blocks) || n.bytes != kv {
			t.Errorf("stored block: %d hidden-state layers, %d K layers, %d bytes; want 0, %d, %d", len(n.h), len(n.k), n.bytes, len(m.Blocks), kv)
		}
	}
	if len(store.nodes) == 0 || store.stats.Bytes != int64(len(store.nodes))*kv {
		t.Errorf("%d blocks stored, %d bytes counted", len(store.nodes), store.stats.Bytes)
	}
}

// The answer's committed blocks go into the block store as they become
// final, copied from the request's own K/V (no forward): the blocks of
// the answered canvas up to the last model block decoded, not that block
// (its K/V were last computed with masks in it), equal to what computing
// them from their tokens gives, and found by a next request whose prompt
// continues the answered canvas — which then answers as none does.
func TestExactBlockKeepsAnswers(t *testing.T) {
	const B = 8
	m, o, none := exactBlockBase(t, B)
	ids, pl := request(t, m, 0)
	for _, SB := range []int{B, 2 * B} {
		store := NewBlockStore(m.Backend, SB, 1<<30, true, nil)
		meth := mk(t, "exact-block", Options{Store: store, Fingerprint: m.Fingerprint})
		g, _ := generate(t, m, meth, ids, pl, o)
		final := (len(ids) + g.Decoded - 1) / B * B // rows before the last model block decoded
		nb := final / SB
		if nb <= len(ids)/SB {
			t.Fatalf("blocks of %d: the answer (%d slots decoded after %d prompt tokens) leaves no committed store block before its last", SB, g.Decoded, len(ids))
		}
		// Stored: the chain of the answered canvas through block nb-1, not
		// block nb (where the canvas holds it).
		chainOf := func(s *BlockStore, n int) []*blockNode {
			s.mu.Lock()
			defer s.mu.Unlock()
			c, _ := s.walk(PrefixID{Fingerprint: m.Fingerprint, Tokens: g.Canvas[:n*SB]}, n)
			return c
		}
		kept := chainOf(store, min(nb+1, len(g.Canvas)/SB))
		if len(kept) != nb {
			t.Errorf("blocks of %d: %d blocks of the answered canvas stored, want %d (every block before row %d)", SB, len(kept), nb, final)
		}
		// The same blocks computed from their tokens.
		fresh := NewBlockStore(m.Backend, SB, 1<<30, true, nil)
		if _, _, err := StorePrefix(m.Network, mk(t, "exact-block", Options{Store: fresh, Fingerprint: m.Fingerprint}), g.Canvas[:nb*SB], ""); err != nil {
			t.Fatal(err)
		}
		computed := chainOf(fresh, nb)
		for i := len(ids) / SB; i < min(len(kept), len(computed)); i++ {
			for l := range kept[i].k {
				if d := max(maxDiff(m.Backend, kept[i].k[l], computed[i].k[l]), maxDiff(m.Backend, kept[i].v[l], computed[i].v[l])); d > 1e-5 {
					t.Errorf("blocks of %d: kept block %d, layer %d differs from computing it by %g", SB, i, l, d)
				}
			}
		}
		store.releaseNodes(kept)
		fresh.releaseNodes(computed)
		// A next turn: the answered canvas's kept blocks and a question.
		next := append(slices.Clone(g.Canvas[:final]), ids[len(ids)-6:]...)
		want, _ := generate(t, m, none, next, len(next), o)
		got, info := generate(t, m, meth, next, len(next), o)
		if !slices.Equal(got.Canvas, want.Canvas) {
			t.Errorf("blocks of %d: next turn with the kept answer %v\nnone %v", SB, got.Answer, want.Answer)
		}
		if info.HitTokens < nb*SB {
			t.Errorf("blocks of %d: next turn served %d prompt tokens from the store, want the %d kept", SB, info.HitTokens, nb*SB)
		}
	}
}

// A forced chain-hash collision in the block store is never served: the
// colliding request computes its own blocks and answers as none does.
func TestExactBlockForcedCollision(t *testing.T) {
	old := blockKey
	blockKey = func(parent Key, _, _ string, _ []int32) Key { return parent + 1 }
	defer func() { blockKey = old }()
	const B = 8
	m, o, store, meth, none := exactBlockPair(t, B)
	var seen [][]int32
	for i := range 2 { // two system messages, every block on the same keys
		ids, pl := request(t, m, i)
		want, _ := generate(t, m, none, ids, pl, o)
		got, info := generate(t, m, meth, ids, pl, o)
		if !slices.Equal(got.Canvas, want.Canvas) {
			t.Errorf("request %d: %v\nnone %v", i, got.Answer, want.Answer)
		}
		// Only the blocks it really shares with an earlier prefix (the
		// chat template's header) are served.
		shared := 0
		for _, e := range seen {
			shared = max(shared, commonPrefix(e, ids[:pl])/B*B)
		}
		seen = append(seen, ids[:pl])
		if info.HitTokens != shared {
			t.Errorf("request %d: served %d prefix tokens from the store, shares %d with earlier prefixes", i, info.HitTokens, shared)
		}
	}
	if st := store.Stats(); st.Collisions == 0 {
		t.Errorf("no collision counted: %+v", st)
	}
}

// The exact cache refuses a bidirectional model and a block store whose
// blocks are not whole model blocks, with errors that say so.
func TestExactBlockRefuses(t *testing.T) {
	bi := loadTiny(t)
	ids, pl := request(t, bi, 0)
	o := sample.GenOptions{Regime: regime.Regime{GenLength: 16, Steps: 8, BlockLength: 8}}
	meth := mk(t, "exact-block", Options{})
	if err := CheckModel(meth, bi.Config); err == nil || !strings.Contains(err.Error(), "block-causal") {
		t.Errorf("bidirectional model: CheckModel %v", err)
	}
	if _, err := Run(context.Background(), bi.Network, meth, Request{Prompt: ids, PrefixLen: pl}, o); err == nil || !strings.Contains(err.Error(), "bidirectional") {
		t.Errorf("bidirectional model: Run %v", err)
	}
	const B = 8
	m := loadBlockTiny(t, B)
	half := mk(t, "exact-block", Options{Store: NewBlockStore(m.Backend, B/2, 1<<30, true, nil)})
	if _, err := Run(context.Background(), m.Network, half, Request{Prompt: ids, PrefixLen: pl}, o); err == nil || !strings.Contains(err.Error(), "--store-blocks 8") {
		t.Errorf("store blocks of B/2: %v", err)
	}
	if err := CheckModel(mk(t, "none", Options{}), bi.Config); err != nil {
		t.Errorf("none refuses a model: %v", err)
	}
}

// On a block-causal model every method either serves requests (block
// decoding feeds each step the canvas up to the current block's end) or
// refuses the model up front with a reason; none fails mid-request:
// with model blocks shorter than the gen length, equal to it and longer
// (the block methods' own length, 32, clamped to the gen length, is not
// the model's block in the first and last).
func TestEveryMethodServesOrRefusesBlockCausal(t *testing.T) {
	for _, B := range []int{8, 16, 32} {
		t.Run(fmt.Sprint("B=", B), func(t *testing.T) { everyMethodServesOrRefuses(t, B) })
	}
}

func everyMethodServesOrRefuses(t *testing.T, B int) {
	m := loadBlockTiny(t, B)
	ids, pl := request(t, m, 0)
	o, gen := everyMethodOptions(m), sample.BlockDefaults(m.Config, sample.GenOptions{Regime: regime.Regime{GenLength: 16, Steps: 16}}) // as engine.Model.GenOptions settles them
	for _, name := range Names() {
		if name == "table" { // dispatches to the others
			continue
		}
		t.Run(name, func(t *testing.T) {
			meth := mk(t, name, o)
			if err := CheckModel(meth, m.Config); err != nil {
				if !strings.Contains(err.Error(), "block-causal") {
					t.Errorf("refusal does not say why: %v", err)
				}
				return
			}
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("accepted the model, then panicked mid-request: %v", r)
				}
			}()
			res, err := Run(context.Background(), m.Network, meth, Request{Prompt: ids, PrefixLen: pl}, gen)
			if err != nil {
				t.Fatalf("accepted the model, then failed mid-request: %v", err)
			}
			if slices.Contains(res.Answer, int32(m.Config.MaskTokenID)) {
				t.Errorf("answer still masked: %v", res.Answer)
			}
		})
	}
}

// The dual cache on a block-causal model: a --dual-block shorter than the
// model's block is refused up front (it would fail every request whose
// answer is one model block); one at least as long serves.
func TestBlockDualBlockOnBlockCausal(t *testing.T) {
	m := loadBlockTiny(t, 16)
	ids, pl := request(t, m, 0)
	for _, n := range []int{8, 16, 32} {
		o := DefaultOptions()
		o.Block.Length = n
		meth := mk(t, "block", o)
		err := CheckModel(meth, m.Config)
		if n < 16 {
			if err == nil || !strings.Contains(err.Error(), "--dual-block 16") {
				t.Errorf("--dual-block %d on blocks of 16: %v, want a refusal naming --dual-block 16", n, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("--dual-block %d on blocks of 16: %v", n, err)
		}
		if _, err := Run(context.Background(), m.Network, meth, Request{Prompt: ids, PrefixLen: pl}, sample.BlockDefaults(m.Config, sample.GenOptions{Regime: regime.Regime{GenLength: 16, Steps: 16}})); err != nil {
			t.Errorf("--dual-block %d, gen length 16 on blocks of 16: %v", n, err)
		}
	}
}

// Requests sharing a prefix that arrive together compute it once: while
// the first one's first step computes the prefix's blocks (it claimed them
// in the store), a second request with the same system message waits in
// Begin, then serves them from the store; a request whose prefix claim
// ends unstored (its generation failed) lets the waiting one compute them.
// The answers are none's.
func TestExactBlockConcurrentSharedPrefix(t *testing.T) {
	const B = 8
	m, o, none := exactBlockBase(t, B)
	ids0, pl := request(t, m, 0)
	ids3, pl3 := request(t, m, 3) // the same system message, another question
	if pl3 != pl || commonPrefix(ids0, ids3) < pl || pl < B {
		t.Fatalf("requests 0 and 3 do not share a prefix of a full block")
	}
	want3, _ := generate(t, m, none, ids3, pl, o)
	for _, firstFails := range []bool{false, true} {
		store := NewBlockStore(m.Backend, B, 1<<30, true, nil)
		meth := mk(t, "exact-block", Options{Store: store, Fingerprint: m.Fingerprint})
		// The first request stops at its first forward until released
		// (failing it then when firstFails).
		inFirst, release := make(chan struct{}), make(chan struct{})
		var once sync.Once
		o0 := o
		o0.Forward = func(in model.Input, p model.Plan) (*model.Output, error) {
			once.Do(func() { close(inFirst); <-release })
			if firstFails {
				return nil, errors.New("the first request's forward failed")
			}
			return m.Forward(in, p)
		}
		firstDone := make(chan error, 1)
		go func() {
			_, err := sample.Generate(context.Background(), m.Network, ids0, pl, o0, meth.Planner(m.Network, "", nil))
			firstDone <- err
		}()
		<-inFirst
		var info Info
		secondForward := make(chan struct{})
		var twice sync.Once
		o3 := o
		o3.Forward = func(in model.Input, p model.Plan) (*model.Output, error) {
			twice.Do(func() { close(secondForward) })
			return m.Forward(in, p)
		}
		type result struct {
			g   *sample.Generation
			err error
		}
		second := make(chan result, 1)
		go func() {
			g, err := sample.Generate(context.Background(), m.Network, ids3, pl, o3, meth.Planner(m.Network, "", &info))
			second <- result{g, err}
		}()
		select {
		case <-secondForward:
			t.Fatalf("firstFails %v: the second request ran a forward while the first was computing the shared prefix", firstFails)
		case <-time.After(50 * time.Millisecond):
		}
		close(release)
		if err := <-firstDone; (err != nil) != firstFails {
			t.Fatalf("firstFails %v: the first request: %v", firstFails, err)
		}
		r := <-second
		if r.err != nil {
			t.Fatal(r.err)
		}
		if !slices.Equal(r.g.Canvas, want3.Canvas) {
			t.Errorf("firstFails %v: %v\nnone %v", firstFails, r.g.Answer, want3.Answer)
		}
		// The first request stores every full block of its prompt: those
		// the second shares with it are served (its prefix's tokens counted).
		hit := min(commonPrefix(ids0, ids3)/B*B, pl)
		if firstFails {
			hit = 0
		}
		if info.HitTokens != hit || !firstFails && hit < pl/B*B {
			t.Errorf("firstFails %v: %d prefix tokens from the store, want %d", firstFails, info.HitTokens, hit)
		}
		store.mu.Lock()
		if len(store.filling) != 0 {
			t.Errorf("firstFails %v: %d claims left in the store", firstFails, len(store.filling))
		}
		store.mu.Unlock()
	}
}
