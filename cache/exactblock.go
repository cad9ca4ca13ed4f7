package cache

import (
	"errors"
	"fmt"
	"slices"

	"github.com/dlmcache/dlmcache/model"
	"github.com/dlmcache/dlmcache/model/backend"
	"github.com/dlmcache/dlmcache/model/sample"
)

// exactBlock is the exact K/V cache of a block-causal model (block
// diffusion: attention bidirectional inside a block of B positions,
// causal between blocks). A block's K/V depend on it and the blocks
// before it only, so once a block is committed its K/V never change:
// they are computed once and kept at every layer, and each step computes
// only the rows of the current block (the first step of a block also the
// block just committed, whose final K/V that forward gives). Every other
// row's K/V come from the kept ones — the answers are those of computing
// every row.
//
// Across requests, the full blocks of a shared prefix come from the
// prefix store at every layer (a block store's blocks must be whole
// multiples of the model's block; a whole-prefix store's entry serves its
// full blocks), so only the prompt's partial last block and the answer are
// computed: an autoregressive server's prefix cache, exact. A block store
// also receives the answer's blocks as they become final (copies of the
// kept rows), so a conversation's next turn, whose prompt starts with
// this answer, finds them too.
//
// It leaves the generation options alone (the model's own decoder and
// schedule), and refuses a bidirectional model, whose prefix K/V change
// with every answer token.
type exactBlock struct{ base }

func newExactBlock(o Options) (Method, error) {
	return &exactBlock{base{"exact-block", o}}, nil
}

func (m *exactBlock) Store() PrefixStore { return m.o.Store }

// ExactDefault is the method a block-causal model is served with when no
// method is named: the exact block cache, with the line saying so ("",
// "" for a bidirectional model).
func ExactDefault(c *model.Config) (method, note string) {
	B := c.CausalBlock()
	if B == 0 {
		return "", ""
	}
	return "exact-block", fmt.Sprintf("block-causal model (blocks of %d tokens): method exact-block — committed blocks' K/V computed once, "+
		"every full block of a shared prefix or an earlier turn served from the store at every layer, an answer's committed blocks kept there for the next turn; "+
		"the answers of computing every row (--method none computes them)", B)
}

// ExactStoreBlocks is the prefix store's block length for methods on a
// model of config c, given --store-blocks: where methods has the exact
// block cache and the flag is 0, a block store of the model's block size
// (every full block of a shared prefix is then reused, and a
// conversation's earlier turns with it), with the line saying so (""
// when nothing changed).
func ExactStoreBlocks(c *model.Config, methods []string, blocks int) (int, string) {
	B := c.CausalBlock()
	if B == 0 || blocks != 0 || !slices.Contains(methods, "exact-block") {
		return blocks, ""
	}
	return B, fmt.Sprintf("prefix store in blocks of %d tokens, the model's block (--store-blocks %d)", B, B)
}

// CheckModel refuses a model the method cannot serve exactly (a
// bidirectional one) and a block store whose blocks are not whole model
// blocks.
func (m *exactBlock) CheckModel(c *model.Config) error {
	B := c.CausalBlock()
	if B == 0 {
		return errors.New("exact-block needs a block-causal model (config.json \"block_causal\": true with a \"block_size\"); " +
			"this model's attention is bidirectional, so committed tokens' K/V change at every step and no cache of them is exact " +
			"(use none, or an approximate method: block, bicache)")
	}
	if bs, ok := m.o.Store.(*BlockStore); ok && bs.BlockSize()%B != 0 {
		return fmt.Errorf("exact-block: the block store's blocks of %d tokens are not a whole number of the model's blocks of %d "+
			"(a stored block would miss the positions after it in its model block): use --store-blocks %d or a multiple", bs.BlockSize(), B, B)
	}
	return nil
}

func (m *exactBlock) Planner(lm *model.Network, salt string, info *Info) sample.Planner {
	if info == nil {
		info = &Info{}
	}
	return &exactPlanner{meth: m, lm: lm, info: info,
		id: PrefixID{Fingerprint: m.o.Fingerprint, Salt: joinSalt(m.o.Salt, salt)}}
}

// exactPlanner keeps, at every layer, the final K/V of rows 0..cached-1
// (whole blocks before the current one) and computes rows cached..end-1
// at every step: the current block and whatever committed rows are not
// kept yet (the prompt's full blocks on the first step, the block just
// committed on a block's first step).
type exactPlanner struct {
	meth *exactBlock
	lm   *model.Network
	info *Info
	id   PrefixID

	B      int
	kv     kvBuffers // the forward writes every computed row's K/V here
	cached int       // rows 0..cached-1 hold final K/V in kv
	keepTo int       // this step's rows cached..keepTo-1 are final after it
	rows   []int32

	// The block store's chain of the prefix (held) and the prefix's
	// blocks after it, filled from the first step and stored after it.
	bs      *BlockStore
	chain   []*blockNode
	fresh   []*blockNode
	unclaim func() // ends the store's claim on the missing blocks

	// answers is the block store that keeps the answer's committed
	// blocks (nil: none, or a prompt at other position ids); kept is the
	// store blocks of the canvas given to it so far.
	answers *BlockStore
	kept    int
}

