package cache

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/dlmcache/dlmcache/lut"
	"github.com/dlmcache/dlmcache/model/sample"
	"github.com/dlmcache/dlmcache/regime"
)

// Each token-level cache at its degenerate setting — a full forward every
// step, or every row selected — reproduces no caching token for token.
func TestDegenerateSettingsEqualNone(t *testing.T) {
	m := loadTiny(t)
	ids, pl := request(t, m, 3)
	o := sample.GenOptions{Regime: regime.Regime{GenLength: 16, Steps: 8, BlockLength: 8}}
	want, _ := generate(t, m, mk(t, "none", Options{}), ids, pl, o)
	d := DefaultOptions()
	for _, tc := range []struct {
		name string
		o    func(*Options)
	}{
		{"d2cache", func(o *Options) { o.D2.P = 1 }},
		{"dllm-cache", func(o *Options) { o.DLLM.Kp, o.DLLM.Kr = 1, 1 }},
		{"freecache", func(o *Options) { o.Free.Refresh = 1 }},
	} {
		opts := d
		tc.o(&opts)
		got, _ := generate(t, m, mk(t, tc.name, opts), ids, pl, o)
		if !slices.Equal(got.Canvas, want.Canvas) {
			t.Errorf("%s degenerate: %v\nnone %v", tc.name, got.Canvas[len(ids):], want.Canvas[len(ids):])
		}
		if got.RowsComputed != want.RowsComputed {
			t.Errorf("%s degenerate: %d rows, none %d", tc.name, got.RowsComputed, want.RowsComputed)
		}
	}
}

// Exact row counts of the token-level caches on a schedule whose every
// step commits two tokens.
func TestTokenCachesRowsComputed(t *testing.T) {
	m, L, ids, pl, n := rowsRequest(t)
	d := DefaultOptions()
	oneBlock := sample.GenOptions{Regime: regime.Regime{GenLength: 16, Steps: 8}}
	twoBlocks := sample.GenOptions{Regime: regime.Regime{GenLength: 16, Steps: 8, BlockLength: 8}}

	// d2Cache without the rollout share: step 0 all rows; step i the
	// 16−2i masked slots (K = 32 covers them) and the two just decoded.
	d2 := d
	d2.D2.P = 0
	g, _ := generate(t, m, mk(t, "d2cache", d2), ids, pl, oneBlock)
	if want := L * (n + 70); g.RowsComputed != want {
		t.Errorf("d2cache, p 0: %d rows, want %d", g.RowsComputed, want)
	}
	// With the rollout share, more rows but fewer than none.
	g, _ = generate(t, m, mk(t, "d2cache", d), ids, pl, oneBlock)
	if g.RowsComputed <= L*(n+70) || g.RowsComputed >= 8*L*n {
		t.Errorf("d2cache, p 0.1: %d rows, want between %d and %d", g.RowsComputed, L*(n+70), 8*L*n)
	}

	// FreeCache, blocks of 8: step 0 all; block 0's steps the answer (16);
	// block 1's steps block 1 alone (8) — block 0 keeps the K/V of its last
	// step, as FlashDLM's code does, and is not computed again. The FLOPs
	// are each step's layers at its row count plus the head.
	g, _ = generate(t, m, mk(t, "freecache", d), ids, pl, twoBlocks)
	if want := L * (n + 3*16 + 4*8); g.RowsComputed != want {
		t.Errorf("freecache: %d rows, want %d", g.RowsComputed, want)
	}
	c := m.Config
	var flops float64
	for i, r := range []int{n, 16, 16, 16, 8, 8, 8, 8} {
		masked := 8 - 2*(i%4) // the block's masked slots get logits
		flops += float64(L)*c.LayerFLOPs(n, r) + c.HeadFLOPs(masked)
	}
	if math.Abs(g.FLOPs-flops) > 1e-6*flops {
		t.Errorf("freecache: %g FLOPs, want %g", g.FLOPs, flops)
	}
	// Under BiCache's shallow reuse at depth 2 the first step skips the
	// prefix rows of layers 1–2; nothing else changes.
	st := NewStore(m.Backend, 1<<30, FIFO)
	withTable := d
	withTable.Store, withTable.Table, withTable.Fingerprint = st, table(L, 2), m.Fingerprint
	g, info := generate(t, m, mk(t, "bicache+freecache", withTable), ids, pl, twoBlocks)
	if want := L*(n+3*16+4*8) - 2*pl; g.RowsComputed != want || info.Depth != 2 {
		t.Errorf("bicache+freecache: %d rows (depth %d), want %d", g.RowsComputed, info.Depth, want)
	}

	// dLLM-Cache, Kp 50, Kr 4, ρ 0.25: step 0 all rows, step 4 the
	// response; the others the response through layer 0, then at every
	// layer the 4 response rows whose V changed most (the others carried,
	// the block's masked slots among them or not).
	dl := d
	dl.DLLM = DLLMOptions{Kp: 50, Kr: 4, Rho: 0.25}
	g, _ = generate(t, m, mk(t, "dllm-cache", dl), ids, pl, oneBlock)
	want := L*n + L*16 + 6*(16+(L-1)*4)
	if g.RowsComputed != want {
		t.Errorf("dllm-cache: %d rows, want %d", g.RowsComputed, want)
	}
}

