package cache

import (
	"container/list"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/cespare/xxhash/v2"

	"github.com/dlmcache/dlmcache/model"
	"github.com/dlmcache/dlmcache/model/backend"
)

// PrefixStore is what the bicache family and prefix-all need from a prefix
// store: the stored K/V, V and hidden states of (a leading part of) a
// request's shared prefix, computed where missing.
type PrefixStore interface {
	// Get returns an entry covering rows 0..h-1 of id.Tokens (h ≤ the
	// prefix length; the rows it does not cover the request computes), the
	// prefix tokens found stored, and the (layer, row) pairs and FLOPs
	// computed to fill the rest. The caller must Release the entry.
	Get(lm *model.Network, id PrefixID) (e *Entry, hitTokens, computedRows int, flops float64, err error)
	Release(e *Entry)
	Stats() Stats
}

// Get is the whole-prefix store's PrefixStore method: the prefix is one
// entry, computed alone on a miss.
func (s *Store) Get(lm *model.Network, id PrefixID) (*Entry, int, int, float64, error) {
	e, hit, err := s.Acquire(id, func() (*Entry, error) { return ComputePrefix(lm, id.Tokens) })
	if err != nil || hit {
		return e, len(id.Tokens), 0, 0, err
	}
	m := len(id.Tokens)
	return e, 0, len(lm.Blocks) * m, lm.Config.StepFLOPs(m, m, 0), nil
}

// BlockStore is the prefix store at block granularity, as vLLM's prefix
// cache is: a prefix is split into fixed-size token blocks, block i named
// by a chained hash of block i−1's hash, its tokens, the model fingerprint
// and the cache salt; a request reuses its longest stored chain of full
// blocks and computes (and stores) the rest. So two prefixes that share
// their leading blocks — a document under two system prompts, a
// conversation's earlier turns — share those blocks' K/V.
//
// What a block holds: with Causal (the default), block i's K/V and hidden
// states are computed over the prefix up to block i's end only — each
// block attends to itself and the blocks before it — so a block's contents
// depend on its chain alone and a hit is exact whatever was stored first.
// Without it, the blocks a request fills are computed together over its
// whole prefix (bidirectionally), as the whole-prefix store does; a block
// then holds what the first prefix that stored it saw after it.
// docs/serving.md has the measurements behind the default.
//
// Concurrent requests missing the same next block compute it once: the
// others wait for the fill and then find it stored.
//
// Eviction is lazy LRU over leaves: only a block no stored block extends
// can go, least recently used first, so a prefix's root survives its
// branches. Evicted blocks stay valid for the requests holding them.
type BlockStore struct {
	b         backend.Backend
	blockSize int
	budget    int64
	causal    bool

	mu      sync.Mutex
	nodes   map[Key]*blockNode
	filling map[Key]chan struct{} // first missing block → its fill in flight
	leaves  *list.List            // evictable order: least recently used leaf first
	tick    uint64
	stats   Stats
	events  *EventLog
}

type blockNode struct {
	key, parent Key
	up          *blockNode
	tokens      []int32
	fp, salt    string
	k, v, h     []backend.Tensor // per layer, [blockSize, …]
	bytes       int64
	refs        int
	kids        int
	used        uint64
	elem        *list.Element // in leaves when stored with no stored child
	stored      bool
}

// NewBlockStore makes a block store of blockSize-token blocks holding at
// most budget bytes; causal chooses what a block's K/V are computed over.
// Its events (stored and removed blocks) go to events if not nil.
func NewBlockStore(b backend.Backend, blockSize int, budget int64, causal bool, events *EventLog) *BlockStore {
	if blockSize <= 0 {
		blockSize = 16
	}
	return &BlockStore{b: b, blockSize: blockSize, budget: budget, causal: causal,
		nodes: map[Key]*blockNode{}, filling: map[Key]chan struct{}{}, leaves: list.New(), events: events}
}

