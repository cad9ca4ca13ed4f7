package model

import (
	"fmt"
	"runtime"
	"slices"
	"sort"
	"sync"

	"github.com/dlmcache/dlmcache/model/backend"
)

// Forwarder runs one forward; Network.Forward is one, and a server that
// batches the forwards of concurrent generations supplies another through
// GenOptions.Forward.
type Forwarder func(in Input, plan Plan) (*Output, error)

// Forward runs the model once over in.Tokens, steered by plan (nil: compute
// everything): ForwardBatch with a batch of one.
func (m *Network) Forward(in Input, plan Plan) (*Output, error) {
	outs, err := m.ForwardBatch([]Input{in}, []Plan{plan})
	if err != nil {
		return nil, err
	}
	return outs[0], nil
}

// ForwardBatch runs the forwards of several requests as one; it is the
// model's only forward (Forward is a batch of one). At every layer the
// computed rows of all requests go through the weight products (and the
// row-wise norms, RoPE, SiLU and residual adds) together, while
// attention, the plans' K/V and hidden states stay per request (a
// block-diagonal attention). Each request's result is what it gets alone,
// up to the matrix library's rounding for a different number of rows in
// one product (identical where its kernels do not depend on the row count,
// as the tests check). plans may be nil or hold nil entries (compute
// everything).
//
// On a block-causal model (Config.BlockCausal) each request's computed
// rows are grouped by attention block (a causal LM, Config.Causal: blocks
// of one position), and a block's rows attend only the
// keys of its block and those before: one attention over that prefix of
// the keys, so the scores of later blocks are never computed (the same
// call site for every backend; views of the prefix where the backend has
// them, copies otherwise).
//
// Each layer runs in three stages: enter (the rows each request computes
// and their hidden states, side by side), attention (per request, its
// plan's K/V completing the computed rows'), and the block's output
// products; logits are one head product for every request's wanted rows.
func (m *Network) ForwardBatch(ins []Input, plans []Plan) ([]*Output, error) {
	f, err := m.newBatch(ins, plans)
	if err != nil {
		return nil, err
	}
	defer f.ar.free()
	for l := range m.Blocks {
		blk := &m.Blocks[l]
		x, pos, err := f.enter(l)
		if err != nil {
			return nil, err
		}
		q, k, v := m.attnInput(blk, x, pos, f.ar)
		att, err := f.attention(l, q, k, v)
		if err != nil {
			return nil, err
		}
		// The plans copied what they keep of k and v (Observe, a
		// KVHolder's buffers); a request's full-width K/V are its own.
		f.ar.release(q, k, v)
		o, y := m.blockOutput(blk, x, att, f.ar, f.carry)
		if err := f.leave(l, x, o, y); err != nil {
			return nil, err
		}
	}
	return f.logits()
}

// batch is the state of one ForwardBatch.
type batch struct {
	m     *Network
	items []*batchItem
	ar    *arena
	vw    backend.Viewer // nil on a backend without views
	total int            // batch rows at the current layer
	// bx: the previous layer's batch hidden states, of which every it.x
	// is a row view (on a backend with views, more than one request); a
	// layer whose requests compute the same rows as the previous one
	// starts from it as it is.
	bx backend.Tensor
	// carry: some request's plan is a Carrier (the blocks' attention and
	// MLP outputs are kept for it).
	carry bool
}

// batchItem is one request's state inside ForwardBatch.
type batchItem struct {
	idx          int // index in the batch
	in           Input
	plan         Plan
	pos          []int32
	x            backend.Tensor // hidden state entering the layer, computed rows
	rows         []int32        // rows computed at the current layer
	off          int            // first row of this request in the batch
	kFull, vFull backend.Tensor // full-width K/V when some rows are not computed
	out          *Output
	carrier      Carrier        // the plan, where it is one
	carried      []int32        // rows the current layer carries (Carrier)
	cx           backend.Tensor // their hidden states entering it
}

