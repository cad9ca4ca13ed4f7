package cache

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"sync"
	"testing"

	"github.com/dlmcache/dlmcache/internal/testutil"
	"github.com/dlmcache/dlmcache/model"
	"github.com/dlmcache/dlmcache/model/backend"
	"github.com/dlmcache/dlmcache/model/sample"
	"github.com/dlmcache/dlmcache/regime"
)

// tokensOf makes a prefix of n token ids from seed.
func tokensOf(seed, n int) []int32 {
	t := make([]int32, n)
	for i := range t {
		t[i] = int32(3 + (seed*7919+i*31)%250)
	}
	return t
}

func maxDiff(b backend.Backend, x, y backend.Tensor) float64 {
	a, c := b.ToHost(x, nil), b.ToHost(y, nil)
	if len(a) != len(c) {
		return math.Inf(1)
	}
	var d float64
	for i := range a {
		d = max(d, math.Abs(float64(a[i]-c[i])))
	}
	return d
}

// A block's K/V, V and hidden states. With the causal fill, block 0 is the
// first block computed alone, and every block's layer-1 K/V (projections
// of the embeddings) are the prefix's; with the whole fill, every block is
// what the full blocks computed together give.
func TestBlockStoreFill(t *testing.T) {
	m := loadTiny(t)
	b := m.Backend
	const B = 8
	toks := tokensOf(1, 3*B+5) // three full blocks and a tail
	id := PrefixID{Fingerprint: "fp", Tokens: toks}
	whole, err := ComputePrefix(m.Network, toks[:3*B])
	if err != nil {
		t.Fatal(err)
	}
	first, err := ComputePrefix(m.Network, toks[:B])
	if err != nil {
		t.Fatal(err)
	}
	rowsOf := func(x backend.Tensor, r []int32) backend.Tensor {
		c := b.New(len(r), x.Cols())
		b.CopyRows(c, nil, x, r)
		return c
	}
	for _, causal := range []bool{true, false} {
		s := NewBlockStore(b, B, 1<<30, causal, nil)
		e, hit, rows, _, err := s.Get(m.Network, id)
		if err != nil {
			t.Fatal(err)
		}
		if hit != 0 || rows != len(m.Blocks)*3*B || len(e.Tokens) != 3*B {
			t.Errorf("causal %v: hit %d, rows %d, entry %d tokens", causal, hit, rows, len(e.Tokens))
		}
		check := func(what string, got, want backend.Tensor) {
			if d := maxDiff(b, got, want); d > 1e-4 {
				t.Errorf("causal %v: %s: max diff %g", causal, what, d)
			}
		}
		for l := range whole.K {
			if !causal {
				check(fmt.Sprintf("layer %d K", l), e.K[l], whole.K[l])
				check(fmt.Sprintf("layer %d V", l), e.V[l], whole.V[l])
				check(fmt.Sprintf("layer %d H", l), e.H[l], whole.H[l])
				continue
			}
			r := iota32(0, B)
			check(fmt.Sprintf("block 0 layer %d K", l), rowsOf(e.K[l], r), first.K[l])
			check(fmt.Sprintf("block 0 layer %d H", l), rowsOf(e.H[l], r), first.H[l])
		}
		if causal {
			check("layer 1 K of every block", e.K[0], whole.K[0])
			if d := maxDiff(b, rowsOf(e.K[2], iota32(B, 2*B)), rowsOf(whole.K[2], iota32(B, 2*B))); d < 1e-3 {
				t.Errorf("causal: block 1 layer 3 equals the bidirectional prefix's (diff %g): block 0 saw block 1", d)
			}
		}
		s.Release(e)
	}
}

