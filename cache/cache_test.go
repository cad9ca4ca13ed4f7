package cache

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/dlmcache/dlmcache/internal/testmodel"
	"github.com/dlmcache/dlmcache/lut"
	"github.com/dlmcache/dlmcache/model/backend"
	"github.com/dlmcache/dlmcache/model/cpu"
	"github.com/dlmcache/dlmcache/model/load"
	"github.com/dlmcache/dlmcache/model/sample"
	"github.com/dlmcache/dlmcache/regime"
)

func loadTiny(t testing.TB) *load.Model {
	t.Helper()
	return testmodel.Load(t, "tiny-f32")
}

// fakeEntry is an entry of the given byte size.
// testID is a prefix of m tokens whose first token is k.
func testID(k, m int) PrefixID {
	t := make([]int32, m)
	if m > 0 {
		t[0] = int32(k)
	}
	return PrefixID{Fingerprint: "fp", Tokens: t}
}

func fakeEntry(b backend.Backend, tokens int, bytes int64) *Entry {
	return &Entry{Tokens: make([]int32, tokens), Bytes: bytes}
}

func TestStoreEviction(t *testing.T) {
	b := cpu.New(1)
	for _, tc := range []struct {
		policy Eviction
		touch  bool   // re-acquire key 1 before inserting key 4
		want   []bool // which of keys 1..4 remain
	}{
		{FIFO, true, []bool{false, true, true, true}},
		{LRU, true, []bool{true, false, true, true}},
	} {
		s := NewStore(b, 300, tc.policy)
		for k := 1; k <= 3; k++ {
			e, _, _ := s.Acquire(testID(k, 10), func() (*Entry, error) { return fakeEntry(b, 10, 100), nil })
			s.Release(e)
		}
		if tc.touch {
			e, hit, _ := s.Acquire(testID(1, 10), nil)
			if !hit {
				t.Fatal("key 1 not found")
			}
			s.Release(e)
		}
		e, _, _ := s.Acquire(testID(4, 10), func() (*Entry, error) { return fakeEntry(b, 10, 100), nil })
		s.Release(e)
		for k := 1; k <= 4; k++ {
			s.mu.Lock()
			_, ok := s.entries[keyOf(testID(k, 10))]
			s.mu.Unlock()
			if ok != tc.want[k-1] {
				t.Errorf("%s: key %d present %v, want %v", tc.policy, k, ok, tc.want[k-1])
			}
		}
		st := s.Stats()
		if st.Bytes > 300 || st.Evictions != 1 || st.QueryTokens != 50 || st.HitTokens != 10 || st.EvictedTokens != 10 {
			t.Errorf("%s: stats %+v", tc.policy, st)
		}
	}
	// A prefix bigger than the budget is computed but not stored.
	s := NewStore(b, 50, FIFO)
	e, _, err := s.Acquire(testID(1, 5), func() (*Entry, error) { return fakeEntry(b, 5, 100), nil })
	if err != nil || e == nil {
		t.Fatal(err)
	}
	s.Release(e)
	if st := s.Stats(); st.Entries != 0 || st.Uncacheable != 1 || st.Bytes != 0 {
		t.Errorf("oversized entry: %+v", st)
	}
	if _, err := ParseEviction("random"); err == nil {
		t.Error("ParseEviction(random): no error")
	}
}

func TestStoreComputesOnce(t *testing.T) {
	s := NewStore(cpu.New(1), 1<<20, LRU)
	var computed atomic.Int32
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < 16; i++ {
		wg.Go(func() {
			<-start
			e, _, err := s.Acquire(testID(7, 3), func() (*Entry, error) {
				computed.Add(1)
				return fakeEntry(nil, 3, 10), nil
			})
			if err != nil {
				t.Error(err)
				return
			}
			s.Release(e)
		})
	}
	close(start)
	wg.Wait()
	if n := computed.Load(); n != 1 {
		t.Errorf("prefix computed %d times, want once", n)
	}
	if st := s.Stats(); st.Queries != 16 || st.Hits != 15 || st.HitTokens != 45 {
		t.Errorf("stats %+v", st)
	}
	// A failed computation is not stored and is reported to the caller.
	if _, _, err := s.Acquire(testID(8, 3), func() (*Entry, error) { return nil, fmt.Errorf("boom") }); err == nil {
		t.Error("failed compute: no error")
	}
}