// newBatch validates the requests and sets up the batch.
func (m *Network) newBatch(ins []Input, plans []Plan) (*batch, error) {
	if len(ins) == 0 {
		return nil, fmt.Errorf("forward batch: no inputs")
	}
	if plans != nil && len(plans) != len(ins) {
		return nil, fmt.Errorf("forward batch: %d plans for %d inputs", len(plans), len(ins))
	}
	f := &batch{m: m, items: make([]*batchItem, len(ins)), ar: &arena{b: m.Backend}}
	f.vw, _ = m.Backend.(backend.Viewer)
	for i, in := range ins {
		it := &batchItem{idx: i, in: in, out: &Output{}}
		f.items[i] = it
		pos, err := m.checkInput(in)
		if err != nil {
			return nil, f.fail(it, err)
		}
		it.pos = pos
		if plans != nil {
			it.plan = plans[i]
			it.carrier, _ = it.plan.(Carrier)
			f.carry = f.carry || it.carrier != nil
		}
	}
	return f, nil
}

// fail names the request an error belongs to where the batch has several.
func (f *batch) fail(it *batchItem, err error) error {
	if len(f.items) == 1 {
		return err
	}
	return fmt.Errorf("request %d of the batch: %w", it.idx, err)
}

// single reports a batch of one request, whose tensors are the batch's.
func (f *batch) single() bool { return len(f.items) == 1 }

// enter sets each request's rows computed at layer l and their hidden
// states entering it (the embeddings at layer 0; the previous layer's
// rows, completed from the plan, later), and returns the batch's hidden
// states [total, d] (one request after the other) with their RoPE
// positions.
func (f *batch) enter(l int) (backend.Tensor, []int32, error) {
	m := f.m
	b, c, alloc := m.Backend, m.Config, f.ar.alloc
	d := c.DModel
	total := 0
	moved := false // some request's rows changed from the last layer
	var pos []int32
	for _, it := range f.items {
		n := len(it.in.Tokens)
		cur := allRows(n)
		if it.plan != nil {
			if r := it.plan.Rows(l); r != nil {
				cur = r
			}
		}
		if len(cur) == 0 {
			return nil, nil, f.fail(it, fmt.Errorf("forward: plan computes no rows at layer %d", l))
		}
		if l == 0 {
			it.x = alloc(len(cur), d)
			b.Embed(it.x, m.Embed, gather32(it.in.Tokens, cur))
		} else if !slices.Equal(it.rows, cur) {
			moved = true
			nx := alloc(len(cur), d)
			if err := m.fillHidden(it.plan, l, it.rows, it.x, cur, nx, alloc); err != nil {
				return nil, nil, f.fail(it, err)
			}
			it.x = nx
		}
		it.rows, it.carried = cur, nil
		if it.carrier != nil {
			split, err := m.carry(it, l, alloc)
			if err != nil {
				return nil, nil, f.fail(it, err)
			}
			moved = moved || split
			cur = it.rows
		}
		it.off = total
		total += len(cur)
		pos = append(pos, gather32(it.pos, cur)...)
		it.out.RowsComputed += len(cur)
		it.out.FLOPs += c.layerFLOPs(len(cur), attendedKeys(c, it.pos, cur))
	}
	f.total = total
	if f.single() {
		return f.items[0].x, pos, nil
	}
	x := f.bx
	if x == nil || moved {
		x = alloc(total, d)
		for _, it := range f.items {
			b.CopyRows(x, it.sel(), it.x, nil)
		}
	}
	return x, pos, nil
}

// leave keeps layer l's output x [total, d] as each request's hidden
// states entering the next layer (with the rows a Carrier carried, on
// its outputs) and frees the layer's temporaries; o and y are the
// layer's attention and MLP outputs [total, d] where f.carry.
func (f *batch) leave(l int, x, o, y backend.Tensor) error {
	b, alloc := f.m.Backend, f.ar.alloc
	var keep []backend.Tensor
	if f.vw != nil && !f.single() {
		// The requests' hidden states are views of x: it outlives the
		// layer (freed with it, a request's view would read whatever the
		// next layer allocates there; a Carrier's request replaces its
		// view by a merged copy, the others keep theirs).
		keep = append(keep, x)
		if !f.carry {
			f.bx = x
		}
	}
	for _, it := range f.items {
		if it.carrier != nil {
			it.carrier.ObserveOutputs(l, it.rows, f.rowsOf(it, o), f.rowsOf(it, y))
		}
		switch {
		case f.single():
			it.x = x
		case f.vw != nil:
			it.x = f.vw.ViewRows(x, it.off, it.off+len(it.rows))
		default:
			nx := alloc(len(it.rows), f.m.Config.DModel)
			b.CopyRows(nx, nil, x, it.sel())
			it.x = nx
		}
		if len(it.carried) > 0 {
			if err := f.m.carryOn(it, l, alloc); err != nil {
				return f.fail(it, err)
			}
		}
		keep = append(keep, it.x, it.kFull, it.vFull)
	}
	f.ar.keepOnly(keep...)
	return nil
}

