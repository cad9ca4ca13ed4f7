package cache

import (
	"fmt"

	"github.com/dlmcache/dlmcache/model"
	"github.com/dlmcache/dlmcache/model/backend"
	"github.com/dlmcache/dlmcache/model/sample"
)

// shallow is BiCache's layer partition wrapped around another planner (the
// way ollama's kvcache wrapper composes two caches): layers 0..d-1 never
// compute the shared prefix's rows — their K/V come from the prefix store
// (or, with the request source, from the request's own first step) — and
// the inner planner steers every other row and layer. The prefix rows'
// hidden state entering layer d, when the inner planner computes them
// there, comes from the same source.
//
// With inner nil every non-prefix row is computed (prefix-all: d = L).
// bicache is shallow over deepRefresh; bicache+block, bicache+d2cache and
// bicache+freecache wrap the token-level caches.
type shallow struct {
	lm    *model.Network
	b     backend.Backend
	L     int
	store PrefixStore
	src   DeepSource
	id    PrefixID // fingerprint and salt; tokens filled per request
	info  *Info
	inner sample.Planner // nil: every row
	depth func(ratio float64) (d int, clamped bool)
	// offAtZero: depth 0 turns the whole method off (bicache: a bin
	// calibrated to keep no reuse computes every row, as none).
	offAtZero bool

	m, n, d int
	h       int // prefix rows layers 0..d-1 take from the source: m, or the stored blocks' rows
	inreq   bool
	entry   *Entry
	prefix  []int32
	kK, kV  []backend.Tensor // request source: layers < d, [m, kv]
	kH      backend.Tensor   // request source: hidden entering layer d, [m, d_model]

	ip     model.Plan // the inner planner's plan for this step
	pass   bool       // this step computes every row of every layer
	passed bool       // some step so far did (recompute: the inner planner holds every prefix row)
	first  bool       // request source: this is the step that fills kK, kV, kH
}

// depthAware planners are told the wrapper's depth before Begin.
type depthAware interface{ setDepth(d int) }

func (p *shallow) Begin(r *sample.Request) error {
	p.m, p.n = r.PrefixLen, len(r.Canvas)
	p.info.PrefixToken = p.m
	p.info.Ratio = float64(p.m) / float64(p.n)
	p.prefix = iota32(0, p.m)
	d, clamped := p.depth(p.info.Ratio)
	p.d, p.info.Clamped = min(d, p.L), clamped
	if p.m == 0 {
		p.d = 0
	}
	p.info.Depth = p.d
	p.inreq = p.src == SourceRequest && p.d > 0
	if p.d > 0 && !p.inreq {
		tokens := r.Prompt[:p.m]
		id := p.id
		id.Tokens = tokens
		e, hit, rows, flops, err := p.store.Get(p.lm, id)
		if err != nil {
			return fmt.Errorf("computing the shared prefix: %w", err)
		}
		p.entry, p.info.Hit = e, rows == 0
		p.info.QueryTokens, p.info.HitTokens = p.m, hit
		p.info.PrefixRows, p.info.PrefixFLOPs = rows, flops
		p.h = len(e.Tokens)
	} else {
		p.h = p.m
	}
	if p.inner != nil {
		if da, ok := p.inner.(depthAware); ok {
			da.setDepth(p.d)
		}
		if err := p.inner.Begin(r); err != nil {
			p.release()
			return err
		}
	}
	if p.inreq {
		kv := p.lm.Config.KVDim()
		for range p.d {
			p.kK = append(p.kK, p.b.New(p.m, kv))
			p.kV = append(p.kV, p.b.New(p.m, kv))
		}
		if p.d < p.L {
			p.kH = p.b.New(p.m, p.lm.Config.DModel)
		}
	}
	return nil
}

func (p *shallow) release() {
	if p.entry != nil {
		p.store.Release(p.entry)
		p.entry = nil
	}
}

func (p *shallow) End() {
	if p.inner != nil {
		p.inner.End()
	}
	p.release()
	for _, ts := range [][]backend.Tensor{p.kK, p.kV} {
		for _, t := range ts {
			p.b.Free(t)
		}
	}
	if p.kH != nil {
		p.b.Free(p.kH)
	}
	p.kK, p.kV, p.kH = nil, nil, nil
}

func (p *shallow) After(s *sample.Step, committed []int32) {
	if p.inner != nil {
		p.inner.After(s, committed)
	}
}

// Candidates passes a step's proposals on to an inner planner that wants
// them (d2Cache).
func (p *shallow) Candidates(s *sample.Step, c *sample.Candidates) {
	if co, ok := p.inner.(sample.CandidateObserver); ok {
		co.Candidates(s, c)
	}
}

// CandidateRows passes on an inner planner's narrowing of a step's
// candidates (d2Cache's top k).
func (p *shallow) CandidateRows(s *sample.Step, masked []int32) []int32 {
	if cn, ok := p.inner.(sample.CandidateNarrower); ok {
		return cn.CandidateRows(s, masked)
	}
	return nil
}