func TestPrefixKey(t *testing.T) {
	a := PrefixKey("fp", "", []int32{1, 2, 3})
	for _, other := range []Key{
		PrefixKey("fp2", "", []int32{1, 2, 3}),
		PrefixKey("fp", "tenant", []int32{1, 2, 3}),
		PrefixKey("fp", "", []int32{1, 2}),
		PrefixKey("f", "p", []int32{1, 2, 3}),
	} {
		if other == a {
			t.Errorf("key collision with %v", other)
		}
	}
	if PrefixKey("fp", "", []int32{1, 2, 3}) != a {
		t.Error("key not deterministic")
	}
}

// table gives every ratio depth d.
func table(L, d int) *lut.Table {
	t, _ := lut.Build(lut.ModelID{Name: "tiny", NLayers: L}, 0.97, []float64{0, 1}, []lut.Sample{{Ratio: 0.5, Depth: d}})
	return t
}

// everyMethodOptions lets every registered method build on m: a store, a
// table of depth 2, m's fingerprint.
func everyMethodOptions(m *load.Model) Options {
	o := DefaultOptions()
	o.Store, o.Table, o.Fingerprint = NewStore(m.Backend, 1<<30, FIFO), table(len(m.Blocks), 2), m.Fingerprint
	return o
}

func request(t testing.TB, m *load.Model, i int) ([]int32, int) {
	sys := fmt.Sprintf("You are assistant number %d. Follow the house rules: be brief, be kind.", i%3)
	ids, pl, err := m.Tokenizer.EncodeChat(sys, strings.Repeat("Tell me more. ", 1+i%4))
	if err != nil {
		t.Fatal(err)
	}
	return ids, pl
}

func generate(t testing.TB, m *load.Model, meth Method, ids []int32, prefix int, o sample.GenOptions) (*sample.Generation, Info) {
	t.Helper()
	var info Info
	g, err := sample.Generate(context.Background(), m.Network, ids, prefix, o, meth.Planner(m.Network, "", &info))
	if err != nil {
		t.Fatal(err)
	}
	return g, info
}

// BiCache at depth 1 refreshing every step (R = 1) with the recompute
// source: each refresh computes every row of every layer (the wrapper
// passes it through whole), so the answer is no caching's, while the
// prefix is still looked up in the store (depth 1, a miss). That reusing
// layer 1's prefix K/V is itself exact is held where no deeper layer needs
// the prefix rows' hidden state: on one layer (TestCachesExactOnOneLayer).
func TestBiCacheRefreshingEveryStepIsNone(t *testing.T) {
	m := loadTiny(t)
	L := len(m.Blocks)
	ids, pl := request(t, m, 0)
	o := sample.GenOptions{Regime: regime.Regime{GenLength: 16, Steps: 8, BlockLength: 8}}
	want, _ := generate(t, m, mk(t, "none", Options{}), ids, pl, o)
	for _, src := range []string{"recompute"} {
		meth := mk(t, "bicache", Options{Store: NewStore(m.Backend, 1<<30, FIFO), Table: table(L, 1), BiCache: BiCacheOptions{Refresh: 1}, DeepSource: DeepSource(src), Fingerprint: m.Fingerprint})
		got, info := generate(t, m, meth, ids, pl, o)
		if !reflect.DeepEqual(got.Canvas, want.Canvas) {
			t.Errorf("%s: bicache d=1 R=1 %v\nno cache %v", src, got.Canvas, want.Canvas)
		}
		if info.Depth != 1 || info.Hit {
			t.Errorf("%s: info %+v", src, info)
		}
	}
}

// rowsCase is what the row-accounting tests generate: tiny-f32's
// request 1 (ids, prefix length pl), 16 tokens in 8 steps.
func rowsCase(t *testing.T) (m *load.Model, ids []int32, pl int, o sample.GenOptions) {
	t.Helper()
	m = loadTiny(t)
	ids, pl = request(t, m, 1)
	return m, ids, pl, sample.GenOptions{Regime: regime.Regime{GenLength: 16, Steps: 8}}
}