// rowsOf is the request's rows of the batch tensor t [total, d]: t
// itself for a batch of one, a view, or a copy.
func (f *batch) rowsOf(it *batchItem, t backend.Tensor) backend.Tensor {
	switch {
	case f.single():
		return t
	case f.vw != nil:
		return f.vw.ViewRows(t, it.off, it.off+len(it.rows))
	}
	r := f.ar.alloc(len(it.rows), t.Cols())
	f.m.Backend.CopyRows(r, nil, t, it.sel())
	return r
}

// carry asks the request's Carrier which of the rows entering layer l it
// carries and, where it carries some, keeps their hidden states aside
// (it.cx) and leaves it.rows and it.x the rows computed; split reports
// that it did.
func (m *Network) carry(it *batchItem, l int, alloc func(int, int) backend.Tensor) (split bool, err error) {
	if !it.carrier.Carries(l) {
		return false, nil
	}
	b, c := m.Backend, m.Config
	blk := &m.Blocks[l]
	rows, r := it.rows, len(it.rows)
	nrm, v := alloc(r, c.DModel), alloc(r, c.KVDim())
	b.RMSNorm(nrm, it.x, blk.AttnNorm, float32(c.RMSNormEps))
	b.MatMul(v, nrm, blk.V)
	m.hostRows(v, blk.VBias, nil, 0, 0)
	it.out.FLOPs += 2 * float64(r) * float64(c.DModel) * float64(c.KVDim())
	u := it.carrier.Carry(l, rows, v)
	if len(u) == 0 {
		return false, nil
	}
	var ci, ui, comp []int32
	j := 0
	for i, p := range rows {
		if j < len(u) && u[j] == p {
			ui = append(ui, int32(i))
			j++
		} else {
			ci = append(ci, int32(i))
			comp = append(comp, p)
		}
	}
	if j != len(u) {
		return false, fmt.Errorf("forward: layer %d: the plan carries rows it does not compute", l)
	}
	if len(comp) == 0 {
		return false, fmt.Errorf("forward: layer %d: the plan carries every row", l)
	}
	xc, xu := alloc(len(ci), c.DModel), alloc(len(ui), c.DModel)
	b.CopyRows(xc, nil, it.x, ci)
	b.CopyRows(xu, nil, it.x, ui)
	it.x, it.rows, it.carried, it.cx = xc, comp, u, xu
	return true, nil
}

// carryOn moves the rows layer l carried through it on the plan's
// outputs (their hidden state plus the attention output, then plus the
// MLP output) and merges them with the computed rows' output (it.x):
// it.rows and it.x become every row that entered the layer.
func (m *Network) carryOn(it *batchItem, l int, alloc func(int, int) backend.Tensor) error {
	b, d := m.Backend, m.Config.DModel
	u := it.carried
	att, mlp := alloc(len(u), d), alloc(len(u), d)
	if err := it.carrier.Outputs(l, u, att, mlp); err != nil {
		return fmt.Errorf("forward: layer %d: outputs of the carried rows: %w", l, err)
	}
	b.Add(it.cx, att)
	b.Add(it.cx, mlp)
	all := mergeSorted(it.rows, u)
	var ci, ui []int32
	j := 0
	for i, p := range all {
		if j < len(it.rows) && it.rows[j] == p {
			ci = append(ci, int32(i))
			j++
		} else {
			ui = append(ui, int32(i))
		}
	}
	nx := alloc(len(all), d)
	b.CopyRows(nx, ci, it.x, nil)
	b.CopyRows(nx, ui, it.cx, nil)
	it.x, it.rows, it.carried, it.cx = nx, all, nil, nil
	return nil
}