// BlockSize is the store's block length in tokens.
func (s *BlockStore) BlockSize() int { return s.blockSize }

// blockKey chains a block's hash: the parent's hash, the fingerprint, the
// salt and the block's tokens (a variable so that tests can force
// collisions).
var blockKey = chainKey

func chainKey(parent Key, fp, salt string, tokens []int32) Key {
	h := xxhash.New()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(parent))
	h.Write(b[:])
	return hashKey(h, []string{fp, salt}, tokens)
}

// Get implements PrefixStore.
func (s *BlockStore) Get(lm *model.Network, id PrefixID) (*Entry, int, int, float64, error) {
	chain, hit, rows, flops, err := s.get(lm, id, true)
	if err != nil {
		return nil, 0, 0, 0, err
	}
	return s.assemble(lm, chain), hit, rows, flops, nil
}

// get is Get without assembling the entry: the held chain of id's full
// blocks (releaseNodes when done), filled where missing. count says
// whether the lookup counts in Stats (queries and hit tokens): a
// request's does, StorePrefix's fill of an answered conversation does
// not, or every turn's blocks would be counted as hit twice.
func (s *BlockStore) get(lm *model.Network, id PrefixID, count bool) ([]*blockNode, int, int, float64, error) {
	B := s.blockSize
	nb := len(id.Tokens) / B
	s.mu.Lock()
	chain, next := s.walkWaiting(id, nb)
	hit := len(chain) * B
	if count {
		s.count(len(id.Tokens), len(chain), nb)
	}
	if len(chain) == nb {
		s.mu.Unlock()
		return chain, hit, 0, 0, nil
	}
	unclaim := s.claim(next)
	s.mu.Unlock()
	defer unclaim()

	// Compute the missing blocks over the stored ones.
	fresh, rows, flops, err := s.fill(lm, id, chain, nb)
	if err != nil {
		s.releaseNodes(chain)
		return nil, 0, 0, 0, err
	}
	return s.put(chain, fresh), hit, rows, flops, nil
}

// count adds a request's lookup of a prefix of m tokens (found: the
// chain's length in blocks, of nb full blocks) to Stats (mu held).
func (s *BlockStore) count(m, found, nb int) {
	s.stats.Queries++
	s.stats.QueryTokens += int64(m)
	s.stats.HitTokens += int64(found * s.blockSize)
	if found == nb {
		s.stats.Hits++
	}
}

// lookup holds the longest stored chain of id's full blocks and counts the
// lookup of its first m tokens (the shared prefix; none when they hold no
// full block) in Stats, computing nothing: for a caller that computes the
// missing blocks itself (put stores them; releaseNodes the chain when
// done). Single flight as in get: while another request is computing the
// block after the chain (a fill, or a caller of lookup that claimed it),
// it waits for that and looks again, so requests sharing a prefix that
// arrive together compute it once. When blocks are missing it claims the
// first of them for the caller, whose unclaim (never nil) ends the claim
// once the blocks are stored or will not be; the requests waiting on it
// then look again (and, if it stored nothing, the first of them claims).
//
// The caller must not hold up a forward another request's claim waits
// for: a batching server lets a generation join its batch only at its
// first forward, after the planner's Begin (where this is called).
func (s *BlockStore) lookup(id PrefixID, m int) (chain []*blockNode, unclaim func()) {
	nb := len(id.Tokens) / s.blockSize
	s.mu.Lock()
	defer s.mu.Unlock()
	chain, next := s.walkWaiting(id, nb)
	if mb := min(m, len(id.Tokens)) / s.blockSize; mb > 0 {
		s.count(m, min(len(chain), mb), mb)
	}
	if len(chain) == nb {
		return chain, func() {}
	}
	return chain, s.claim(next)
}