// Elastic-Cache's trigger at its extremes: a tiny threshold never fires
// after the first step (bicache with R beyond the steps); one above 1
// fires at every comparison, so every step from the third refreshes the
// deep layers' prefix rows (the second has no reference yet to drift from).
func TestDriftTriggerExtremes(t *testing.T) {
	m := loadTiny(t)
	L := len(m.Blocks)
	ids, pl := request(t, m, 2)
	o := sample.GenOptions{Regime: regime.Regime{GenLength: 16, Steps: 8}}
	opts := func(refresh int, drift float64) Options {
		return Options{Store: NewStore(m.Backend, 1<<30, FIFO), Table: table(L, 2), Fingerprint: m.Fingerprint, BiCache: BiCacheOptions{Refresh: refresh, Drift: drift}}
	}
	never, ni := generate(t, m, mk(t, "bicache", opts(1000, 0)), ids, pl, o)
	got, gi := generate(t, m, mk(t, "bicache", opts(0, 1e-9)), ids, pl, o)
	if !slices.Equal(got.Canvas, never.Canvas) || got.RowsComputed != never.RowsComputed || gi.Refreshes != 1 || ni.Refreshes != 1 {
		t.Errorf("drift 1e-9: %d rows, %d refreshes; R 1000: %d rows, %d refreshes", got.RowsComputed, gi.Refreshes, never.RowsComputed, ni.Refreshes)
	}
	got, gi = generate(t, m, mk(t, "bicache", opts(0, 2)), ids, pl, o)
	if want := never.RowsComputed + 6*(L-2)*pl; got.RowsComputed != want || gi.Refreshes != 7 {
		t.Errorf("drift 2: %d rows, %d refreshes; want %d rows, 7 refreshes", got.RowsComputed, gi.Refreshes, want)
	}
}

// Run is Generate under the method's own options: block methods decode in
// blocks with the threshold rule, and the info comes back.
func TestRun(t *testing.T) {
	m := loadTiny(t)
	ids, pl := request(t, m, 0)
	o, gen := everyMethodOptions(m), sample.GenOptions{Regime: regime.Regime{GenLength: 16, Steps: 8}}
	for _, name := range Names() {
		if name == "table" { // needs a table that chooses: TestTableMethodDispatches
			continue
		}
		meth := mk(t, name, o)
		if CheckModel(meth, m.Config) != nil {
			continue // exact-block: block-causal models (exactblock_test.go)
		}
		if g, h := meth.Gen(meth.Gen(gen)), meth.Gen(gen); g.BlockLength != h.BlockLength || g.Steps != h.Steps || g.Decoder != h.Decoder {
			t.Errorf("%s: Gen is not idempotent", name)
		}
		res, err := Run(context.Background(), m.Network, meth, Request{Prompt: ids, PrefixLen: pl}, gen)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if slices.Contains(res.Answer, int32(m.Config.MaskTokenID)) {
			t.Errorf("%s: answer still masked: %v", name, res.Answer)
		}
		if res.Info.PrefixToken != pl && name != "none" && name != "block" && name != "d2cache" && name != "dllm-cache" && name != "freecache" {
			t.Errorf("%s: info %+v", name, res.Info)
		}
		if name != "none" && res.RowsComputed >= res.RowsFull {
			t.Errorf("%s: computed %d of %d rows", name, res.RowsComputed, res.RowsFull)
		}
	}
}