// mergeSorted is the union of two disjoint sorted row sets, sorted.
func mergeSorted(a, b []int32) []int32 {
	r := make([]int32, 0, len(a)+len(b))
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		if j == len(b) || i < len(a) && a[i] < b[j] {
			r = append(r, a[i])
			i++
		} else {
			r = append(r, b[j])
			j++
		}
	}
	return r
}

// sel is the batch rows of the request at the current layer.
func (it *batchItem) sel() []int32 {
	r := make([]int32, len(it.rows))
	for i := range r {
		r[i] = int32(it.off + i)
	}
	return r
}

// attention returns layer l's attention output [total, d] of the batch
// queries q against each request's own keys and values: the requests'
// operands (their plans' K/V and observers) prepared side by side, as many
// as there are threads, then every attention as one backend operation
// where the backend has one (else one after the other).
func (f *batch) attention(l int, q, k, v backend.Tensor) (backend.Tensor, error) {
	m := f.m
	b, c := m.Backend, m.Config
	att := f.ar.alloc(f.total, c.DModel)
	each := make([][]attnCall, len(f.items))
	errs := make([]error, len(f.items))
	if f.single() {
		each[0], errs[0] = f.attnArgs(l, f.items[0], q, k, v, att)
	} else {
		par := make(chan struct{}, runtime.GOMAXPROCS(0))
		var wg sync.WaitGroup
		for i, it := range f.items {
			wg.Add(1)
			par <- struct{}{}
			go func() {
				defer wg.Done()
				each[i], errs[i] = f.attnArgs(l, it, q, k, v, att)
				<-par
			}()
		}
		wg.Wait()
	}
	for i, err := range errs {
		if err != nil {
			return nil, f.fail(f.items[i], err)
		}
	}
	var calls []attnCall
	for _, cl := range each {
		calls = append(calls, cl...)
	}
	ab, batched := b.(backend.AttentionBatcher)
	if batched && len(calls) > 1 {
		var outs, qs, ks, vs []backend.Tensor
		for _, cl := range calls {
			outs, qs, ks, vs = append(outs, cl.out), append(qs, cl.q), append(ks, cl.k), append(vs, cl.v)
		}
		ab.AttentionBatch(outs, qs, ks, vs, c.NHeads, c.NKVHeads)
	} else {
		for _, cl := range calls {
			b.Attention(cl.out, cl.q, cl.k, cl.v, c.NHeads, c.NKVHeads)
		}
	}
	for _, cl := range calls {
		if cl.sel != nil {
			b.CopyRows(att, cl.sel, cl.out, nil)
		}
	}
	return att, nil
}

// attnCall is one attention of a batch: out = Attention(q, k, v); sel,
// where set, the batch rows of att that out is copied to (a backend
// without views).
type attnCall struct {
	out, q, k, v backend.Tensor
	sel          []int32
}

// attnArgs prepares layer l's attention of one request: its rows of q, k,
// v (batch tensors) completed with its plan's K/V and observed by the
// plan; the attentions (one, or one per attention block on a
// block-causal model) write its rows of att.
func (f *batch) attnArgs(l int, it *batchItem, q, k, v, att backend.Tensor) ([]attnCall, error) {
	m := f.m
	b, c, alloc := m.Backend, m.Config, f.ar.alloc
	n, r := len(it.in.Tokens), len(it.rows)
	// The request's rows of the batch tensors are rows [off, off+r): the
	// tensors themselves when it is all of them, views where the backend
	// has them, else copies.
	var qi, ki, vi, ai backend.Tensor
	var sel []int32
	switch {
	case it.off == 0 && r == q.Rows():
		qi, ki, vi, ai = q, k, v, att
	case f.vw != nil:
		vw := f.vw
		qi, ki, vi = vw.ViewRows(q, it.off, it.off+r), vw.ViewRows(k, it.off, it.off+r), vw.ViewRows(v, it.off, it.off+r)
		ai = vw.ViewRows(att, it.off, it.off+r)
	default:
		sel = it.sel()
		qi, ki, vi = alloc(r, c.DModel), alloc(r, c.KVDim()), alloc(r, c.KVDim())
		b.CopyRows(qi, nil, q, sel)
		b.CopyRows(ki, nil, k, sel)
		b.CopyRows(vi, nil, v, sel)
		ai = alloc(r, c.DModel)
	}
	K, V := ki, vi
	held := false
	if hk, hv := f.holder(it, l); hk != nil {
		// The plan holds the K/V: the computed rows are written into its
		// buffers, and attention reads them there where it can (the
		// kept rows in place).
		b.CopyRows(hk, it.rows, ki, nil)
		b.CopyRows(hv, it.rows, vi, nil)
		if hk.Rows() == n {
			K, V, held = hk, hv, true
		} else if f.vw != nil {
			K, V, held = f.vw.ViewRows(hk, 0, n), f.vw.ViewRows(hv, 0, n), true
		}
	}
	if !held && r != n {
		if it.kFull == nil {
			it.kFull, it.vFull = alloc(n, c.KVDim()), alloc(n, c.KVDim())
		}
		b.CopyRows(it.kFull, it.rows, ki, nil)
		b.CopyRows(it.vFull, it.rows, vi, nil)
		if err := it.plan.KV(l, complement(it.rows, n), it.kFull, it.vFull); err != nil {
			return nil, fmt.Errorf("forward: layer %d: K/V for uncomputed rows: %w", l, err)
		}
		K, V = it.kFull, it.vFull
	}
	calls := f.blockCalls(it, attnCall{out: ai, q: qi, k: K, v: V, sel: sel})
	m.observe(it.plan, l, it.rows, it.x, K, V, calls)
	return calls, nil
}

