package cache

import (
	"errors"
	"fmt"

	"github.com/dlmcache/dlmcache/model"
	"github.com/dlmcache/dlmcache/model/backend"
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
// computed: an autoregressive server's prefix cache, exact.
//
// It leaves the generation options alone (the model's own decoder and
// schedule), and refuses a bidirectional model, whose prefix K/V change
// with every answer token.
type exactBlock struct{ base }

func newExactBlock(o Options) (Method, error) {
	return &exactBlock{base{"exact-block", o}}, nil
}

func (m *exactBlock) Store() PrefixStore { return m.o.Store }

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

// ModelChecker is a method that serves only some models: CheckModel says
// why it cannot serve c (nil: it can).
type ModelChecker interface {
	CheckModel(c *model.Config) error
}

// CheckModel reports why meth cannot serve a model of config c (nil: it
// can). Methods that serve every model pass.
func CheckModel(meth Method, c *model.Config) error {
	if mc, ok := meth.(ModelChecker); ok {
		return mc.CheckModel(c)
	}
	return nil
}

func (m *exactBlock) Planner(lm *model.LLaDA, salt string, info *Info) model.Planner {
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
	lm   *model.LLaDA
	info *Info
	id   PrefixID

	B      int
	kv     kvBuffers // the forward writes every computed row's K/V here
	cached int       // rows 0..cached-1 hold final K/V in kv
	keepTo int       // this step's rows cached..keepTo-1 are final after it
	rows   []int32
}

func (p *exactPlanner) Begin(r *model.Request) error {
	if err := p.meth.CheckModel(p.lm.Config); err != nil {
		return err
	}
	p.B = p.lm.Config.CausalBlock()
	n := len(r.Canvas)
	// Every row attention reads is written before it is read (the stored
	// blocks, then each step's computed rows), so the buffers need no
	// clearing.
	p.kv = newKVBuffers(p.lm, n)
	newT := p.kv.b.New
	if u, ok := p.kv.b.(backend.Uninit); ok {
		newT = u.NewUninit
	}
	for l := range p.kv.k {
		p.kv.k[l], p.kv.v[l] = newT(n, p.kv.cols), newT(n, p.kv.cols)
	}
	m := r.PrefixLen
	p.info.PrefixToken = m
	p.info.Ratio = float64(m) / float64(n)
	if err := p.fromStore(r); err != nil {
		p.End()
		return err
	}
	return nil
}

// fromStore copies the stored K/V of the shared prefix's full blocks into
// the kept rows.
func (p *exactPlanner) fromStore(r *model.Request) error {
	store, m := p.meth.o.Store, r.PrefixLen
	if store == nil || m < p.B {
		return nil
	}
	// The store computes prefixes at positions 0, 1, 2, …; a prompt
	// composed at other position ids gets none of them.
	for i := range m {
		if r.Positions != nil && r.Positions[i] != int32(i) {
			return nil
		}
	}
	id := p.id
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
	stored := iota32(0, h)
	for l := range p.kv.k {
		p.kv.b.CopyRows(p.kv.k[l], stored, e.K[l], stored)
		p.kv.b.CopyRows(p.kv.v[l], stored, e.V[l], stored)
	}
	p.cached = h
	return nil
}

func (p *exactPlanner) Plan(s *model.Step) model.Plan {
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

func (p *exactPlanner) After(*model.Step, []int32) { p.cached = p.keepTo }

func (p *exactPlanner) End() {
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

// Observe has nothing to do: the forward wrote the computed rows' K/V
// into the buffers.
func (p *exactPlanner) Observe(int, []int32, backend.Tensor, backend.Tensor, backend.Tensor) {}

// tiles says whether c is block-causal with blocks that tile store blocks
// of n tokens.
func tiles(c *model.Config, n int) bool {
	B := c.CausalBlock()
	return B > 0 && n%B == 0
}

// fedLen is the number of tokens step s's forward is given.
func fedLen(s *model.Step) int {
	if s.Len > 0 {
		return s.Len
	}
	return len(s.Canvas)
}