// Row accounting shows what each method skips.
func TestMethodsRowsComputed(t *testing.T) {
	m, ids, pl, o := rowsCase(t)
	L, n := len(m.Blocks), len(ids)+o.GenLength
	store := NewStore(m.Backend, 1<<30, FIFO)
	for _, tc := range []struct {
		meth Method
		want int
	}{
		{mk(t, "none", Options{}), o.Steps * L * n},
		{mk(t, "prefix-all", Options{Store: store}), o.Steps * L * (n - pl)},
		{mk(t, "prefix-all", Options{Store: store, BiCache: BiCacheOptions{Refresh: 4}, DeepSource: "recompute"}), o.Steps * L * (n - pl)},
		// depth 1, R 4: steps 1 and 5 compute the deep layers' prefix rows.
		{mk(t, "bicache", Options{Store: store, Table: table(L, 1), BiCache: BiCacheOptions{Refresh: 4}}), o.Steps*L*(n-pl) + 2*(L-1)*pl},
		{mk(t, "bicache", Options{Store: store, Table: table(L, 1), BiCache: BiCacheOptions{Refresh: 4}, DeepSource: "recompute"}), o.Steps*L*(n-pl) + 2*L*pl},
	} {
		g, _ := generate(t, m, tc.meth, ids, pl, o)
		if g.RowsComputed != tc.want {
			t.Errorf("%s/%s: %d rows computed, want %d", tc.meth.Name(), SourceOf(tc.meth), g.RowsComputed, tc.want)
		}
		// FLOPs fall with the rows, but not quite in proportion: a
		// computed row costs the same as in a full forward (its attention
		// still reads all n keys), and the head's FLOPs stay.
		switch full := g.FLOPsFull; {
		case tc.meth.Name() == "none" && g.FLOPs != full:
			t.Errorf("none: %g FLOPs, want every row's %g", g.FLOPs, full)
		case tc.meth.Name() != "none" && !(g.FLOPs < full && g.FLOPs/full > float64(g.RowsComputed)/float64(g.RowsFull)):
			t.Errorf("%s/%s: FLOPs %g of %g (%.3f) against rows %.3f: want fewer than full, above the rows' fraction",
				tc.meth.Name(), SourceOf(tc.meth), g.FLOPs, full, g.FLOPs/full, float64(g.RowsComputed)/float64(g.RowsFull))
		}
	}
	if st := store.Stats(); st.Queries != 4 || st.Hits != 3 || st.HitTokens != int64(3*pl) {
		t.Errorf("store stats %+v", st)
	}
}

// With one step per block every step is a block start: the dual cache then
// recomputes everything and must match no caching.
func TestBlockCache(t *testing.T) {
	m := loadTiny(t)
	ids, pl := request(t, m, 2)
	o := sample.GenOptions{Regime: regime.Regime{GenLength: 16, Steps: 4, BlockLength: 4}}
	want, _ := generate(t, m, mk(t, "none", Options{}), ids, pl, o)
	got, _ := generate(t, m, mk(t, "block", Options{}), ids, pl, o)
	if !reflect.DeepEqual(got.Canvas, want.Canvas) {
		t.Errorf("block, one step per block: %v\nwant %v", got.Canvas, want.Canvas)
	}
	// With more steps per block, only the block's rows are computed inside it.
	o = sample.GenOptions{Regime: regime.Regime{GenLength: 16, Steps: 8, BlockLength: 8}}
	g, _ := generate(t, m, mk(t, "block", Options{}), ids, pl, o)
	n, L := len(ids)+16, len(m.Blocks)
	if want := 2*L*n + 6*L*8; g.RowsComputed != want {
		t.Errorf("block: %d rows computed, want %d", g.RowsComputed, want)
	}
	st := NewStore(m.Backend, 1<<30, FIFO)
	g, info := generate(t, m, mk(t, "bicache+block", Options{Store: st, Table: table(L, 2)}), ids, pl, o)
	if want := 2*(2*(n-pl)+(L-2)*n) + 6*L*8; g.RowsComputed != want || info.Depth != 2 {
		t.Errorf("bicache+block: %d rows computed (depth %d), want %d", g.RowsComputed, info.Depth, want)
	}
	// With the recompute source a block start computes every row: the
	// combination then produces block's answer, token for token.
	wantBlock, _ := generate(t, m, mk(t, "block", Options{}), ids, pl, o)
	g, info = generate(t, m, mk(t, "bicache+block", Options{Store: st, Table: table(L, 2), DeepSource: "recompute"}), ids, pl, o)
	if !reflect.DeepEqual(g.Canvas, wantBlock.Canvas) || info.Depth != 2 {
		t.Errorf("bicache+block, recompute: %v (depth %d)\nblock %v", g.Canvas, info.Depth, wantBlock.Canvas)
	}
	if want := 2*L*n + 6*L*8; g.RowsComputed != want {
		t.Errorf("bicache+block, recompute: %d rows computed, want %d", g.RowsComputed, want)
	}
	// With the request source only the first block start computes every
	// row; the second skips the prefix rows of layers 1..d. No store is
	// queried, so nothing is filled.
	queries := st.Stats().Queries
	g, info = generate(t, m, mk(t, "bicache+block", Options{Store: st, Table: table(L, 2), DeepSource: "request"}), ids, pl, o)
	if want := L*n + (2*(n-pl) + (L-2)*n) + 6*L*8; g.RowsComputed != want || info.Depth != 2 || info.Hit {
		t.Errorf("bicache+block, request: %d rows computed (info %+v), want %d", g.RowsComputed, info, want)
	}
	if q := st.Stats().Queries; q != queries {
		t.Errorf("bicache+block, request: store queried %d times", q-queries)
	}
}