// Two prefixes sharing their first two blocks (a document under two
// system prompts): the second reuses them and computes only its own; with
// the causal fill the shared blocks are what it would have computed.
func TestBlockStoreSharesLeadingBlocks(t *testing.T) {
	m := loadTiny(t)
	const B = 8
	doc := tokensOf(2, 2*B)
	a := PrefixID{Fingerprint: "fp", Tokens: slices.Concat(doc, tokensOf(3, 2*B))}
	c := PrefixID{Fingerprint: "fp", Tokens: slices.Concat(doc, tokensOf(4, B+3))}
	s := NewBlockStore(m.Backend, B, 1<<30, true, nil)
	ea, _, _, _, err := s.Get(m.Network, a)
	if err != nil {
		t.Fatal(err)
	}
	s.Release(ea)
	ec, hit, rows, _, err := s.Get(m.Network, c)
	if err != nil {
		t.Fatal(err)
	}
	if hit != 2*B || rows != len(m.Blocks)*B || len(ec.Tokens) != 3*B {
		t.Errorf("shared document: hit %d tokens (want %d), computed %d rows (want %d), entry %d tokens", hit, 2*B, rows, len(m.Blocks)*B, len(ec.Tokens))
	}
	fresh := NewBlockStore(m.Backend, B, 1<<30, true, nil)
	ef, _, _, _, err := fresh.Get(m.Network, c)
	if err != nil {
		t.Fatal(err)
	}
	for l := range ef.K {
		if d := maxDiff(m.Backend, ec.K[l], ef.K[l]); d != 0 {
			t.Errorf("layer %d: K differs by %g from a fresh store's (causal blocks depend on their chain only)", l, d)
		}
	}
	// Another salt or fingerprint shares nothing.
	other := c
	other.Salt = "tenant"
	eo, hit, _, _, err := s.Get(m.Network, other)
	if err != nil {
		t.Fatal(err)
	}
	if hit != 0 {
		t.Errorf("another salt hit %d tokens", hit)
	}
	for _, e := range []*Entry{ec, ef, eo} {
		_ = e
	}
	s.Release(ec)
	s.Release(eo)
	fresh.Release(ef)
	if st := s.Stats(); st.QueryTokens != int64(len(a.Tokens)+len(c.Tokens)+len(other.Tokens)) || st.HitTokens != 2*B || st.Entries != 4+1+3 {
		t.Errorf("stats %+v", st)
	}
}

// Under a budget for a few blocks, the least recently used leaves go first
// and a prefix's root survives its branches; the KV event stream, replayed
// into a router's index, reproduces the store's block set exactly.
func TestBlockStoreEvictionAndEvents(t *testing.T) {
	const B = 8
	ev := NewEventLog(1 << 16)
	m, s, blockBytes := blockStoreOf(t, B, 5, ev)
	root := tokensOf(5, B)
	var wg sync.WaitGroup
	for i := 0; i < 12; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := PrefixID{Fingerprint: "fp", Tokens: slices.Concat(root, tokensOf(10+i%6, 2*B))}
			e, _, _, _, err := s.Get(m.Network, id)
			if err != nil {
				t.Error(err)
				return
			}
			s.Release(e)
		}()
	}
	wg.Wait()
	st := s.Stats()
	if st.Bytes > 5*blockBytes || st.Evictions == 0 {
		t.Errorf("stats %+v (budget %d)", st, 5*blockBytes)
	}
	rootKey := blockKey(0, "fp", "", root).String()
	if !slices.Contains(s.Blocks(), rootKey) {
		t.Errorf("the shared root block was evicted: %v", s.Blocks())
	}
	// Replay.
	index := map[string]bool{}
	events, gap, _ := ev.Since(0)
	if gap {
		t.Fatal("gap in a log large enough")
	}
	var last uint64
	for _, e := range events {
		if e.Seq != last+1 {
			t.Fatalf("sequence %d after %d", e.Seq, last)
		}
		last = e.Seq
		switch e.Type {
		case "stored":
			index[e.Hash] = true
		case "removed":
			delete(index, e.Hash)
		default:
			t.Fatalf("event type %q", e.Type)
		}
	}
	replayed := slices.Sorted(maps.Keys(index))
	if !slices.Equal(replayed, s.Blocks()) {
		t.Errorf("replayed %v\nstore    %v", replayed, s.Blocks())
	}
	// Resuming after the last event gets nothing; a log too short for the
	// reader says so.
	if rest, gap, _ := ev.Since(last); len(rest) != 0 || gap {
		t.Errorf("after the last: %d events, gap %v", len(rest), gap)
	}
	small := NewEventLog(2)
	for i := 0; i < 5; i++ {
		small.add(KVEvent{Type: "stored", Hash: fmt.Sprint(i)})
	}
	if got, gap, _ := small.Since(1); !gap || len(got) != 2 || got[0].Seq != 4 {
		t.Errorf("short log: %v, gap %v", got, gap)
	}
}