// Block methods decode in blocks of Options.Block.Length tokens (--dual-block)
// when the regime has one block, shrunk to a divisor of the gen length,
// with at least one step per block; block adds the threshold decoder,
// freecache keeps the schedule's.
func TestBlockMethodsGen(t *testing.T) {
	for _, tc := range []struct {
		dual, gen, steps, wantBlock, wantSteps int
	}{
		{32, 16, 8, 16, 8},
		{8, 16, 8, 8, 8},
		{6, 16, 8, 4, 8}, // 6 does not divide 16: 4
		{8, 16, 1, 8, 2},
		{0, 64, 32, 32, 32}, // 0: Fast-dLLM's 32
	} {
		for _, name := range []string{"block", "freecache"} {
			o := mk(t, name, Options{Block: BlockOptions{Length: tc.dual, Threshold: 0.9}}).Gen(sample.GenOptions{Regime: regime.Regime{GenLength: tc.gen, Steps: tc.steps}})
			if o.BlockLength != tc.wantBlock || o.Steps != tc.wantSteps {
				t.Errorf("%s: dual %d gen %d steps %d: block %d steps %d, want %d and %d", name, tc.dual, tc.gen, tc.steps, o.BlockLength, o.Steps, tc.wantBlock, tc.wantSteps)
			}
			if _, thr := o.Decoder.(sample.Threshold); thr != (name == "block") {
				t.Errorf("%s: decoder %T", name, o.Decoder)
			}
		}
	}
}

// d2Cache's importance — the column sums of the attention rollout — from
// the vector chain equals the dense rollout product.
func TestRolloutImportance(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const n, L = 7, 4
	p := &d2Planner{n: n, L: L, importance: make([]float64, n)}
	R := make([][]float64, n) // dense rollout, identity at first
	for i := range R {
		R[i] = make([]float64, n)
		R[i][i] = 1
	}
	for l := 0; l < L; l++ {
		var computed []int32
		for i := 0; i < n; i++ {
			if l == 0 || rng.IntN(2) == 0 {
				computed = append(computed, int32(i))
			}
		}
		probs := make([]float32, len(computed)*n)
		for i := range computed {
			var s float32
			for j := 0; j < n; j++ {
				probs[i*n+j] = rng.Float32()
				s += probs[i*n+j]
			}
			for j := 0; j < n; j++ {
				probs[i*n+j] /= s
			}
		}
		next := make([][]float64, n)
		for i := range next {
			next[i] = slices.Clone(R[i])
		}
		for ci, pos := range computed {
			for j := 0; j < n; j++ {
				var s float64
				for k := 0; k < n; k++ {
					m := float64(probs[ci*n+k]) / 2
					if k == int(pos) {
						m += 0.5
					}
					s += m * R[k][j]
				}
				next[pos][j] = s
			}
		}
		R = next
		p.ObserveAttention(l, computed, probs)
	}
	for j := 0; j < n; j++ {
		var want float64
		for i := 0; i < n; i++ {
			want += R[i][j]
		}
		if math.Abs(p.importance[j]-want) > 1e-5 {
			t.Errorf("importance[%d] = %g, dense rollout %g", j, p.importance[j], want)
		}
	}
}

// Every table method, every deep source, every depth (0, inside, all
// layers) and both stores: a request runs to the end with every slot
// decoded.
func TestEveryMethodSourceAndDepth(t *testing.T) {
	m := loadTiny(t)
	L := len(m.Blocks)
	ids, pl := request(t, m, 2)
	gen := sample.GenOptions{Regime: regime.Regime{GenLength: 16, Steps: 8, BlockLength: 8}}
	for _, name := range Names() {
		if name == "table" { // needs a table that chooses: TestTableMethodDispatches
			continue
		}
		for _, src := range []DeepSource{SourceStore, SourceRecompute, SourceRequest} {
			for _, d := range []int{0, 1, L} {
				for _, blocks := range []bool{false, true} {
					o := DefaultOptions()
					o.Table, o.DeepSource, o.Fingerprint = table(L, d), src, m.Fingerprint
					o.Store = NewStore(m.Backend, 1<<30, FIFO)
					if blocks {
						o.Store = NewBlockStore(m.Backend, 8, 1<<30, true, nil)
					}
					meth := mk(t, name, o)
					if CheckModel(meth, m.Config) != nil {
						continue // exact-block: block-causal models (exactblock_test.go)
					}
					res, err := Run(context.Background(), m.Network, meth, Request{Prompt: ids, PrefixLen: pl}, gen)
					if err != nil {
						t.Errorf("%s, %s source, depth %d, blocks %v: %v", name, src, d, blocks, err)
						continue
					}
					if slices.Contains(res.Answer, int32(m.Config.MaskTokenID)) {
						t.Errorf("%s, %s source, depth %d, blocks %v: answer still masked", name, src, d, blocks)
					}
				}
			}
		}
	}
}