func (p *shallow) Plan(s *sample.Step) model.Plan {
	p.ip = nil
	if p.inner != nil {
		p.ip = p.inner.Plan(s)
	}
	if p.d == 0 {
		if p.offAtZero {
			return nil
		}
		return p.ip
	}
	p.first = p.inreq && s.Index == 0
	// The request source's first step computes everything and keeps what
	// later steps reuse; the recompute source passes the inner planner's
	// full steps (refreshes, block starts) through whole.
	p.pass = p.first || p.src == SourceRecompute && p.d < p.L && isFull(p.ip)
	p.passed = p.passed || p.pass
	return p
}

func (p *shallow) innerRows(l int) []int32 {
	if p.ip == nil {
		return nil
	}
	return p.ip.Rows(l)
}

func (p *shallow) Rows(l int) []int32 {
	r := p.innerRows(l)
	if p.pass || l >= p.d {
		return r
	}
	if r == nil {
		return iota32(p.h, p.n)
	}
	_, _, hi, _ := splitAt(r, p.h)
	if p.h < p.m && !keepsAll(p.ip) {
		// The prefix rows past the stored blocks are computed like the
		// suffix: the inner planner keeps no shallow K/V for them.
		hi = mergeRows(hi, iota32(p.h, p.m))
	}
	return hi
}

// mergeRows is the sorted union of two sorted row lists.
func mergeRows(a, b []int32) []int32 {
	r := make([]int32, 0, len(a)+len(b))
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case j == len(b) || i < len(a) && a[i] < b[j]:
			r = append(r, a[i])
			i++
		case i == len(a) || b[j] < a[i]:
			r = append(r, b[j])
			j++
		default:
			r = append(r, a[i])
			i, j = i+1, j+1
		}
	}
	return r
}

func (p *shallow) Hidden(l int, rows []int32, dst backend.Tensor) error {
	if l != p.d {
		return p.innerHidden(l, rows, dst)
	}
	pre, preIdx, rest, restIdx := splitAt(rows, p.h)
	if len(pre) > 0 {
		src := p.kH
		if !p.inreq {
			src = p.entry.H[l]
		}
		if src == nil {
			return fmt.Errorf("cache: no hidden state for layer %d", l)
		}
		p.b.CopyRows(dst, preIdx, src, pre)
	}
	if len(rest) == 0 {
		return nil
	}
	tmp := p.b.New(len(rest), p.lm.Config.DModel)
	defer p.b.Free(tmp)
	if err := p.innerHidden(l, rest, tmp); err != nil {
		return err
	}
	p.b.CopyRows(dst, restIdx, tmp, nil)
	return nil
}

func (p *shallow) innerHidden(l int, rows []int32, dst backend.Tensor) error {
	if p.ip == nil {
		return fmt.Errorf("cache: no hidden state for layer %d rows %d..", l, rows[0])
	}
	return p.ip.Hidden(l, rows, dst)
}

func (p *shallow) KV(l int, rows []int32, k, v backend.Tensor) error {
	if p.pass || l >= p.d || p.src == SourceRecompute && p.passed && keepsAll(p.ip) {
		// (With the recompute source a token-level cache last computed the
		// prefix rows itself, on its last full step: its K/V are those.)
		return p.innerKV(l, rows, k, v)
	}
	pre, _, rest, _ := splitAt(rows, p.h)
	if len(pre) > 0 {
		sk, sv := p.kK, p.kV
		if !p.inreq {
			sk, sv = p.entry.K, p.entry.V
		}
		p.b.CopyRows(k, pre, sk[l], pre)
		p.b.CopyRows(v, pre, sv[l], pre)
	}
	if len(rest) == 0 {
		return nil
	}
	return p.innerKV(l, rest, k, v)
}

func (p *shallow) innerKV(l int, rows []int32, k, v backend.Tensor) error {
	if p.ip == nil {
		return fmt.Errorf("cache: no K/V source for layer %d", l)
	}
	return p.ip.KV(l, rows, k, v)
}

func (p *shallow) Observe(l int, computed []int32, hidden, k, v backend.Tensor) {
	if p.first {
		// Every row is computed: row index = position.
		if l < p.d {
			p.b.CopyRows(p.kK[l], nil, k, p.prefix)
			p.b.CopyRows(p.kV[l], nil, v, p.prefix)
		} else if l == p.d && p.kH != nil {
			p.b.CopyRows(p.kH, nil, hidden, p.prefix)
		}
	}
	if p.ip != nil {
		p.ip.Observe(l, computed, hidden, k, v)
	}
}

// WantsAttention and ObserveAttention pass the attention weights on to an
// inner plan that asks for them.
func (p *shallow) WantsAttention(l int) bool {
	ao, ok := p.ip.(model.AttentionObserver)
	return ok && ao.WantsAttention(l)
}

func (p *shallow) ObserveAttention(l int, computed []int32, probs []float32) {
	p.ip.(model.AttentionObserver).ObserveAttention(l, computed, probs)
}
