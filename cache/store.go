package cache

import (
	"container/list"
	"encoding/binary"
	"fmt"
	"slices"
	"sync"

	"github.com/cespare/xxhash/v2"

	"github.com/dlmcache/dlmcache/model"
	"github.com/dlmcache/dlmcache/model/backend"
)

// Key names a cached prefix: xxHash64 over the model fingerprint, the cache
// salt (tenant isolation) and the prefix token ids. A key only finds an
// entry; the entry is served only when the PrefixID it was computed from
// equals the request's, so a 64-bit collision can never hand one prefix's
// (or tenant's) K/V to another.
type Key uint64

// PrefixID is what a stored prefix is computed from and checked against
// on every hit.
type PrefixID struct {
	Fingerprint string // the model's
	Salt        string // the tenant's cache salt
	Tokens      []int32
}

func (a PrefixID) equal(b PrefixID) bool {
	return a.Fingerprint == b.Fingerprint && a.Salt == b.Salt && slices.Equal(a.Tokens, b.Tokens)
}

// keyOf is the store's key function (a variable so that tests can force
// collisions).
var keyOf = func(id PrefixID) Key { return PrefixKey(id.Fingerprint, id.Salt, id.Tokens) }

// PrefixKey computes the store key of a prefix.
func PrefixKey(fingerprint, salt string, ids []int32) Key {
	return hashKey(xxhash.New(), []string{fingerprint, salt}, ids)
}

// hashKey adds to h each string after its length, then the tokens, and
// returns the sum: the keys of PrefixKey and of the block store's chain.
func hashKey(h *xxhash.Digest, strs []string, tokens []int32) Key {
	var b [8]byte
	for _, s := range strs {
		binary.LittleEndian.PutUint64(b[:], uint64(len(s)))
		h.Write(b[:])
		h.WriteString(s)
	}
	for _, t := range tokens {
		binary.LittleEndian.PutUint32(b[:4], uint32(t))
		h.Write(b[:4])
	}
	return Key(h.Sum64())
}

// Entry is a prefix computed alone: per layer its K and V ([m, kv], RoPE
// applied) and the hidden state entering the layer ([m, d]; nil in a
// block store's entry of a block-causal model, whose hidden states nothing
// reads: the methods that read them refuse such a model).
type Entry struct {
	Tokens []int32
	K, V   []backend.Tensor
	H      []backend.Tensor
	Bytes  int64

	nodes []*blockNode // a BlockStore entry: the blocks it was assembled from

	refs    int  // requests holding it (guarded by the store's mutex)
	evicted bool // no longer findable; freed when refs drops to 0
	elem    *list.Element
	key     Key
	id      PrefixID // what it was computed from
}

// ComputePrefix runs the model on the prefix tokens alone (positions
// 0..m-1) and keeps every layer's K, V and input hidden state.
func ComputePrefix(m *model.Network, tokens []int32) (*Entry, error) {
	e, _, err := computeEntry(m, model.Input{Tokens: tokens})
	return e, err
}

// computeEntry runs the model on in alone (at its position ids) and keeps
// every layer's K, V and input hidden state, with the forward's output.
func computeEntry(m *model.Network, in model.Input) (*Entry, *model.Output, error) {
	c := &prefixCapture{b: m.Backend}
	out, err := m.Forward(in, c)
	if err != nil {
		return nil, nil, err
	}
	e := &Entry{Tokens: slices.Clone(in.Tokens), K: c.k, V: c.v, H: c.h}
	for l := range e.K {
		e.Bytes += 4 * int64(e.K[l].Rows()*e.K[l].Cols()+e.V[l].Rows()*e.V[l].Cols()+e.H[l].Rows()*e.H[l].Cols())
	}
	return e, out, nil
}

// concatEntries copies the parts' per-layer K, V and H one after another
// into a new entry covering their tokens.
func concatEntries(b backend.Backend, parts []*Entry) *Entry {
	e := &Entry{}
	if len(parts) == 0 {
		return e
	}
	for _, p := range parts {
		e.Tokens = append(e.Tokens, p.Tokens...)
	}
	n := len(e.Tokens)
	// Blocks of a block-causal model's store hold no hidden states.
	hidden := parts[0].H != nil
	for l := range parts[0].K {
		k := b.New(n, parts[0].K[l].Cols())
		v := b.New(n, parts[0].V[l].Cols())
		var h backend.Tensor
		if hidden {
			h = b.New(n, parts[0].H[l].Cols())
		}
		at := 0
		for _, p := range parts {
			r := iota32(at, at+len(p.Tokens))
			b.CopyRows(k, r, p.K[l], nil)
			b.CopyRows(v, r, p.V[l], nil)
			if hidden {
				b.CopyRows(h, r, p.H[l], nil)
			}
			at += len(p.Tokens)
		}
		e.K, e.V = append(e.K, k), append(e.V, v)
		if hidden {
			e.H = append(e.H, h)
		}
	}
	return e
}