// The request source of plain BiCache: step 1 computes every row and keeps
// the prefix's K/V of every layer and the hidden state entering layer d+1;
// refresh steps then skip the prefix rows of layers 1..d.
func TestBiCacheRequestSource(t *testing.T) {
	m, ids, pl, o := rowsCase(t)
	L, n := len(m.Blocks), len(ids)+o.GenLength
	meth := mk(t, "bicache", Options{Table: table(L, 1), BiCache: BiCacheOptions{Refresh: 4}, DeepSource: "request"})
	g, info := generate(t, m, meth, ids, pl, o)
	// step 1: everything; step 5: layer 1's suffix and the deep layers'
	// every row; the other six: the suffix only.
	if want := L*n + (n - pl) + (L-1)*n + 6*L*(n-pl); g.RowsComputed != want || info.Depth != 1 {
		t.Errorf("bicache, request: %d rows computed (info %+v), want %d", g.RowsComputed, info, want)
	}
	// With R = 1 at depth 1 every step recomputes the deep layers from the
	// hidden state entering layer 2 at step 1, which saw the canvas of step
	// 1 only: the answer may differ from no caching, but the request must
	// still decode every position.
	meth = mk(t, "bicache", Options{Table: table(L, 1), BiCache: BiCacheOptions{Refresh: 1}, DeepSource: "request"})
	g, _ = generate(t, m, meth, ids, pl, o)
	for i, id := range g.Canvas[len(ids):] {
		if id == int32(m.Config.MaskTokenID) {
			t.Errorf("position %d still masked", i)
		}
	}
}

func TestMethodValidate(t *testing.T) {
	s := NewStore(cpu.New(1), 1, FIFO)
	for _, tc := range []struct {
		name string
		o    Options
	}{
		{"nope", Options{}},
		{"prefix-all", Options{}},
		{"bicache", Options{Store: s}},
		{"bicache", Options{Store: s, Table: table(3, 1)}}, // refresh 0
		{"bicache", Options{Store: s, Table: table(3, 1), BiCache: BiCacheOptions{Refresh: 4}, DeepSource: "magic"}},
		{"bicache", Options{Table: table(3, 1), BiCache: BiCacheOptions{Refresh: 4}, DeepSource: "recompute"}}, // no store
		{"bicache", Options{Store: s, Table: table(3, 1), BiCache: BiCacheOptions{Refresh: 4, Drift: -1}}},
		{"bicache+block", Options{Store: s}}, // no table
		{"d2cache", Options{D2: D2Options{K: 0, P: 0.1, Sigma: 10}}},
		{"d2cache", Options{D2: D2Options{K: 32, P: 1.5, Sigma: 10}}},
		{"dllm-cache", Options{DLLM: DLLMOptions{Kp: 0, Kr: 2, Rho: 0.25}}},
		{"dllm-cache", Options{DLLM: DLLMOptions{Kp: 50, Kr: 2, Rho: 2}}},
		{"freecache", Options{Free: FreeOptions{Refresh: -1}}},
	} {
		if _, err := New(tc.name, tc.o); err == nil {
			t.Errorf("%s %+v: no error", tc.name, tc.o)
		}
	}
	// The request source keeps its rows in the request: no store needed.
	if _, err := New("bicache+block", Options{Table: table(3, 1), DeepSource: "request"}); err != nil {
		t.Errorf("bicache+block, request source, no store: %v", err)
	}
	// Every registered method builds with the defaults, a table and a store.
	o := DefaultOptions()
	o.Table, o.Store = table(3, 1), s
	for _, name := range Names() {
		if name == "table" { // needs a table that chooses: TestTableMethodDispatches
			continue
		}
		m, err := New(name, o)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if m.Name() != name {
			t.Errorf("New(%q).Name() = %q", name, m.Name())
		}
	}
}