// BiCache over a block store generates, and a second request with the
// same prefix hits every full block.
func TestBiCacheOnBlockStore(t *testing.T) {
	m := loadTiny(t)
	L := len(m.Blocks)
	ids, pl := request(t, m, 0)
	s := NewBlockStore(m.Backend, 16, 1<<30, true, nil)
	meth := mk(t, "bicache", Options{Store: s, Table: table(L, 2), BiCache: BiCacheOptions{Refresh: 4}, Fingerprint: m.Fingerprint})
	o := sample.GenOptions{Regime: regime.Regime{GenLength: 16, Steps: 8}}
	for i := 0; i < 2; i++ {
		res, err := Run(context.Background(), m.Network, meth, Request{Prompt: ids, PrefixLen: pl}, o)
		if err != nil {
			t.Fatal(err)
		}
		full := pl / 16 * 16
		if i == 1 && (res.Info.HitTokens != full || !res.Info.Hit) || i == 0 && res.Info.PrefixRows != L*full {
			t.Errorf("request %d: info %+v (prefix %d, full blocks %d tokens)", i, res.Info, pl, full)
		}
		if slices.Contains(res.Answer, int32(m.Config.MaskTokenID)) {
			t.Errorf("request %d: answer still masked", i)
		}
	}
}

// Concurrent requests for one new prefix fill its blocks once.
func TestBlockStoreFillsOnce(t *testing.T) {
	m := loadTiny(t)
	const B = 8
	s := NewBlockStore(m.Backend, B, 1<<30, true, nil)
	id := PrefixID{Fingerprint: "fp", Tokens: tokensOf(7, 4*B)}
	var wg sync.WaitGroup
	var mu sync.Mutex
	total := 0
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e, _, rows, _, err := s.Get(m.Network, id)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			total += rows
			mu.Unlock()
			s.Release(e)
		}()
	}
	wg.Wait()
	if want := len(m.Blocks) * 4 * B; total != want {
		t.Errorf("8 concurrent requests computed %d rows, want one fill's %d", total, want)
	}
	if st := s.Stats(); st.Queries != 8 || st.HitTokens != 7*4*B {
		t.Errorf("stats %+v", st)
	}
}

// TestBlockStoreForcedCollision forces every block whose parent is the
// same onto one key (the tokens, salt and fingerprint are left out of the
// hash): a block of other tokens, another tenant's or another model's
// finds a stored block under its key and must never be served it; it is
// computed for the request alone, exactly as a store without the
// collision computes it, and counted. A chain that shares a real first
// block still reuses it.
func TestBlockStoreForcedCollision(t *testing.T) {
	old := blockKey
	blockKey = func(parent Key, _, _ string, _ []int32) Key { return parent + 1 }
	defer func() { blockKey = old }()
	m := loadTiny(t)
	const B = 8
	s := NewBlockStore(m.Backend, B, 1<<30, true, nil)
	a := PrefixID{Fingerprint: "fp", Salt: "tenant-a", Tokens: tokensOf(1, 2*B)}
	ea, hit, _, _, err := s.Get(m.Network, a)
	if err != nil || hit != 0 {
		t.Fatalf("first get: hit %d err %v", hit, err)
	}
	s.Release(ea)
	collisions := int64(0)
	for _, tc := range []struct {
		what string
		id   PrefixID
		hit  int
	}{
		{"other tokens", PrefixID{Fingerprint: "fp", Salt: "tenant-a", Tokens: tokensOf(2, 2*B)}, 0},
		{"another tenant", PrefixID{Fingerprint: "fp", Salt: "tenant-b", Tokens: a.Tokens}, 0},
		{"another model", PrefixID{Fingerprint: "fp2", Salt: "tenant-a", Tokens: a.Tokens}, 0},
		{"a shared first block", PrefixID{Fingerprint: "fp", Salt: "tenant-a", Tokens: slices.Concat(a.Tokens[:B], tokensOf(3, B))}, B},
	} {
		e, hit, rows, _, err := s.Get(m.Network, tc.id)
		if err != nil {
			t.Fatalf("%s: %v", tc.what, err)
		}
		if hit != tc.hit || rows != len(m.Blocks)*(2*B-tc.hit) {
			t.Errorf("%s: hit %d tokens, computed %d rows; want %d and %d", tc.what, hit, rows, tc.hit, len(m.Blocks)*(2*B-tc.hit))
		}
		// What a store without the collision computes for the same prefix.
		fresh := NewBlockStore(m.Backend, B, 1<<30, true, nil)
		ef, _, _, _, err := fresh.Get(m.Network, tc.id)
		if err != nil {
			t.Fatal(err)
		}
		for l := range e.K {
			if d := max(maxDiff(m.Backend, e.K[l], ef.K[l]), maxDiff(m.Backend, e.V[l], ef.V[l])); d != 0 {
				t.Errorf("%s: layer %d K/V differ by %g from the prefix's own", tc.what, l, d)
			}
		}
		fresh.Release(ef)
		s.Release(e)
		if st := s.Stats(); st.Collisions <= collisions {
			t.Errorf("%s: collision not counted (%d)", tc.what, st.Collisions)
		} else {
			collisions = st.Collisions
		}
	}
	// The first prefix is still served whole from the store.
	ea, hit, rows, _, err := s.Get(m.Network, a)
	if err != nil || hit != 2*B || rows != 0 {
		t.Errorf("first prefix again: hit %d rows %d err %v", hit, rows, err)
	}
	s.Release(ea)
	if st := s.Stats(); st.Entries != 2 {
		t.Errorf("%d blocks stored, want the first prefix's 2 (colliding blocks are the requests' own)", st.Entries)
	}
}

