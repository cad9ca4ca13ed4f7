package cache

import (
	"fmt"
	"strings"

	"github.com/dlmcache/dlmcache/lut"
	"github.com/dlmcache/dlmcache/model"
	"github.com/dlmcache/dlmcache/model/backend"
)

// Method is a caching method: a recipe for one planner per request. Every
// method steers the same forward through model.Plan.
//
//	none           every row, every layer, every step
//	prefix-all     the prefix's K/V from the store at every layer and step
//	               (what an autoregressive prefix cache does)
//	bicache        layers 1..d (d from the table for the request's ratio)
//	               from the store; deeper layers recompute the prefix rows
//	               every R steps and reuse them in between
//	block          Fast-dLLM's dual cache: a full forward at each block
//	               start, then only the block's rows (use with threshold
//	               decoding)
//	bicache+block  both: block starts skip the prefix rows of layers 1..d
type Method struct {
	Name    string
	Store   *Store     // prefix store (prefix-all, bicache, bicache+block)
	Table   *lut.Table // ratio → depth (bicache, bicache+block)
	Stat    lut.Statistic
	Refresh int // R: deep-layer refresh period in steps (bicache)
	// DeepSource says where the prefix rows of the first deep layer get
	// their input on refresh steps: "store" (the hidden state the prefix
	// had alone, entering layer d+1) or "recompute" (the refresh step
	// computes every row of every layer). bicache+block refreshes at block
	// starts: with "recompute" a block start computes every row, so its
	// K/V equal block's; with "store" its shallow layers skip the prefix
	// rows and the deep ones start from the stored hidden state.
	//
	// "request" keeps the shallow layers' prefix K/V and the hidden state
	// entering layer d+1 from the request's own first step (which computes
	// every row) instead of taking them from the store: later refresh steps
	// and block starts skip the prefix rows of layers 1..d, and the deep
	// layers recompute theirs from a hidden state that has seen the
	// question. It needs no store and no prefix-alone fill.
	DeepSource  string
	Fingerprint string // model fingerprint, part of the store key
	Salt        string // tenant isolation, part of the store key
}

// Methods lists the method names.
var Methods = []string{"none", "prefix-all", "bicache", "block", "bicache+block"}

// Validate checks that the method has what it needs.
func (m *Method) Validate() error {
	switch m.Name {
	case "none", "block":
	case "prefix-all":
		if m.Store == nil {
			return fmt.Errorf("method %s needs a prefix store", m.Name)
		}
	case "bicache", "bicache+block":
		if m.Table == nil {
			return fmt.Errorf("method %s needs a table (--lut)", m.Name)
		}
		if m.Store == nil && m.DeepSource != "request" {
			return fmt.Errorf("method %s needs a prefix store (or the request deep source)", m.Name)
		}
		if m.Name == "bicache" && m.Refresh <= 0 {
			return fmt.Errorf("method bicache: refresh period must be positive, got %d", m.Refresh)
		}
	default:
		return fmt.Errorf("unknown method %q (want one of %s)", m.Name, strings.Join(Methods, ", "))
	}
	switch m.DeepSource {
	case "", "store", "recompute", "request":
	default:
		return fmt.Errorf("deep refresh source %q: want store, recompute or request", m.DeepSource)
	}
	return nil
}

// Source is the deep source's name as tables key calibrations: "store"
// when unset.
func (m *Method) Source() string {
	if m.DeepSource == "" {
		return "store"
	}
	return m.DeepSource
}

// UsesBlocks reports whether the method is built around block decoding.
func (m *Method) UsesBlocks() bool { return strings.HasSuffix(m.Name, "block") }

// Info is what a request's planner did, for metrics.
type Info struct {
	Depth       int     // layers served from the store (0: none)
	Ratio       float64 // the request's shared-prefix ratio
	Clamped     bool    // the ratio lay outside the table's filled bins
	Hit         bool    // the prefix was in the store
	PrefixToken int     // prefix length m
	// PrefixRows is the (layer, row) pairs computed to fill the store on a
	// miss (the prefix run alone): L·m, or 0 on a hit.
	PrefixRows int
	// PrefixFLOPs is the matrix-product FLOPs of that fill (0 on a hit).
	PrefixFLOPs float64
}