// walkWaiting is walk, single flight: while another request computes the
// block after the chain (it claimed it: get's fill, or a caller of
// lookup), it waits for that and walks again, as that request stores what
// this one would compute. mu is held on entry and on return.
func (s *BlockStore) walkWaiting(id PrefixID, nb int) ([]*blockNode, Key) {
	for {
		chain, next := s.walk(id, nb)
		wait := s.filling[next]
		if len(chain) == nb || wait == nil {
			return chain, next
		}
		s.mu.Unlock()
		s.releaseNodes(chain)
		<-wait
		s.mu.Lock()
	}
}

// claim marks the block of key next as being computed (mu held) and
// returns what ends the claim, waking the requests waiting on it; it may
// be called more than once. A hash collision's key 0 is not claimed.
func (s *BlockStore) claim(next Key) (unclaim func()) {
	if next == 0 {
		return func() {}
	}
	done := make(chan struct{})
	s.filling[next] = done
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			delete(s.filling, next)
			s.mu.Unlock()
			close(done)
		})
	}
}

// newNode is an unstored block of id, blocks i of its tokens, for put.
func (s *BlockStore) newNode(id PrefixID, i int) *blockNode {
	B := s.blockSize
	return &blockNode{tokens: slices.Clone(id.Tokens[i*B : (i+1)*B]), fp: id.Fingerprint, salt: id.Salt}
}

// addLayer appends a layer's K, V and hidden states (h nil: a block of a
// block-causal model, whose hidden states nothing reads) to a node being
// built.
func (n *blockNode) addLayer(k, v, h backend.Tensor) {
	n.k, n.v = append(n.k, k), append(n.v, v)
	n.bytes += 4 * int64(k.Rows()*(k.Cols()+v.Cols()))
	if h != nil {
		n.h = append(n.h, h)
		n.bytes += 4 * int64(h.Rows()*h.Cols())
	}
}

// put stores fresh blocks (computed by the caller, following chain, which
// lookup returned) and returns the chain extended by them, to release.
func (s *BlockStore) put(chain, fresh []*blockNode) []*blockNode {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range fresh {
		var up *blockNode
		if len(chain) > 0 {
			up = chain[len(chain)-1]
		}
		chain = append(chain, s.insert(n, up))
	}
	return chain
}

// keep stores those of id's first nb blocks that are missing, their K/V
// copied from rows of k and v (per layer, the caller's final K/V of at
// least the nb blocks' rows): nothing is computed. It is for K/V a request
// already holds final: exact-block's committed answer blocks, which a
// conversation's next turn finds at the end of its prompt's chain.
func (s *BlockStore) keep(id PrefixID, nb int, k, v []backend.Tensor) {
	B := s.blockSize
	s.mu.Lock()
	chain, _ := s.walk(id, nb)
	s.mu.Unlock()
	var fresh []*blockNode
	for i := len(chain); i < nb; i++ {
		fresh = append(fresh, s.block(id, i, iota32(i*B, (i+1)*B), k, v, nil))
	}
	s.releaseNodes(s.put(chain, fresh))
}

// block is block i of id, unstored, for put: its K/V (and hidden states,
// where h is not nil) copied from rows r of k, v and h (per layer).
func (s *BlockStore) block(id PrefixID, i int, r []int32, k, v, h []backend.Tensor) *blockNode {
	n := s.newNode(id, i)
	for l := range k {
		var hl backend.Tensor
		if h != nil {
			hl = s.sub(h[l], r)
		}
		n.addLayer(s.sub(k[l], r), s.sub(v[l], r), hl)
	}
	return n
}

// walk holds the longest stored chain of id's first nb blocks and returns
// it with the key of the block after it (mu held).
func (s *BlockStore) walk(id PrefixID, nb int) ([]*blockNode, Key) {
	B := s.blockSize
	s.tick++
	var chain []*blockNode
	var parent Key
	var up *blockNode
	for i := 0; i < nb; i++ {
		toks := id.Tokens[i*B : (i+1)*B]
		key := blockKey(parent, id.Fingerprint, id.Salt, toks)
		n := s.nodes[key]
		if n == nil {
			return chain, key
		}
		if n.up != up || n.fp != id.Fingerprint || n.salt != id.Salt || !slices.Equal(n.tokens, toks) {
			s.stats.Collisions++
			return chain, 0
		}
		s.hold(n)
		chain = append(chain, n)
		parent, up = key, n
	}
	return chain, 0
}