// The decoder is a choice of its own: "NAME@DECODER" puts any method under
// any decoder — none with threshold decoding (every row, every step, fewer
// steps), the dual cache on the schedule — and names it so.
func TestMethodUnderAnyDecoder(t *testing.T) {
	m := loadTiny(t)
	ids, pl := request(t, m, 2)
	o := sample.GenOptions{Regime: regime.Regime{GenLength: 16, Steps: 16, BlockLength: 8}}
	d := DefaultOptions()
	none, _ := generate(t, m, mk(t, "none", d), ids, pl, o)

	thr := mk(t, "none@threshold:0.5", d)
	if thr.Name() != "none@threshold:0.5" {
		t.Errorf("name %q", thr.Name())
	}
	if g := thr.Gen(o); g.Decoder != (sample.Threshold{T: 0.5}) || Decoding(thr, o).String() != "threshold:0.5" {
		t.Errorf("none@threshold:0.5 decodes with %v", g.Decoder)
	}
	got, _ := generate(t, m, thr, ids, pl, o)
	if got.RowsComputed != got.RowsFull {
		t.Errorf("none under threshold decoding skipped rows: %d of %d", got.RowsComputed, got.RowsFull)
	}
	if got.Steps > none.Steps {
		t.Errorf("threshold decoding took %d steps, the schedule %d", got.Steps, none.Steps)
	}

	sched := mk(t, "block@schedule", d)
	if g := sched.Gen(o); g.Decoder != nil {
		t.Errorf("block@schedule decodes with %T", g.Decoder)
	}
	if _, thr := mk(t, "block", d).Gen(o).Decoder.(sample.Threshold); !thr {
		t.Errorf("block lost its own threshold decoder")
	}
	bs, _ := generate(t, m, sched, ids, pl, o)
	if bs.Steps != o.Steps {
		t.Errorf("block@schedule took %d steps, want the schedule's %d", bs.Steps, o.Steps)
	}
	// Options.Decoding does what the spec does.
	d.Decoding = sample.Decoding{Kind: sample.DecodeThreshold, T: 0.5}
	if n := mk(t, "d2cache", d).Name(); n != "d2cache@threshold:0.5" {
		t.Errorf("Options.Decoding: name %q", n)
	}
	for _, bad := range []string{"none@", "none@fast", "nope@schedule", "none@threshold:2"} {
		if _, err := New(bad, DefaultOptions()); err == nil {
			t.Errorf("%q built", bad)
		}
	}
}

// The table method serves each request with its bin's and class's choice,
// every chosen method on the one shared store.
func TestTableMethodDispatches(t *testing.T) {
	m := loadTiny(t)
	ids, pl := request(t, m, 2)
	tab := &lut.Table{Format: lut.Format, Model: lut.ModelID{NLayers: len(m.Blocks), Fingerprint: m.Fingerprint}, Tau: 1,
		Classes: []lut.Class{{Name: "short", MaxGen: 8}, {Name: "long"}},
		Bins: []lut.Bin{{Lo: 0, Hi: 1, Choices: []*lut.Choice{
			{Class: "short", Setting: lut.Setting{Method: "none", Decoder: "threshold:0.5"}},
			{Class: "long", Setting: lut.Setting{Method: "bicache", Decoder: "schedule", Knobs: map[string]float64{"depth": 1}, Source: "store"}},
		}}}}
	o := DefaultOptions()
	o.Table, o.Fingerprint, o.BiCache.Refresh = tab, m.Fingerprint, 2
	o.Store = NewStore(m.Backend, 1<<30, FIFO)
	meth := mk(t, "table", o)
	short := sample.GenOptions{Regime: regime.Regime{GenLength: 8, Steps: 8, BlockLength: 8}}
	long := sample.GenOptions{Regime: regime.Regime{GenLength: 16, Steps: 8, BlockLength: 8}}
	if got, _ := Choose(meth, len(ids), pl, short); got.Name() != "none@threshold:0.5" {
		got := got.Name()
		t.Errorf("short request served by %s", got)
	}
	got, _ := Choose(meth, len(ids), pl, long)
	if got.Name() != "bicache@schedule" || StoreOf(got) != o.Store {
		t.Errorf("long request served by %s (store shared: %v)", got.Name(), StoreOf(got) == o.Store)
	}
	for range 2 {
		res, err := Run(context.Background(), m.Network, meth, Request{Prompt: ids, PrefixLen: pl}, long)
		if err != nil {
			t.Fatal(err)
		}
		if res.Info.Depth != 1 {
			t.Errorf("long request at depth %d, want the setting's 1", res.Info.Depth)
		}
	}
	if st := o.Store.Stats(); st.HitTokens != int64(pl) {
		t.Errorf("the second request found %d of its %d prefix tokens in the shared store", st.HitTokens, pl)
	}
	// A table without choices is refused.
	o.Table = table(len(m.Blocks), 1)
	if _, err := New("table", o); err == nil {
		t.Error("the table method took a table that chooses nothing")
	}
}