// Planner returns the per-request planner for m on model lm. It returns nil
// for "none" (the forward then computes everything). info, if not nil, is
// filled in at the request's start.
func (m *Method) Planner(lm *model.LLaDA, info *Info) model.Planner {
	if m.Name == "none" {
		return nil
	}
	if info == nil {
		info = &Info{}
	}
	return &planner{meth: m, lm: lm, b: lm.Backend, L: len(lm.Blocks), info: info}
}

type planner struct {
	meth *Method
	lm   *model.LLaDA
	b    backend.Backend
	L    int
	info *Info

	m, n   int
	d      int // layers 0..d-1 take the prefix from the store
	entry  *Entry
	suffix []int32 // m..n-1
	prefix []int32 // 0..m-1

	keptPrefix []backend.Tensor // bicache: per layer from kpFrom on, [m, kv] K and V
	keptPV     []backend.Tensor
	kpFrom     int              // first layer in keptPrefix: d, or 0 with the request source
	inreq      bool             // DeepSource "request": no store, the first step's rows instead
	keptH      backend.Tensor   // request source: hidden state entering layer d, [m, d_model]; filled by step 1
	keptK      []backend.Tensor // block: per layer, [n, kv]
	keptV      []backend.Tensor

	// this step
	block       bool    // dual-cache step inside a block: only block rows
	blockRows   []int32 // [BlockStart, BlockEnd)
	refreshDeep bool    // deep layers compute every row this step
	recompute   bool    // this step computes every row of every layer
}

func iota32(lo, hi int) []int32 {
	r := make([]int32, 0, hi-lo)
	for i := lo; i < hi; i++ {
		r = append(r, int32(i))
	}
	return r
}

func (p *planner) Begin(r *model.Request) error {
	p.m, p.n = r.PrefixLen, len(r.Canvas)
	p.info.PrefixToken = p.m
	p.info.Ratio = float64(p.m) / float64(p.n)
	p.suffix, p.prefix = iota32(p.m, p.n), iota32(0, p.m)
	switch p.meth.Name {
	case "prefix-all":
		p.d = p.L
	case "bicache", "bicache+block":
		// A calibrated table's depth for the deep source served, else the
		// cosine statistic's.
		d, clamped := p.meth.Table.LookupSource(p.info.Ratio, p.meth.Stat, p.meth.Source())
		p.d, p.info.Clamped = min(d, p.L), clamped
	}
	if p.m == 0 {
		p.d = 0
	}
	p.inreq = p.meth.DeepSource == "request" && p.meth.Name != "prefix-all" && p.d > 0
	if p.d > 0 && !p.inreq {
		tokens := r.Prompt[:p.m]
		id := PrefixID{Fingerprint: p.meth.Fingerprint, Salt: p.meth.Salt, Tokens: tokens}
		e, hit, err := p.meth.Store.Acquire(id, func() (*Entry, error) { return ComputePrefix(p.lm, tokens) })
		if err != nil {
			return fmt.Errorf("computing the shared prefix: %w", err)
		}
		p.entry, p.info.Hit = e, hit
		if !hit {
			p.info.PrefixRows = p.L * p.m
			p.info.PrefixFLOPs = p.lm.Config.StepFLOPs(p.m, p.m, 0)
		}
	}
	p.info.Depth = p.d
	kv := p.lm.Config.KVDim()
	if p.meth.UsesBlocks() {
		for l := 0; l < p.L; l++ {
			p.keptK = append(p.keptK, p.b.New(p.n, kv))
			p.keptV = append(p.keptV, p.b.New(p.n, kv))
		}
	} else if p.d > 0 {
		p.kpFrom = p.d
		if p.inreq {
			p.kpFrom = 0
		}
		for l := p.kpFrom; l < p.L; l++ {
			p.keptPrefix = append(p.keptPrefix, p.b.New(p.m, kv))
			p.keptPV = append(p.keptPV, p.b.New(p.m, kv))
		}
	}
	if p.inreq && p.d < p.L {
		p.keptH = p.b.New(p.m, p.lm.Config.DModel)
	}
	return nil
}