// hold takes a request's reference on a stored node (mu held).
func (s *BlockStore) hold(n *blockNode) {
	n.refs++
	n.used = s.tick
	if n.elem != nil {
		s.leaves.MoveToBack(n.elem)
	}
}

// fill computes blocks len(chain)..nb-1 of id, with every earlier block's
// K/V from chain (and, causal, from the blocks filled before).
func (s *BlockStore) fill(lm *model.Network, id PrefixID, chain []*blockNode, nb int) ([]*blockNode, int, float64, error) {
	B := s.blockSize
	from := len(chain)
	var fresh []*blockNode
	var rows int
	var flops float64
	run := func(lo, hi int) error { // compute blocks lo..hi-1
		known := slices.Concat(chain, fresh)
		// An autoregressive model's hidden states, as a block-causal
		// model's, are read by nothing (its own K/V are exact).
		c := &blockFill{b: s.b, known: known, blockSize: B, from: lo * B, to: hi * B, hidden: lm.Config.CausalBlock() == 0 && !lm.Config.Causal}
		out, err := lm.Forward(model.Input{Tokens: id.Tokens[:hi*B]}, c)
		if err != nil {
			return err
		}
		defer c.free()
		var h []backend.Tensor
		if c.hidden {
			h = c.h
		}
		for i := lo; i < hi; i++ {
			fresh = append(fresh, s.block(id, i, iota32((i-lo)*B, (i-lo+1)*B), c.k, c.v, h))
		}
		rows += out.RowsComputed
		flops += out.FLOPs
		return nil
	}
	var err error
	// On a block-causal model whose blocks tile the store's, and on an
	// autoregressive model, one forward over the missing blocks is the
	// causal fill: the model's own mask keeps each block from seeing the
	// blocks after it.
	if s.causal && !tiles(lm.Config, B) && !lm.Config.Causal {
		for i := from; i < nb && err == nil; i++ {
			err = run(i, i+1)
		}
	} else {
		err = run(from, nb)
	}
	if err != nil {
		for _, n := range fresh {
			s.freeNode(n)
		}
		return nil, 0, 0, err
	}
	return fresh, rows, flops, nil
}

// sub copies rows r of t into a new tensor.
func (s *BlockStore) sub(t backend.Tensor, r []int32) backend.Tensor {
	c := backend.NewUninit(s.b, len(r), t.Cols())
	s.b.CopyRows(c, nil, t, r)
	return c
}

func (s *BlockStore) freeNode(n *blockNode) {
	freeLayers(s.b, n.k, n.v, n.h)
	n.k, n.v, n.h = nil, nil, nil
}