// Settings round-trip through their text form and are checked against the
// method's knobs.
func TestParseSetting(t *testing.T) {
	for _, s := range []string{"none@threshold:0.9", "bicache@schedule depth=2 source=store", "d2cache@threshold:0.8 d2-k=16 d2-p=0.2"} {
		st, err := ParseSetting(s)
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		if st.String() != s {
			t.Errorf("%s reads back as %s", s, st)
		}
	}
	if st, _ := ParseSetting("block"); st.Decoder != "threshold:0.9" {
		t.Errorf("block's own decoder: %q", st.Decoder)
	}
	// A setting without a decoder names the method's own, which the
	// method says (Gen), not a list of names.
	for _, name := range Names() {
		want := "schedule"
		if name == "block" || name == "bicache+block" {
			want = "threshold:0.9"
		}
		setting := name
		if spec, _ := Lookup(name); slices.Contains(KnobNames(spec), "depth") {
			setting += " depth=1" // the bicache family needs its depth
		}
		if st, err := ParseSetting(setting); name != "table" && (err != nil || st.Decoder != want) {
			t.Errorf("%s's own decoder: %q (%v), want %q", setting, st.Decoder, err, want)
		}
	}
	for _, bad := range []string{"", "nope", "none@x", "d2cache depth=1", "bicache depth=-1", "bicache depth=1.5", "d2cache d2-p=2", "bicache source=disk", "bicache depth"} {
		if _, err := ParseSetting(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	if len(DefaultGrid()) < 8 {
		t.Errorf("default grid: %v", DefaultGrid())
	}
}

// A method under another decoder keeps what it shares and what it
// refuses: its store, its table and source, and its model check.
func TestDecodedKeepsOptionalInterfaces(t *testing.T) {
	m := loadTiny(t)
	L := len(m.Blocks)
	o := DefaultOptions()
	o.Store, o.Table, o.Fingerprint = NewStore(m.Backend, 1<<30, FIFO), table(L, 1), m.Fingerprint
	bi := mk(t, "bicache@threshold:0.9", o)
	if StoreOf(bi) != o.Store || TableOf(bi) != o.Table || SourceOf(bi) != "store" {
		t.Errorf("bicache@threshold:0.9: store %v table %v source %q", StoreOf(bi), TableOf(bi), SourceOf(bi))
	}
	if StoreOf(mk(t, "none@schedule", o)) != nil || TableOf(mk(t, "block", o)) != nil {
		t.Error("a method without a store or table reports one")
	}
	if err := CheckModel(mk(t, "exact-block@schedule", o), m.Config); err == nil {
		t.Error("exact-block@schedule accepts a bidirectional model")
	}
}

// A table whose choices cannot serve the model is refused when the method
// is checked against it (serve's start-up), naming the bin: exact-block
// for a bidirectional model, a depth past the layers, a regime the
// schedule rules refuse.
func TestTableMethodCheckedAgainstTheModel(t *testing.T) {
	m := loadTiny(t)
	mkTable := func(set lut.Setting, gen, steps, block int) *lut.Table {
		return &lut.Table{Format: lut.Format, Model: lut.ModelID{NLayers: len(m.Blocks), Fingerprint: m.Fingerprint}, Tau: 1,
			Regime: regime.Regime{GenLength: gen, Steps: steps, BlockLength: block}, Classes: []lut.Class{{Name: "all"}},
			Bins: []lut.Bin{{Lo: 0, Hi: 0.5}, {Lo: 0.5, Hi: 1, Choices: []*lut.Choice{{Class: "all", Setting: set}}}}}
	}
	bi := func(depth float64) lut.Setting {
		return lut.Setting{Method: "bicache", Decoder: "schedule", Knobs: map[string]float64{"depth": depth}, Source: "store"}
	}
	for _, c := range []struct {
		tab  *lut.Table
		want string
	}{
		{mkTable(lut.Setting{Method: "exact-block", Decoder: "schedule"}, 0, 0, 0), "bin [0.5, 1), class all"},
		{mkTable(bi(99), 0, 0, 0), "depth=99: the model has"},
		{mkTable(bi(1), 16, 3, 8), "the table's regime"},
	} {
		o := DefaultOptions()
		o.Table, o.Fingerprint = c.tab, m.Fingerprint
		o.Store = NewStore(m.Backend, 1<<30, FIFO)
		meth, err := New("table", o)
		if err == nil {
			err = CheckModel(meth, m.Config)
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error with %q", c.tab.Bins[1].Choices[0].Setting, err, c.want)
		}
	}
	o := DefaultOptions()
	o.Table, o.Fingerprint, o.Store = mkTable(bi(2), 16, 8, 8), m.Fingerprint, NewStore(m.Backend, 1<<30, FIFO)
	if err := CheckModel(mk(t, "table", o), m.Config); err != nil {
		t.Errorf("a table the model can serve: %v", err)
	}
}

// d2Cache recomputes exactly the k masked slots of highest certainty prior
// per step, whatever the block length — not every masked slot of the
// current block — and the decoder chooses among them.
func TestD2CacheTopK(t *testing.T) {
	m, L, ids, pl, n := rowsRequest(t)
	d := DefaultOptions()
	d.D2.K, d.D2.P = 4, 0
	oneBlock := sample.GenOptions{Regime: regime.Regime{GenLength: 16, Steps: 8}}
	// Step 0 all rows; steps 1–6 the 4 selected and the 2 just decoded;
	// step 7 the last 2 masked and the 2 just decoded.
	g, _ := generate(t, m, mk(t, "d2cache", d), ids, pl, oneBlock)
	if want := L * (n + 6*6 + 4); g.RowsComputed != want {
		t.Errorf("d2cache k 4, p 0: %d rows, want %d (every masked slot of the block: %d)", g.RowsComputed, want, L*(n+70))
	}
}

// d2Cache's rollout selection keeps the rows of highest importance while
// their cumulative share stays at or below p, and at least the first: not
// the row that crosses p.
func TestD2CacheNucleus(t *testing.T) {
	const n = 6
	mask := int32(99)
	canvas := []int32{1, 2, 3, 4, mask, mask}
	for _, tc := range []struct {
		p    float64
		want []int32
	}{
		{0, []int32{4}},
		{0.3, []int32{0, 4}},        // 0.5 alone crosses 0.3: the first is kept anyway
		{0.6, []int32{0, 4}},        // 0.5 ≤ 0.6, 0.8 > 0.6
		{0.8, []int32{0, 1, 4}},     // 0.8 ≤ 0.8
		{0.95, []int32{0, 1, 2, 4}}, // 0.9 ≤ 0.95, 1.0 > 0.95
		{1, []int32{0, 1, 2, 3, 4, 5}},
	} {
		p := &d2Planner{o: D2Options{K: 1, P: tc.p, Sigma: 10}, mask: mask, n: n, P: 4,
			conf: []float64{0, 0, 0, 0, 0.9, 0.1}, importance: []float64{0.5, 0.3, 0.1, 0.1, 0, 0}}
		s := &sample.Step{Index: 1, BlockStart: 4, BlockEnd: 6, Canvas: canvas, PromptLen: 4, Len: n}
		if got := p.selectRows(s); !slices.Equal(got, tc.want) {
			t.Errorf("p %g: rows %v, want %v", tc.p, got, tc.want)
		}
		if got := p.cand; !slices.Equal(got, []int32{4}) {
			t.Errorf("p %g: candidates %v, want [4] (k 1)", tc.p, got)
		}
	}
}