// freeLayers frees per-layer K, V and H tensors (h may be nil: none kept).
func freeLayers(b backend.Backend, k, v, h []backend.Tensor) {
	for l := range k {
		b.Free(k[l])
		b.Free(v[l])
		if h != nil {
			b.Free(h[l])
		}
	}
}

type prefixCapture struct {
	b       backend.Backend
	k, v, h []backend.Tensor
}

func (c *prefixCapture) Rows(int) []int32 { return nil }
func (c *prefixCapture) Hidden(int, []int32, backend.Tensor) error {
	return fmt.Errorf("cache: prefix capture computes every row")
}
func (c *prefixCapture) KV(int, []int32, backend.Tensor, backend.Tensor) error {
	return fmt.Errorf("cache: prefix capture computes every row")
}
func (c *prefixCapture) Observe(_ int, _ []int32, h, k, v backend.Tensor) {
	c.k = append(c.k, clone(c.b, k))
	c.v = append(c.v, clone(c.b, v))
	c.h = append(c.h, clone(c.b, h))
}

func clone(b backend.Backend, t backend.Tensor) backend.Tensor {
	c := b.New(t.Rows(), t.Cols())
	b.CopyRows(c, nil, t, nil)
	return c
}

// Eviction chooses which entry leaves a full store.
type Eviction string

const (
	FIFO Eviction = "fifo" // oldest inserted first (the paper's)
	LRU  Eviction = "lru"  // least recently used first
)

// ParseEviction accepts "fifo" or "lru".
func ParseEviction(s string) (Eviction, error) {
	switch Eviction(s) {
	case FIFO, LRU:
		return Eviction(s), nil
	}
	return "", fmt.Errorf("eviction %q: want fifo or lru", s)
}

// Stats are the store's counters. Queries and hits count prefix tokens, as
// vLLM's prefix_cache_queries / prefix_cache_hits do.
type Stats struct {
	QueryTokens   int64
	HitTokens     int64
	Queries       int64
	Hits          int64
	Evictions     int64
	EvictedTokens int64
	Uncacheable   int64 // prefixes larger than the whole budget
	Collisions    int64 // lookups whose key found another prefix (computed, not served from the store)
	SpillHits     int64 // misses served by promoting an entry from the spill tier
	Entries       int
	Bytes         int64
	BudgetBytes   int64
}

// Plus is the two stores' counters together (what a server with a prefix
// store and a module store reports).
func (s Stats) Plus(o Stats) Stats {
	return Stats{QueryTokens: s.QueryTokens + o.QueryTokens, HitTokens: s.HitTokens + o.HitTokens, Queries: s.Queries + o.Queries,
		Hits: s.Hits + o.Hits, Evictions: s.Evictions + o.Evictions, EvictedTokens: s.EvictedTokens + o.EvictedTokens,
		Uncacheable: s.Uncacheable + o.Uncacheable, Collisions: s.Collisions + o.Collisions, SpillHits: s.SpillHits + o.SpillHits,
		Entries: s.Entries + o.Entries, Bytes: s.Bytes + o.Bytes, BudgetBytes: s.BudgetBytes + o.BudgetBytes}
}

// Store is a concurrency-safe, byte-budgeted map from prefix keys to
// computed prefixes. A missing prefix is computed once however many
// requests ask for it at the same time.
type Store struct {
	mu       sync.Mutex
	b        backend.Backend
	budget   int64
	policy   Eviction
	entries  map[Key]*Entry
	order    *list.List // front = next to evict
	inflight map[Key]*call
	stats    Stats
	spill    *Store // optional second tier (host memory) for evicted entries
}

// SetSpill gives the store a second tier: entries evicted from s are copied
// into spill (typically a host-memory store under a CPU backend when s
// holds device memory), and a miss in s that spill holds is promoted back
// instead of recomputed. Call it before the store is used.
func (s *Store) SetSpill(spill *Store) { s.spill = spill }

// convert copies e's tensors from backend from to backend to.
func convert(e *Entry, from, to backend.Backend) *Entry {
	c := &Entry{Tokens: e.Tokens, Bytes: e.Bytes, id: e.id}
	move := func(ts []backend.Tensor) []backend.Tensor {
		out := make([]backend.Tensor, len(ts))
		for i, t := range ts {
			out[i] = to.FromHost(t.Rows(), t.Cols(), from.ToHost(t, nil))
		}
		return out
	}
	c.K, c.V, c.H = move(e.K), move(e.V), move(e.H)
	return c
}

// take removes id's entry from s (a spill tier) and returns it, or nil.
func (s *Store) take(key Key, id PrefixID) *Entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entries[key]
	if e == nil || !e.id.equal(id) {
		return nil
	}
	s.order.Remove(e.elem)
	delete(s.entries, key)
	s.stats.Bytes -= e.Bytes
	return e
}

// put inserts an entry that nobody holds (a spill tier's insert).
func (s *Store) put(e *Entry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if old := s.entries[e.key]; old != nil {
		s.remove(old)
	}
	s.insert(e)
}