// A method under another decoder (a calibrated table's choices are) stores
// an answered conversation in its block store as the method does under
// its own decoder.
func TestStorePrefixThroughADecoder(t *testing.T) {
	m := loadTiny(t)
	L := len(m.Blocks)
	o := DefaultOptions()
	o.Store, o.Table, o.Fingerprint = NewBlockStore(m.Backend, 4, 1<<30, true, nil), table(L, 1), m.Fingerprint
	ids, _ := request(t, m, 0)
	for _, name := range []string{"bicache", "bicache@threshold:0.9"} {
		rows, _, err := StorePrefix(m.Network, mk(t, name, o), ids, name) // a salt each: both fill
		if err != nil || rows == 0 {
			t.Errorf("%s: %d rows stored, %v", name, rows, err)
		}
	}
	// A method that keeps no store (none, block) computes and stores
	// nothing, even with a block store in its options: nobody would read
	// it, and bench would time the fill as the method's.
	before := o.Store.Stats().Entries
	for _, name := range []string{"none", "block"} {
		if rows, _, err := StorePrefix(m.Network, mk(t, name, o), ids, "other "+name); err != nil || rows != 0 {
			t.Errorf("%s: %d rows computed, %v; want none", name, rows, err)
		}
	}
	if n := o.Store.Stats().Entries; n != before {
		t.Errorf("none and block stored %d blocks", n-before)
	}
}

// kvTap computes every row and keeps each layer's K/V.
type kvTap struct {
	b    backend.Backend
	k, v [][]float32
}

func (c *kvTap) Rows(int) []int32                                      { return nil }
func (c *kvTap) Hidden(int, []int32, backend.Tensor) error             { return nil }
func (c *kvTap) KV(int, []int32, backend.Tensor, backend.Tensor) error { return nil }
func (c *kvTap) Observe(_ int, _ []int32, _, k, v backend.Tensor) {
	c.k, c.v = append(c.k, c.b.ToHost(k, nil)), append(c.v, c.b.ToHost(v, nil))
}

// On a block-causal model a block store's fill computes the missing blocks
// in one forward over the stored ones' K/V: every layer's K/V of a prefix
// filled on top of a stored shorter one equal those of the whole prefix
// computed at once.
func TestBlockStoreFillOverStoredBlocks(t *testing.T) {
	const B = 8
	m := loadBlockTiny(t, B)
	ids, _ := request(t, m, 0)
	n := len(ids) / B * B
	if n < 4*B {
		t.Fatalf("prompt of %d tokens: want 4 blocks", len(ids))
	}
	ref := &kvTap{b: m.Backend}
	if _, err := m.Forward(model.Input{Tokens: ids[:n]}, ref); err != nil {
		t.Fatal(err)
	}
	s := NewBlockStore(m.Backend, B, 1<<30, true, nil)
	id := PrefixID{Fingerprint: m.Fingerprint, Tokens: ids[:2*B]}
	e, _, _, _, err := s.Get(m.Network, id)
	if err != nil {
		t.Fatal(err)
	}
	s.Release(e)
	id.Tokens = ids[:n]
	e, hit, _, _, err := s.Get(m.Network, id)
	if err != nil || hit != 2*B {
		t.Fatalf("second prefix: hit %d, %v; want the first's %d tokens", hit, err, 2*B)
	}
	defer s.Release(e)
	for l := range m.Blocks {
		k, v := m.Backend.ToHost(e.K[l], nil), m.Backend.ToHost(e.V[l], nil)
		if d := testutil.RelErr(k, ref.k[l]); d > 1e-5 {
			t.Errorf("layer %d: K off the whole prefix's by %.3g", l, d)
		}
		if d := testutil.RelErr(v, ref.v[l]); d > 1e-5 {
			t.Errorf("layer %d: V off the whole prefix's by %.3g", l, d)
		}
	}
}