func (p *exactPlanner) Begin(r *sample.Request) error {
	if err := p.meth.CheckModel(p.lm.Config); err != nil {
		return err
	}
	p.B = p.lm.Config.CausalBlock()
	n := len(r.Canvas)
	// Every row attention reads is written before it is read (the stored
	// blocks, then each step's computed rows), so the buffers need no
	// clearing.
	// Where the backend keeps attention's layout of such buffers
	// (backend.KVAllocator), a step lays out only the rows it computed.
	p.kv = newKVBuffers(p.lm, n)
	for l := range p.kv.k {
		p.kv.k[l], p.kv.v[l] = backend.NewKV(p.kv.b, n, p.kv.cols)
	}
	m := r.PrefixLen
	p.info.PrefixToken = m
	p.info.Ratio = float64(m) / float64(n)
	if err := p.fromStore(r); err != nil {
		p.End()
		return err
	}
	if !fromZero(r.Positions, len(r.Positions)) {
		p.answers = nil // the store holds blocks at positions 0, 1, 2, … only
	}
	return nil
}

// fromZero reports whether the first n position ids of pos are 0, 1, 2, …
// (nil: every position is its index).
func fromZero(pos []int32, n int) bool {
	for i := range min(n, len(pos)) {
		if pos[i] != int32(i) {
			return false
		}
	}
	return true
}

// fromStore copies the stored K/V of the shared prefix's full blocks into
// the kept rows; a block store's, those of every full block of the prompt
// it holds.
func (p *exactPlanner) fromStore(r *sample.Request) error {
	store, m := p.meth.o.Store, r.PrefixLen
	bs, blocks := store.(*BlockStore)
	if store == nil || m < p.B && !blocks {
		return nil
	}
	// The store computes prefixes at positions 0, 1, 2, …; a prompt
	// composed at other position ids gets none of them.
	if !fromZero(r.Positions, len(r.Prompt)) {
		return nil
	}
	id := p.id
	if blocks {
		p.answers, p.kept = bs, len(r.Prompt)/bs.BlockSize()
		// Every full block of the prompt, not only of the shared prefix:
		// a block's K/V depend on it and the blocks before it alone, so
		// the blocks after the prefix (a question, a conversation's
		// latest turn) are as exact for any later prompt that starts with
		// them, and a conversation's stored answer (StorePrefix) then
		// needs only the blocks from the prompt's end on.
		id.Tokens = r.Prompt
		p.fromBlocks(bs, id, m)
		return nil
	}
	id.Tokens = r.Prompt[:m]
	e, hit, rows, flops, err := store.Get(p.lm, id)
	if err != nil {
		return fmt.Errorf("computing the shared prefix: %w", err)
	}
	defer store.Release(e)
	h := len(e.Tokens) / p.B * p.B // a whole-prefix entry's partial last block is not exact
	p.info.QueryTokens, p.info.HitTokens = m, min(hit, h)
	p.info.Hit = rows == 0 && h > 0
	p.info.PrefixRows, p.info.PrefixFLOPs = rows, flops
	if h == 0 {
		return nil
	}
	p.info.Depth = len(p.lm.Blocks)
	p.copyIn(0, h, e.K, e.V)
	p.cached = h
	return nil
}

// fromBlocks copies the stored chain of id's full blocks (the prompt's,
// whose shared prefix is its first m tokens) into the kept rows. The
// blocks missing after it are not computed apart: the request's first
// step computes their rows anyway (every row from the chain's end on),
// and stores them from there (Observe, After) — exact, since a
// block-causal block's K/V depend on it and the blocks before it only.
// The request claims them in the store meanwhile, so a request arriving
// with the same prefix waits for that first step instead of computing the
// same blocks beside it (BlockStore.lookup).
// Info counts the shared prefix's tokens.
func (p *exactPlanner) fromBlocks(bs *BlockStore, id PrefixID, m int) {
	SB := bs.BlockSize()
	p.bs = bs
	p.chain, p.unclaim = bs.lookup(id, m)
	for i, n := range p.chain {
		p.copyIn(i*SB, (i+1)*SB, n.k, n.v)
	}
	nb := len(id.Tokens) / SB
	p.cached = len(p.chain) * SB
	p.info.QueryTokens, p.info.HitTokens = m, min(p.cached, m)
	p.info.Hit = m >= SB && p.cached >= m/SB*SB
	p.info.Depth = len(p.lm.Blocks)
	for i := len(p.chain); i < nb; i++ {
		p.fresh = append(p.fresh, bs.newNode(id, i))
	}
	if len(p.fresh) == 0 {
		p.releaseStore()
	}
}

// copyIn copies rows [lo, hi) of every layer's kept K/V from k and v
// ([hi-lo, kv] per layer).
func (p *exactPlanner) copyIn(lo, hi int, k, v []backend.Tensor) {
	rows := iota32(lo, hi)
	for l := range p.kv.k {
		p.kv.b.CopyRows(p.kv.k[l], rows, k[l], nil)
		p.kv.b.CopyRows(p.kv.v[l], rows, v[l], nil)
	}
}