// insert stores a freshly computed node under up (nil: a first block),
// evicting leaves to stay within the budget, and returns the node the
// chain goes on with: n, or the equal node another request stored
// meanwhile (mu held). A node that does not fit, or whose parent is not
// stored, is kept for this request alone.
func (s *BlockStore) insert(n *blockNode, up *blockNode) *blockNode {
	if up != nil {
		n.up, n.parent = up, up.key
	}
	n.key = blockKey(n.parent, n.fp, n.salt, n.tokens)
	n.refs, n.used = 1, s.tick
	if old := s.nodes[n.key]; old != nil {
		if old.up == n.up && old.fp == n.fp && old.salt == n.salt && slices.Equal(old.tokens, n.tokens) {
			s.freeNode(n)
			s.hold(old)
			return old
		}
		s.stats.Collisions++
		return n // not stored: this request's own
	}
	if n.up != nil && !n.up.stored {
		return n
	}
	if n.bytes > s.budget {
		s.stats.Uncacheable++
		return n
	}
	for s.stats.Bytes+n.bytes > s.budget && s.leaves.Len() > 0 {
		s.evict(s.leaves.Front().Value.(*blockNode))
	}
	if s.stats.Bytes+n.bytes > s.budget {
		s.stats.Uncacheable++
		return n
	}
	n.stored = true
	s.nodes[n.key] = n
	s.stats.Bytes += n.bytes
	if n.up != nil && n.up.stored {
		if n.up.kids == 0 && n.up.elem != nil {
			s.leaves.Remove(n.up.elem)
			n.up.elem = nil
		}
		n.up.kids++
	}
	n.elem = s.leaves.PushBack(n)
	s.events.add(KVEvent{Type: "stored", Hash: n.key.String(), Parent: n.parentHash(), Tokens: len(n.tokens),
		Key: n.key, ParentKey: n.parent, HasParent: n.up != nil, TokenIDs: n.tokens, CacheSalt: clientSalt(n.salt)})
	return n
}

// clientSalt is the part of a stored salt a client sent (its cache_salt):
// the last of the parts joinSalt and the server's key namespaces join
// with NUL, or the whole salt when there is one part.
func clientSalt(salt string) string {
	if i := strings.LastIndexByte(salt, 0); i >= 0 {
		return salt[i+1:]
	}
	return salt
}

func (n *blockNode) parentHash() string {
	if n.up == nil {
		return ""
	}
	return n.parent.String()
}

// evict removes leaf n from the store (mu held); its parent may become a
// leaf, placed in the order by its own last use.
func (s *BlockStore) evict(n *blockNode) {
	s.leaves.Remove(n.elem)
	n.elem = nil
	delete(s.nodes, n.key)
	n.stored = false
	s.stats.Bytes -= n.bytes
	s.stats.Evictions++
	s.stats.EvictedTokens += int64(len(n.tokens))
	s.events.add(KVEvent{Type: "removed", Hash: n.key.String(), Parent: n.parentHash(), Tokens: len(n.tokens),
		Key: n.key, ParentKey: n.parent, HasParent: n.up != nil})
	if n.refs == 0 {
		s.freeNode(n)
	}
	if p := n.up; p != nil && p.stored {
		p.kids--
		if p.kids == 0 {
			e := s.leaves.Back()
			for e != nil && e.Value.(*blockNode).used > p.used {
				e = e.Prev()
			}
			if e == nil {
				p.elem = s.leaves.PushFront(p)
			} else {
				p.elem = s.leaves.InsertAfter(p, e)
			}
		}
	}
}

// Clear removes every stored block (vLLM's prefix-cache reset) and
// returns how many it removed; the blocks requests hold stay valid for
// them and are freed when released. Its event is one "cleared", not a
// "removed" per block, and it counts no evictions.
func (s *BlockStore) Clear() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(s.nodes)
	for _, b := range s.nodes {
		b.stored, b.elem, b.kids = false, nil, 0
		s.stats.Bytes -= b.bytes
		if b.refs == 0 {
			s.freeNode(b)
		}
	}
	clear(s.nodes)
	s.leaves.Init()
	s.events.add(KVEvent{Type: "cleared"})
	return n
}

// assemble copies the chain's blocks into one entry covering their rows.
func (s *BlockStore) assemble(lm *model.Network, chain []*blockNode) *Entry {
	parts := make([]*Entry, len(chain))
	for i, n := range chain {
		parts[i] = &Entry{Tokens: n.tokens, K: n.k, V: n.v, H: n.h}
	}
	e := concatEntries(s.b, parts)
	e.nodes = chain
	return e
}

// Release implements PrefixStore.
func (s *BlockStore) Release(e *Entry) {
	freeLayers(s.b, e.K, e.V, e.H)
	s.releaseNodes(e.nodes)
}