// holder returns the plan's own K/V buffers of layer l (KVHolder), or
// nils when it has none that cover the request's rows.
func (f *batch) holder(it *batchItem, l int) (k, v backend.Tensor) {
	h, ok := it.plan.(KVHolder)
	if !ok {
		return nil, nil
	}
	k, v = h.KVBuffers(l)
	if n := len(it.in.Tokens); k == nil || v == nil || k.Rows() < n || v.Rows() < n {
		return nil, nil
	}
	return k, v
}

// blockCalls splits one request's attention cl (its computed rows against
// all n keys) for a block-causal model: the computed rows of one attention
// block b (their position ids in [b·B, (b+1)·B)) attend the keys of blocks
// 0..b, a prefix of the rows since the position ids do not decrease
// (checkInput), so each block's rows are one attention over that prefix of
// the keys and values, and the keys of later blocks are never read (no
// masked scores are computed). On a bidirectional model, or where the
// rows' prefix is every key, it is cl itself.
func (f *batch) blockCalls(it *batchItem, cl attnCall) []attnCall {
	B := int32(f.m.Config.attnBlock())
	if B == 0 {
		return []attnCall{cl}
	}
	n, r := len(it.in.Tokens), len(it.rows)
	var calls []attnCall
	for lo := 0; lo < r; {
		blk := it.pos[it.rows[lo]] / B
		hi := lo + 1
		for hi < r && it.pos[it.rows[hi]]/B == blk {
			hi++
		}
		keys := keysThrough(it.pos, blk, B)
		if lo == 0 && hi == r && keys == n {
			return []attnCall{cl}
		}
		calls = append(calls, f.subCall(it, cl, lo, hi, keys))
		lo = hi
	}
	return calls
}

// keysThrough is the number of leading positions (non-decreasing ids pos)
// in attention blocks 0..blk of size B.
func keysThrough(pos []int32, blk, B int32) int {
	return sort.Search(len(pos), func(j int) bool { return pos[j]/B > blk })
}

// subCall is the attention of the request's computed rows [lo, hi) (rows
// of cl.q and cl.out) over the first keys rows of cl.k and cl.v: views
// where the backend has them, else copies written back to the batch rows
// of att.
func (f *batch) subCall(it *batchItem, cl attnCall, lo, hi, keys int) attnCall {
	if vw := f.vw; vw != nil {
		return attnCall{out: vw.ViewRows(cl.out, lo, hi), q: vw.ViewRows(cl.q, lo, hi),
			k: vw.ViewRows(cl.k, 0, keys), v: vw.ViewRows(cl.v, 0, keys)}
	}
	b, c, alloc := f.m.Backend, f.m.Config, f.ar.alloc
	sub := attnCall{out: alloc(hi-lo, c.DModel), q: alloc(hi-lo, c.DModel),
		k: alloc(keys, c.KVDim()), v: alloc(keys, c.KVDim()), sel: iotaFrom(it.off+lo, hi-lo)}
	b.CopyRows(sub.q, nil, cl.q, iotaFrom(lo, hi-lo))
	b.CopyRows(sub.k, nil, cl.k, nil)
	b.CopyRows(sub.v, nil, cl.v, nil)
	return sub
}