type call struct {
	id      PrefixID
	done    chan struct{}
	waiters int
	e       *Entry
	err     error
}

// NewStore makes a store holding at most budget bytes of prefix tensors.
func NewStore(b backend.Backend, budget int64, policy Eviction) *Store {
	if policy == "" {
		policy = FIFO
	}
	return &Store{b: b, budget: budget, policy: policy, entries: map[Key]*Entry{}, order: list.New(), inflight: map[Key]*call{}}
}

// Acquire returns the entry for id, computing it with compute on a miss.
// The caller must Release it when its request ends; until then it is not
// freed (an evicted entry stays valid for the requests that hold it). A
// stored or in-flight entry whose key matches but whose PrefixID does not
// (a hash collision) is never served: the prefix is computed for this
// request alone, not stored, and counted in Stats.Collisions.
func (s *Store) Acquire(id PrefixID, compute func() (*Entry, error)) (e *Entry, hit bool, err error) {
	key, m := keyOf(id), len(id.Tokens)
	s.mu.Lock()
	s.stats.Queries++
	s.stats.QueryTokens += int64(m)
	if e := s.entries[key]; e != nil && !e.id.equal(id) || s.inflight[key] != nil && !s.inflight[key].id.equal(id) {
		s.stats.Collisions++
		s.mu.Unlock()
		if e, err = compute(); err != nil {
			return nil, false, err
		}
		e.id, e.key, e.refs, e.evicted = id, key, 1, true // held by this request only
		return e, false, nil
	}
	if e := s.entries[key]; e != nil {
		e.refs++
		if s.policy == LRU {
			s.order.MoveToBack(e.elem)
		}
		s.stats.Hits++
		s.stats.HitTokens += int64(m)
		s.mu.Unlock()
		return e, true, nil
	}
	if c := s.inflight[key]; c != nil {
		// Another request is computing this prefix: wait for it. The
		// computing request takes our reference for us before anyone can
		// release the entry.
		c.waiters++
		s.stats.Hits++
		s.stats.HitTokens += int64(m)
		s.mu.Unlock()
		<-c.done
		if c.err != nil {
			return nil, false, c.err
		}
		return c.e, true, nil
	}
	c := &call{id: id, done: make(chan struct{})}
	s.inflight[key] = c
	s.mu.Unlock()

	if s.spill != nil {
		if se := s.spill.take(key, id); se != nil {
			e = convert(se, s.spill.b, s.b)
			s.spill.free(se)
			hit = true
		}
	}
	if e == nil {
		e, err = compute()
	}

	s.mu.Lock()
	delete(s.inflight, key)
	c.e, c.err = e, err
	if err == nil {
		e.key, e.id = key, id
		e.refs += 1 + c.waiters
		if hit {
			s.stats.Hits++
			s.stats.HitTokens += int64(m)
			s.stats.SpillHits++
		}
		s.insert(e)
	} else {
		// The waiters get the error; their queries were not hits.
		s.stats.Hits -= int64(c.waiters)
		s.stats.HitTokens -= int64(c.waiters * m)
	}
	s.mu.Unlock()
	close(c.done)
	return e, hit, err
}

// insert adds e under the budget, evicting as needed (mu held).
func (s *Store) insert(e *Entry) {
	if e.Bytes > s.budget {
		s.stats.Uncacheable++
		e.evicted = true // held by its requests only
		return
	}
	for s.stats.Bytes+e.Bytes > s.budget {
		victim := s.order.Front().Value.(*Entry)
		if s.spill != nil {
			// Copy to the second tier before the victim may be freed.
			ce := convert(victim, s.b, s.spill.b)
			ce.key = victim.key
			s.spill.put(ce)
		}
		s.remove(victim)
		s.stats.Evictions++
		s.stats.EvictedTokens += int64(len(victim.Tokens))
	}
	e.elem = s.order.PushBack(e)
	s.entries[e.key] = e
	s.stats.Bytes += e.Bytes
}

func (s *Store) remove(e *Entry) {
	s.order.Remove(e.elem)
	delete(s.entries, e.key)
	s.stats.Bytes -= e.Bytes
	e.evicted = true
	if e.refs == 0 {
		s.free(e)
	}
}

func (s *Store) free(e *Entry) { freeLayers(s.b, e.K, e.V, e.H) }

// Release ends a request's hold on e.
func (s *Store) Release(e *Entry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if drop(&e.refs, "entry") && e.evicted {
		s.free(e)
	}
}

// Stats returns a snapshot of the counters.
func (s *Store) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats.with(len(s.entries), s.budget)
}

// drop ends one hold (refs, under the store's lock) on a stored entry or
// block, what, and reports whether none is left.
func drop(refs *int, what string) bool {
	*refs--
	if *refs < 0 {
		panic("cache: " + what + " released more often than acquired")
	}
	return *refs == 0
}

// with is a store's counters with its entries and budget: its Stats.
func (st Stats) with(entries int, budget int64) Stats {
	st.Entries, st.BudgetBytes = entries, budget
	return st
}
