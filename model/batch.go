package model

import (
	"fmt"
	"runtime"
	"sync"

	"github.com/dlmcache/dlmcache/model/backend"
)

// Forwarder runs one forward; LLaDA.Forward is one, and a server that
// batches the forwards of concurrent generations supplies another through
// GenOptions.Forward.
type Forwarder func(in Input, plan Plan) (*Output, error)

// batchItem is one request's state inside ForwardBatch.
type batchItem struct {
	in           Input
	plan         Plan
	pos          []int32
	x            backend.Tensor // hidden state entering the layer, computed rows
	rows         []int32        // rows computed at the current layer
	off          int            // first row of this request in the batch
	kFull, vFull backend.Tensor // full-width K/V when some rows are not computed
	out          *Output
}

// sel is the batch rows of the request at the current layer.
func (it *batchItem) sel() []int32 {
	r := make([]int32, len(it.rows))
	for i := range r {
		r[i] = int32(it.off + i)
	}
	return r
}

// ForwardBatch runs the forwards of several requests as one: at every
// layer the computed rows of all requests go through the weight products
// (and the row-wise norms, RoPE, SiLU and residual adds) together, while
// attention, the plans' K/V and hidden states stay per request (a
// block-diagonal attention). Each request's result is what Forward(ins[i],
// plans[i]) returns, up to the matrix library's rounding for a different
// number of rows in one product (identical where its kernels do not depend
// on the row count, as the tests check). plans may be nil or hold nil
// entries (compute everything).
func (m *LLaDA) ForwardBatch(ins []Input, plans []Plan) ([]*Output, error) {
	if len(ins) == 0 {
		return nil, fmt.Errorf("forward batch: no inputs")
	}
	if plans != nil && len(plans) != len(ins) {
		return nil, fmt.Errorf("forward batch: %d plans for %d inputs", len(plans), len(ins))
	}
	b, c := m.Backend, m.Config
	items := make([]*batchItem, len(ins))
	for i, in := range ins {
		pos, err := m.checkInput(in)
		if err != nil {
			return nil, fmt.Errorf("request %d of the batch: %w", i, err)
		}
		it := &batchItem{in: in, pos: pos, out: &Output{}}
		if plans != nil {
			it.plan = plans[i]
		}
		items[i] = it
	}
	d := c.DModel
	eps := float32(c.RMSNormEps)

	ar := &arena{b: b} // the requests' attentions allocate side by side
	alloc := ar.alloc
	defer ar.free()
	errs := make([]error, len(items))
	par := make(chan struct{}, runtime.GOMAXPROCS(0))

	// bx: the previous layer's batch hidden states, of which every
	// it.x is a row view (on a backend with views); a layer whose
	// requests compute the same rows as the previous one starts from it
	// as it is.
	vw, _ := b.(backend.Viewer)
	var bx backend.Tensor
	for l := range m.Blocks {
		blk := &m.Blocks[l]
		total := 0
		moved := false // some request's rows changed from the last layer
		var rp []int32 // RoPE positions of the batch rows
		for i, it := range items {
			n := len(it.in.Tokens)
			cur := allRows(n)
			if it.plan != nil {
				if r := it.plan.Rows(l); r != nil {
					cur = r
				}
			}
			if len(cur) == 0 {
				return nil, fmt.Errorf("forward batch: request %d: plan computes no rows at layer %d", i, l)
			}
			if l == 0 {
				it.x = alloc(len(cur), d)
				b.Embed(it.x, m.Embed, gather32(it.in.Tokens, cur))
			} else if !sameRows(it.rows, cur) {
				moved = true
				nx := alloc(len(cur), d)
				if err := m.fillHidden(it.plan, l, it.rows, it.x, cur, nx, alloc); err != nil {
					return nil, fmt.Errorf("request %d of the batch: %w", i, err)
				}
				it.x = nx
			}
			it.rows, it.off = cur, total
			total += len(cur)
			rp = append(rp, gather32(it.pos, cur)...)
			it.out.RowsComputed += len(cur)
			it.out.FLOPs += c.LayerFLOPs(n, len(cur))
		}

		// The batch's hidden states, one request after the other.
		x := bx
		if x == nil || moved {
			x = alloc(total, d)
			for _, it := range items {
				b.CopyRows(x, it.sel(), it.x, nil)
			}
		}
		q, k, v := m.attnInput(blk, x, rp, alloc)

		// Each request's attention over its own K/V: their plans' K/V
		// and observers side by side, as many as there are threads, then
		// the attentions as one operation where the backend has it (else
		// one after the other), on every thread.
		att := alloc(total, d)
		calls := make([]attnCall, len(items))
		var wg sync.WaitGroup
		for i, it := range items {
			wg.Add(1)
			par <- struct{}{}
			go func() {
				defer wg.Done()
				calls[i], errs[i] = m.attnArgs(l, it, q, k, v, att, alloc)
				<-par
			}()
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				return nil, fmt.Errorf("request %d of the batch: %w", i, err)
			}
		}
		if ab, ok := b.(backend.AttentionBatcher); ok {
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
		m.blockOutput(blk, x, att, alloc)

		var keep []backend.Tensor
		if vw != nil {
			bx = x
			keep = append(keep, x)
		}
		for _, it := range items {
			if vw != nil {
				it.x = vw.ViewRows(x, it.off, it.off+len(it.rows))
			} else {
				nx := alloc(len(it.rows), d)
				b.CopyRows(nx, nil, x, it.sel())
				it.x = nx
			}
			keep = append(keep, it.x, it.kFull, it.vFull)
		}
		ar.keepOnly(keep...)
	}

	// Logits of every request's wanted rows through one head product.
	var hrows int
	idx := make([][]int32, len(items))
	for i, it := range items {
		if len(it.in.LogitRows) == 0 {
			continue
		}
		j, err := indexIn(it.rows, it.in.LogitRows)
		if err != nil {
			return nil, fmt.Errorf("forward batch: request %d: logits: %w", i, err)
		}
		idx[i] = j
		hrows += len(j)
	}
	outs := make([]*Output, len(items))
	for i, it := range items {
		outs[i] = it.out
	}
	if hrows == 0 {
		return outs, nil
	}
	hx := alloc(hrows, d)
	at := 0
	for i := range items {
		dst := make([]int32, len(idx[i]))
		for j := range dst {
			dst[j] = int32(at + j)
		}
		if len(dst) > 0 {
			b.CopyRows(hx, dst, items[i].x, idx[i])
		}
		at += len(dst)
	}
	hn := alloc(hrows, d)
	b.RMSNorm(hn, hx, m.Norm, eps)
	e := c.Embeddings()
	lg := alloc(hrows, e)
	b.MatMul(lg, hn, m.Head)
	all := b.ToHost(lg, nil)
	at = 0
	for i, it := range items {
		k := len(idx[i])
		if k == 0 {
			continue
		}
		it.out.Logits = all[at*e : (at+k)*e : (at+k)*e]
		it.out.FLOPs += c.HeadFLOPs(k)
		at += k
	}
	return outs, nil
}