// mk builds a method or fails the test.
func mk(t testing.TB, name string, o Options) Method {
	t.Helper()
	m, err := New(name, o)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// Many concurrent requests over a few shared prefixes and a store too small
// for all of them: no race, the budget holds, and every answer equals the
// one the same request gets alone. Requests do not share forward passes, so
// the arithmetic is identical and the comparison is exact.
func TestConcurrentRequests(t *testing.T) {
	m := loadTiny(t)
	L := len(m.Blocks)
	o := sample.GenOptions{Regime: regime.Regime{GenLength: 8, Steps: 4}}
	ids0, pl0 := request(t, m, 0)
	entryBytes := int64(4 * L * pl0 * (2*m.Config.KVDim() + m.Config.DModel))
	store := NewStore(m.Backend, entryBytes*3/2, LRU) // room for about one prefix
	meth := mk(t, "bicache", Options{Store: store, Table: table(L, 2), BiCache: BiCacheOptions{Refresh: 2}, Fingerprint: m.Fingerprint})
	const N = 24
	want := make([][]int32, N)
	for i := range want {
		ids, pl := request(t, m, i)
		g, _ := generate(t, m, meth, ids, pl, o)
		want[i] = g.Canvas
	}
	var wg sync.WaitGroup
	var maxBytes atomic.Int64
	for i := 0; i < N; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			ids, pl := request(t, m, i)
			g, err := sample.Generate(context.Background(), m.Network, ids, pl, o, meth.Planner(m.Network, "", nil))
			if err != nil {
				t.Error(err)
				return
			}
			if b := store.Stats().Bytes; b > maxBytes.Load() {
				maxBytes.Store(b)
			}
			if !reflect.DeepEqual(g.Canvas, want[i]) {
				t.Errorf("request %d: concurrent answer %v differs from alone %v", i, g.Canvas, want[i])
			}
		}(i)
	}
	wg.Wait()
	st := store.Stats()
	if maxBytes.Load() > st.BudgetBytes || st.Bytes > st.BudgetBytes {
		t.Errorf("store held %d bytes, budget %d", maxBytes.Load(), st.BudgetBytes)
	}
	if st.Evictions == 0 || st.Hits == 0 {
		t.Errorf("expected both hits and evictions: %+v", st)
	}
	_ = ids0
}

// A store with a host spill tier: an evicted prefix comes back from the
// spill, bit for bit, instead of being recomputed.
func TestStoreSpill(t *testing.T) {
	m := loadTiny(t)
	ids0, pl0 := request(t, m, 0)
	ids1, pl1 := request(t, m, 1)
	entryBytes := int64(4 * len(m.Blocks) * pl0 * (2*m.Config.KVDim() + m.Config.DModel))
	primary := NewStore(m.Backend, entryBytes*3/2, FIFO)
	spill := NewStore(cpu.New(1), entryBytes*4, LRU)
	primary.SetSpill(spill)
	computed := 0
	get := func(ids []int32, pl int) (*Entry, bool) {
		e, hit, err := primary.Acquire(PrefixID{Fingerprint: "fp", Tokens: ids[:pl]}, func() (*Entry, error) {
			computed++
			return ComputePrefix(m.Network, ids[:pl])
		})
		if err != nil {
			t.Fatal(err)
		}
		return e, hit
	}
	e0, _ := get(ids0, pl0)
	want := m.Backend.ToHost(e0.K[1], nil)
	primary.Release(e0)
	e1, _ := get(ids1, pl1) // evicts prefix 0 into the spill
	primary.Release(e1)
	if st := spill.Stats(); st.Entries != 1 {
		t.Fatalf("spill holds %d entries, want 1", st.Entries)
	}
	e0, hit := get(ids0, pl0)
	defer primary.Release(e0)
	if !hit || computed != 2 {
		t.Errorf("prefix 0 again: hit %v, computed %d times (want a hit from the spill, 2 computations)", hit, computed)
	}
	if got := m.Backend.ToHost(e0.K[1], nil); !reflect.DeepEqual(got, want) {
		t.Error("promoted entry differs from the original")
	}
	if st := primary.Stats(); st.SpillHits != 1 || st.Bytes > st.BudgetBytes {
		t.Errorf("primary stats %+v", st)
	}
}