// releaseStore lets go of the held chain, frees the blocks not stored and
// ends the claim on them (the requests waiting on it look again).
func (p *exactPlanner) releaseStore() {
	if p.bs == nil {
		return
	}
	p.bs.releaseNodes(p.chain)
	for _, n := range p.fresh {
		p.bs.freeNode(n)
	}
	p.unclaim()
	p.bs, p.chain, p.fresh, p.unclaim = nil, nil, nil, nil
}

func (p *exactPlanner) Plan(s *sample.Step) model.Plan {
	// Rows before the current block's model block are committed, and
	// final once computed over their final tokens: those not kept yet are
	// computed with the block and kept. Blocks are by position id
	// (non-decreasing along the rows).
	pos := func(i int) int {
		if s.Positions == nil {
			return i
		}
		return int(s.Positions[i])
	}
	cur := pos(s.BlockStart) / p.B
	p.keepTo = p.cached
	for p.keepTo < s.BlockStart && pos(p.keepTo)/p.B < cur {
		p.keepTo++
	}
	lo := p.cached
	if p.lm.Config.ShiftLogits {
		// A slot's logits come from the row before it.
		lo = min(lo, max(0, s.BlockStart-1))
	}
	// Through the end of the model block holding the current block's end,
	// within the input.
	end := min(fedLen(s), (s.BlockEnd+p.B-1)/p.B*p.B)
	p.rows = iota32(lo, end)
	return p
}

func (p *exactPlanner) After(s *sample.Step, _ []int32) {
	p.cached = p.keepTo
	if len(p.fresh) > 0 {
		// The first step computed the prefix's missing blocks: store them.
		p.chain, p.fresh = p.bs.put(p.chain, p.fresh), nil
		p.releaseStore()
	}
	p.keepAnswer(s.Canvas)
}

// keepAnswer gives the block store the store blocks of the canvas whose
// K/V became final (committed answer blocks, and the block holding the
// prompt's end with the answer's start), copied from the kept rows: no
// forward. A conversation's next turn, whose prompt starts with this one
// and its answer, then finds them, as an autoregressive server's prefix
// cache finds a reply's blocks. They are leaves of the prompt's chain, so
// the store's LRU evicts them before the prefix they extend.
func (p *exactPlanner) keepAnswer(canvas []int32) {
	if p.answers == nil {
		return
	}
	nb := p.cached / p.answers.BlockSize()
	if nb <= p.kept {
		return
	}
	id := p.id
	id.Tokens = canvas[:nb*p.answers.BlockSize()]
	p.answers.keep(id, nb, p.kv.k, p.kv.v)
	p.kept = nb
}

func (p *exactPlanner) End() {
	p.releaseStore()
	if p.kv.k != nil {
		p.kv.free()
	}
}

func (p *exactPlanner) Rows(int) []int32 { return p.rows }

func (p *exactPlanner) Hidden(l int, _ []int32, _ backend.Tensor) error {
	return fmt.Errorf("cache: exact-block computes the same rows at every layer (layer %d)", l)
}

// KVBuffers hands the forward the kept K/V (model.KVHolder): it writes
// each step's computed rows into them and attends over them in place, so
// the kept rows are never copied and nothing needs keeping in Observe.
func (p *exactPlanner) KVBuffers(l int) (k, v backend.Tensor) { return p.kv.k[l], p.kv.v[l] }

// KV supplies the kept rows where the forward cannot attend over the
// buffers in place; rows after the current block (when the forward is
// given them) are never attended to by the computed ones.
func (p *exactPlanner) KV(l int, rows []int32, k, v backend.Tensor) error {
	return p.kv.fill(l, rows, k, v)
}

// Observe keeps nothing (the forward wrote the computed rows' K/V into
// the buffers) except, on the first step, the prefix blocks missing from
// the block store: their K/V, rows of this step's computed ones (not their
// hidden states: on a block-causal model nothing reads them).
func (p *exactPlanner) Observe(l int, _ []int32, _, k, v backend.Tensor) {
	if len(p.fresh) == 0 {
		return
	}
	b, SB := p.kv.b, p.bs.BlockSize()
	for j, n := range p.fresh {
		lo := (len(p.chain) + j) * SB
		rows := iota32(lo, lo+SB)
		nk, nv := backend.NewUninit(b, SB, k.Cols()), backend.NewUninit(b, SB, v.Cols())
		b.CopyRows(nk, nil, k, rows)
		b.CopyRows(nv, nil, v, rows)
		n.addLayer(nk, nv, nil)
	}
}

// tiles says whether c is block-causal with blocks that tile store blocks
// of n tokens.
func tiles(c *model.Config, n int) bool {
	B := c.CausalBlock()
	return B > 0 && n%B == 0
}

// fedLen is the number of tokens step s's forward is given.
func fedLen(s *sample.Step) int {
	if s.Len > 0 {
		return s.Len
	}
	return len(s.Canvas)
}