// attnCall is one request's attention in a batch: out = Attention(q, k,
// v); sel, where set, the batch rows of att that out is copied to (a
// backend without views).
type attnCall struct {
	out, q, k, v backend.Tensor
	sel          []int32
}

// attnArgs prepares layer l's attention of one request of a batch: its rows
// of q, k, v (batch tensors) completed with its plan's K/V and observed by
// the plan; the attention itself writes its rows of att.
func (m *LLaDA) attnArgs(l int, it *batchItem, q, k, v, att backend.Tensor, alloc func(int, int) backend.Tensor) (attnCall, error) {
	b, c := m.Backend, m.Config
	n, r := len(it.in.Tokens), len(it.rows)
	// The request's rows of the batch tensors are rows [off, off+r): views
	// where the backend has them, else copies.
	vw, view := b.(backend.Viewer)
	var qi, ki, vi, ai backend.Tensor
	var sel []int32
	if view {
		qi, ki, vi = vw.ViewRows(q, it.off, it.off+r), vw.ViewRows(k, it.off, it.off+r), vw.ViewRows(v, it.off, it.off+r)
		ai = vw.ViewRows(att, it.off, it.off+r)
	} else {
		sel = it.sel()
		qi, ki, vi = alloc(r, c.DModel), alloc(r, c.KVDim()), alloc(r, c.KVDim())
		b.CopyRows(qi, nil, q, sel)
		b.CopyRows(ki, nil, k, sel)
		b.CopyRows(vi, nil, v, sel)
		ai = alloc(r, c.DModel)
	}
	K, V := ki, vi
	if r != n {
		if it.kFull == nil {
			it.kFull, it.vFull = alloc(n, c.KVDim()), alloc(n, c.KVDim())
		}
		b.CopyRows(it.kFull, it.rows, ki, nil)
		b.CopyRows(it.vFull, it.rows, vi, nil)
		if err := it.plan.KV(l, complement(it.rows, n), it.kFull, it.vFull); err != nil {
			return attnCall{}, fmt.Errorf("forward: layer %d: K/V for uncomputed rows: %w", l, err)
		}
		K, V = it.kFull, it.vFull
	}
	m.observe(it.plan, l, it.rows, it.x, qi, K, V)
	return attnCall{out: ai, q: qi, k: K, v: V, sel: sel}, nil
}

// checkInput validates one forward's input and returns its position ids.
func (m *LLaDA) checkInput(in Input) ([]int32, error) {
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
	return pos, nil
}