// collidingStore is a FIFO store of 1 MiB on a one-thread CPU backend whose
// key function puts every prefix on key (restored at the test's end).
func collidingStore(t *testing.T, key Key) (*cpu.Backend, *Store) {
	t.Helper()
	old := keyOf
	keyOf = func(PrefixID) Key { return key }
	t.Cleanup(func() { keyOf = old })
	b := cpu.New(1)
	return b, NewStore(b, 1<<20, FIFO)
}

// TestForcedCollision forces every prefix onto one 64-bit key: a second
// prefix (another tenant's salt, other tokens, another model) finds the
// first one's entry under its key and must never be served it.
func TestForcedCollision(t *testing.T) {
	b, s := collidingStore(t, 42)
	mark := func(v int32) func() (*Entry, error) {
		return func() (*Entry, error) {
			e := fakeEntry(b, 3, 100)
			e.Tokens[0] = v
			return e, nil
		}
	}
	a := PrefixID{Fingerprint: "fp", Salt: "tenant-a", Tokens: []int32{1, 2, 3}}
	ea, hit, err := s.Acquire(a, mark(1))
	if err != nil || hit {
		t.Fatalf("first acquire: hit %v err %v", hit, err)
	}
	for _, other := range []PrefixID{
		{Fingerprint: "fp", Salt: "tenant-b", Tokens: []int32{1, 2, 3}},  // another tenant
		{Fingerprint: "fp", Salt: "tenant-a", Tokens: []int32{1, 2, 4}},  // other tokens
		{Fingerprint: "fp2", Salt: "tenant-a", Tokens: []int32{1, 2, 3}}, // another model
	} {
		// While a's entry is held (also the in-flight case) and after.
		e, hit, err := s.Acquire(other, mark(2))
		if err != nil || hit || e == ea || e.Tokens[0] != 2 {
			t.Fatalf("%+v: served the colliding entry (hit %v, same %v, err %v)", other, hit, e == ea, err)
		}
		s.Release(e)
	}
	s.Release(ea)
	if e, hit, _ := s.Acquire(a, mark(3)); !hit || e != ea {
		t.Errorf("a's own entry: hit %v, same entry %v", hit, e == ea)
	} else {
		s.Release(e)
	}
	if st := s.Stats(); st.Collisions != 3 || st.Entries != 1 {
		t.Errorf("stats %+v: want 3 collisions, a's entry alone stored", st)
	}
}

// The in-flight path: a colliding prefix asked for while the first is still
// being computed does not wait for it and does not get it.
func TestForcedCollisionInFlight(t *testing.T) {
	b, s := collidingStore(t, 7)
	started, finish := make(chan struct{}), make(chan struct{})
	done := make(chan *Entry)
	go func() {
		e, _, _ := s.Acquire(PrefixID{Fingerprint: "fp", Tokens: []int32{1}}, func() (*Entry, error) {
			close(started)
			<-finish
			return fakeEntry(b, 1, 10), nil
		})
		done <- e
	}()
	<-started
	e, hit, err := s.Acquire(PrefixID{Fingerprint: "fp", Tokens: []int32{9}}, func() (*Entry, error) {
		e := fakeEntry(b, 1, 10)
		e.Tokens[0] = 9
		return e, nil
	})
	close(finish)
	first := <-done
	if err != nil || hit || e == first || e.Tokens[0] != 9 {
		t.Errorf("colliding in-flight prefix: hit %v, same entry %v, err %v", hit, e == first, err)
	}
	s.Release(e)
	s.Release(first)
}

// blockStoreOf loads the tiny model and makes a block store of blocks of
// B tokens with a budget of n blocks' bytes, writing its events to ev;
// and the bytes of one block.
func blockStoreOf(t *testing.T, B int, n int64, ev *EventLog) (*load.Model, *BlockStore, int64) {
	t.Helper()
	m := loadTiny(t)
	probe := NewBlockStore(m.Backend, B, 1<<30, true, nil)
	e, _, _, _, err := probe.Get(m.Network, PrefixID{Tokens: tokensOf(9, B)})
	if err != nil {
		t.Fatal(err)
	}
	probe.Release(e)
	blockBytes := probe.Stats().Bytes
	return m, NewBlockStore(m.Backend, B, n*blockBytes, true, ev), blockBytes
}

// rowsRequest loads the tiny model and request 1 for the row-count tests:
// the model, its layer count, the prompt ids and prefix length, and the
// canvas length with 16 answer slots.
func rowsRequest(t *testing.T) (*load.Model, int, []int32, int, int) {
	t.Helper()
	m := loadTiny(t)
	ids, pl := request(t, m, 1)
	return m, len(m.Blocks), ids, pl, len(ids) + 16
}