func (p *planner) End() {
	if p.entry != nil {
		p.meth.Store.Release(p.entry)
		p.entry = nil
	}
	for _, ts := range [][]backend.Tensor{p.keptPrefix, p.keptPV, p.keptK, p.keptV} {
		for _, t := range ts {
			p.b.Free(t)
		}
	}
	if p.keptH != nil {
		p.b.Free(p.keptH)
	}
	p.keptPrefix, p.keptPV, p.keptK, p.keptV, p.keptH = nil, nil, nil, nil, nil
}

func (p *planner) After(*model.Step, []int32) {}

func (p *planner) Plan(s *model.Step) model.Plan {
	if p.d == 0 && p.meth.Name == "bicache" {
		return nil // depth 0 (a calibrated bin that keeps no reuse): every row, as none
	}
	p.block = p.meth.UsesBlocks() && s.BlockStep > 0
	p.blockRows = iota32(s.BlockStart, s.BlockEnd)
	switch {
	case p.meth.UsesBlocks():
		p.refreshDeep = true // a block start refreshes everything outside the store
	case p.meth.Refresh > 0:
		p.refreshDeep = s.Index%p.meth.Refresh == 0 // (t-1) mod R = 0
	default:
		p.refreshDeep = s.Index == 0
	}
	// Only BiCache has deep layers to refresh; prefix-all never recomputes.
	// bicache+block honours the source too: its block starts are its
	// refresh steps (docs/results.md: the stored hidden state loses what the
	// prefix rows read from the question in the shallow layers).
	p.recompute = p.refreshDeep && p.meth.DeepSource == "recompute" && p.d > 0 && p.d < p.L &&
		(!p.meth.UsesBlocks() || s.BlockStep == 0)
	if p.inreq {
		// The first step computes everything and keeps what later steps
		// reuse.
		p.recompute = s.Index == 0
	}
	return p
}

func (p *planner) Rows(l int) []int32 {
	switch {
	case p.block:
		return p.blockRows
	case p.recompute:
		return nil
	case l < p.d:
		return p.suffix
	case p.refreshDeep:
		return nil
	default:
		return p.suffix
	}
}

func (p *planner) Hidden(l int, rows []int32, dst backend.Tensor) error {
	if p.inreq && p.keptH != nil && l == p.d && len(rows) == p.m {
		p.b.CopyRows(dst, nil, p.keptH, nil)
		return nil
	}
	if p.entry == nil || l != p.d || len(rows) != p.m {
		return fmt.Errorf("cache: no hidden state for layer %d rows %d..", l, rows[0])
	}
	p.b.CopyRows(dst, nil, p.entry.H[l], nil)
	return nil
}

func (p *planner) KV(l int, rows []int32, k, v backend.Tensor) error {
	switch {
	case p.block, p.inreq && p.meth.UsesBlocks(): // (the latter: a block start's layers < d, rows are the prefix)
		p.b.CopyRows(k, rows, p.keptK[l], rows)
		p.b.CopyRows(v, rows, p.keptV[l], rows)
	case l < p.d && !p.inreq: // rows are the prefix 0..m-1
		p.b.CopyRows(k, rows, p.entry.K[l], nil)
		p.b.CopyRows(v, rows, p.entry.V[l], nil)
	case len(p.keptPrefix) > 0:
		p.b.CopyRows(k, rows, p.keptPrefix[l-p.kpFrom], nil)
		p.b.CopyRows(v, rows, p.keptPV[l-p.kpFrom], nil)
	default:
		return fmt.Errorf("cache: no K/V source for layer %d", l)
	}
	return nil
}

func (p *planner) Observe(l int, _ []int32, hidden, k, v backend.Tensor) {
	if p.inreq && p.recompute && l == p.d && p.keptH != nil {
		p.b.CopyRows(p.keptH, nil, hidden, p.prefix) // a recompute step computes rows 0..n-1
	}
	switch {
	case p.block:
	case p.meth.UsesBlocks():
		p.b.CopyRows(p.keptK[l], nil, k, nil)
		p.b.CopyRows(p.keptV[l], nil, v, nil)
	case l >= p.d && p.refreshDeep && len(p.keptPrefix) > 0,
		p.inreq && p.recompute: // the first step keeps every layer's prefix K/V
		p.b.CopyRows(p.keptPrefix[l-p.kpFrom], nil, k, p.prefix)
		p.b.CopyRows(p.keptPV[l-p.kpFrom], nil, v, p.prefix)
	}
}