func (s *BlockStore) releaseNodes(chain []*blockNode) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := len(chain) - 1; i >= 0; i-- {
		if n := chain[i]; drop(&n.refs, "block") && !n.stored {
			s.freeNode(n)
		}
	}
}

// Stats implements PrefixStore; Entries counts blocks.
func (s *BlockStore) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats.with(len(s.nodes), s.budget)
}

// Blocks returns the hashes of the stored blocks (for tests and routers'
// checks), sorted.
func (s *BlockStore) Blocks() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := make([]string, 0, len(s.nodes))
	for k := range s.nodes {
		r = append(r, k.String())
	}
	slices.Sort(r)
	return r
}

// String is the key as 16 hex digits (the form KV events carry).
func (k Key) String() string { return fmt.Sprintf("%016x", uint64(k)) }

// blockFill computes rows from..to-1 of a prefix at every layer, with the
// K/V of rows 0..from-1 from known blocks, and keeps what it computed:
// the K/V, and the hidden states where hidden (a bidirectional model's:
// the bicache family's store source reads them; on a block-causal model
// nothing does, and they would be a third of each block).
type blockFill struct {
	b         backend.Backend
	known     []*blockNode
	blockSize int
	from, to  int
	hidden    bool
	k, v, h   []backend.Tensor // per layer, [to-from, …]
}

func (c *blockFill) Rows(int) []int32 { return iota32(c.from, c.to) }
func (c *blockFill) Hidden(l int, _ []int32, _ backend.Tensor) error {
	return fmt.Errorf("cache: block fill computes the same rows at every layer (layer %d)", l)
}
func (c *blockFill) KV(l int, rows []int32, k, v backend.Tensor) error {
	// One copy a known block: the rows of each block are a run.
	B := int32(c.blockSize)
	for lo := 0; lo < len(rows); {
		blk := rows[lo] / B
		hi := lo + 1
		for hi < len(rows) && rows[hi]/B == blk {
			hi++
		}
		n, src := c.known[blk], make([]int32, hi-lo)
		for i, p := range rows[lo:hi] {
			src[i] = p - blk*B
		}
		c.b.CopyRows(k, rows[lo:hi], n.k[l], src)
		c.b.CopyRows(v, rows[lo:hi], n.v[l], src)
		lo = hi
	}
	return nil
}
func (c *blockFill) Observe(_ int, _ []int32, h, k, v backend.Tensor) {
	r := iota32(c.from, c.to)
	kk := backend.NewUninit(c.b, len(r), k.Cols())
	vv := backend.NewUninit(c.b, len(r), v.Cols())
	c.b.CopyRows(kk, nil, k, r)
	c.b.CopyRows(vv, nil, v, r)
	c.k, c.v = append(c.k, kk), append(c.v, vv)
	if c.hidden {
		c.h = append(c.h, clone(c.b, h))
	}
}
func (c *blockFill) free() { freeLayers(c.b, c.k, c.v, c.h) }

// StorePrefix puts tokens (a conversation so far, rendered as the next turn
// will render it) into meth's block store, so that a later request whose
// prompt starts with them reuses their blocks; salt is the request's. It
// returns the (layer, row) pairs and FLOPs computed, and does nothing for
// a method that keeps no block store (Storer): a store in the options of
// a method that never reads it (none) is not filled.
func StorePrefix(lm *model.Network, meth Method, tokens []int32, salt string) (int, float64, error) {
	bs, ok := StoreOf(meth).(*BlockStore)
	b, ok2 := meth.(interface{ options() Options })
	if !ok || !ok2 {
		return 0, 0, nil
	}
	o := b.options()
	chain, _, rows, flops, err := bs.get(lm, PrefixID{Fingerprint: o.Fingerprint, Salt: joinSalt(o.Salt, salt), Tokens: tokens}, false)
	if err != nil {
		return 0, 0, err
	}
	bs.releaseNodes(chain)
	return rows, flops, nil
}