// logits returns every request's output, with the logits of its wanted
// rows, all of them through one head product.
func (f *batch) logits() ([]*Output, error) {
	m := f.m
	b, c, alloc := m.Backend, m.Config, f.ar.alloc
	outs := make([]*Output, len(f.items))
	idx := make([][]int32, len(f.items))
	var hrows int
	for i, it := range f.items {
		outs[i] = it.out
		if len(it.in.LogitRows) == 0 {
			continue
		}
		j, err := indexIn(it.rows, c.logitSources(it.in.LogitRows))
		if err != nil {
			return nil, f.fail(it, fmt.Errorf("forward: logits: %w", err))
		}
		idx[i] = j
		hrows += len(j)
	}
	if hrows == 0 {
		return outs, nil
	}
	d := c.DModel
	hx := alloc(hrows, d)
	at := 0
	for i, it := range f.items {
		if len(idx[i]) > 0 {
			b.CopyRows(hx, iotaFrom(at, len(idx[i])), it.x, idx[i])
		}
		at += len(idx[i])
	}
	hn := alloc(hrows, d)
	b.RMSNorm(hn, hx, m.Norm, float32(c.RMSNormEps))
	f.ar.release(hx)
	e := c.Embeddings()
	var all []float32
	var release func()
	if h, ok := b.(backend.Hoster); ok {
		if l, ok := b.(backend.Lender); ok && f.single() {
			all = l.Lend(hrows * e)
			release = func() { l.Return(all) }
		} else {
			all = make([]float32, hrows*e)
		}
		lg := h.OnHost(hrows, e, all)
		b.MatMul(lg, hn, m.Head)
		b.Free(lg)
	} else {
		lg := alloc(hrows, e)
		b.MatMul(lg, hn, m.Head)
		all = b.ToHost(lg, nil)
	}
	at = 0
	for i, it := range f.items {
		k := len(idx[i])
		if k == 0 {
			continue
		}
		it.out.Logits = all[at*e : (at+k)*e : (at+k)*e]
		it.out.release = release // set for a forward alone only
		it.out.FLOPs += c.HeadFLOPs(k)
		at += k
	}
	return outs, nil
}

// iotaFrom is lo, lo+1, …, lo+n-1.
func iotaFrom(lo, n int) []int32 {
	r := make([]int32, n)
	for i := range r {
		r[i] = int32(lo + i)
	}
	return r
}

// checkInput validates one forward's input and returns its position ids.
func (m *Network) checkInput(in Input) ([]int32, error) {
	n := len(in.Tokens)
	if n == 0 {
		return nil, fmt.Errorf("forward: no tokens")
	}
	pos := in.Positions
	if pos == nil {
		pos = iota32(n)
	} else if len(pos) != n {
		return nil, fmt.Errorf("forward: %d position ids for %d tokens", len(pos), n)
	}
	for _, t := range in.Tokens {
		if t < 0 || int(t) >= m.Config.Embeddings() {
			return nil, fmt.Errorf("forward: token id %d outside the vocabulary (%d)", t, m.Config.Embeddings())
		}
	}
	if m.Config.attnBlock() > 0 {
		for i, p := range pos {
			if p < 0 || (i > 0 && p < pos[i-1]) {
				return nil, fmt.Errorf("forward: a causal or block-causal model needs non-negative, non-decreasing position ids (id %d at token %d)", p, i)
			}
		}
	}
	for _, p := range in.LogitRows {
		if p < 0 || int(p) >= n {
			return nil, fmt.Errorf("forward: logit row %d outside the %d tokens", p, n)
		}
	}
	return pos, nil
}

// logitSources is the rows whose last hidden states give the logits of
// positions rows: the rows themselves, or with ShiftLogits each row's
// predecessor (row 0 its own).
func (c *Config) logitSources(rows []int32) []int32 {
	if !c.ShiftLogits {
		return rows
	}
	src := make([]int32, len(rows))
	for i, p := range rows {
		src[i] = max(p-1, 0)
	}
	return src
}