// Every store operation writes its event: a stored block carries its
// hash, its parent's, its tokens and the client's part of the salt; an
// eviction names the evicted block; Clear empties the store with one
// "cleared" event and leaves the blocks a request holds valid for it.
func TestBlockStoreEventsForEveryOperation(t *testing.T) {
	const B = 8
	ev := NewEventLog(1 << 10)
	m, s, _ := blockStoreOf(t, B, 2, ev)
	salt := joinSalt("", "key:ns\x00tenant-a")
	first := PrefixID{Fingerprint: "fp", Salt: salt, Tokens: tokensOf(1, 2*B)}
	e, _, _, _, err := s.Get(m.Network, first)
	if err != nil {
		t.Fatal(err)
	}
	s.Release(e)
	got, _, _ := ev.Since(0)
	if len(got) != 2 {
		t.Fatalf("storing two blocks: %d events %+v", len(got), got)
	}
	k0 := blockKey(0, "fp", salt, first.Tokens[:B])
	k1 := blockKey(k0, "fp", salt, first.Tokens[B:])
	for i, want := range []KVEvent{
		{Seq: 1, Type: "stored", Key: k0, TokenIDs: first.Tokens[:B], CacheSalt: "tenant-a"},
		{Seq: 2, Type: "stored", Key: k1, ParentKey: k0, HasParent: true, TokenIDs: first.Tokens[B:], CacheSalt: "tenant-a"},
	} {
		g := got[i]
		if g.Seq != want.Seq || g.Type != want.Type || g.Key != want.Key || g.ParentKey != want.ParentKey || g.HasParent != want.HasParent ||
			!slices.Equal(g.TokenIDs, want.TokenIDs) || g.CacheSalt != want.CacheSalt || g.Hash != want.Key.String() || g.Tokens != B {
			t.Errorf("event %d: %+v, want %+v", i, g, want)
		}
	}
	// A third block past a budget of two evicts the least recently used leaf.
	other := PrefixID{Fingerprint: "fp", Salt: salt, Tokens: tokensOf(2, B)}
	e, _, _, _, err = s.Get(m.Network, other)
	if err != nil {
		t.Fatal(err)
	}
	got, _, _ = ev.Since(2)
	if len(got) != 2 || got[0].Type != "removed" || got[0].Key != k1 || !got[0].HasParent || got[0].ParentKey != k0 ||
		got[1].Type != "stored" || got[1].HasParent {
		t.Fatalf("an eviction: %+v", got)
	}
	// Clear, with a request holding a block.
	if n := s.Clear(); n != 2 {
		t.Errorf("Clear removed %d blocks, want 2", n)
	}
	got, _, _ = ev.Since(4)
	if len(got) != 1 || got[0].Type != "cleared" || got[0].Seq != 5 {
		t.Fatalf("clear: %+v", got)
	}
	if st := s.Stats(); st.Bytes != 0 || st.Entries != 0 || len(s.Blocks()) != 0 {
		t.Errorf("after Clear: %+v, blocks %v", st, s.Blocks())
	}
	if maxDiff(m.Backend, e.K[0], e.K[0]) != 0 {
		t.Error("a held entry changed")
	}
	s.Release(e)
	// The store fills again after a clear, and the JSON form is unchanged.
	e, hit, _, _, err := s.Get(m.Network, first)
	if err != nil || hit != 0 {
		t.Fatalf("after Clear: hit %d, %v", hit, err)
	}
	s.Release(e)
	if n := len(s.Blocks()); n != 2 {
		t.Errorf("after refilling: %d blocks", n)
	}
}
