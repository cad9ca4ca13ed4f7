package cache

import (
	"errors"
	"fmt"
	"math"

	"github.com/spf13/pflag"

	"github.com/dlmcache/dlmcache/lut"
	"github.com/dlmcache/dlmcache/model"
	"github.com/dlmcache/dlmcache/model/backend"
	"github.com/dlmcache/dlmcache/model/sample"
)

// BiCacheOptions are BiCache's own settings (the bicache family's).
type BiCacheOptions struct {
	// Refresh is the deep refresh period R in steps.
	Refresh int
	// Drift, if > 0, replaces the fixed period by Elastic-Cache's trigger
	// γ: refresh when the cosine between the most-attended token's
	// attention column now and at the last refresh falls below γ, from the
	// first layer where it does (γ > 1: every step).
	Drift float64
}

// biCacheFlags are the bicache family's flags: the refresh period and
// trigger, and how the table is read (the statistic, the deep source).
// --refresh 0 and --deep-source auto are settled by Options.ForModel.
func biCacheFlags(fl *pflag.FlagSet, o *Options) {
	fl.IntVar(&o.BiCache.Refresh, "refresh", 0, "BiCache: recompute the deep layers' prefix K/V every R steps (0: the model card's R, else 16)")
	fl.Float64Var(&o.BiCache.Drift, "drift", 0, "bicache: Elastic-Cache's refresh trigger γ instead of the fixed period: refresh the deep layers when the most-attended token's attention column drifts below cosine γ (e.g. 0.9); 0: every --refresh steps")
	fl.StringVar((*string)(&o.DeepSource), "deep-source", string(SourceAuto), "BiCache refresh input of the deep layers: recompute (full step), store (stored hidden state at depth d), request (the request's own first step; needs no store) or auto (request: docs/results.md)")
	fl.StringVar((*string)(&o.Stat), "stat", string(lut.Mean), "table statistic served: mean (floor of the mean depth), mean-std, min")
}

// DeepSource says where BiCache's deep layers get the prefix rows' input on
// refresh steps.
type DeepSource string

const (
	// SourceStore: the hidden state the prefix had alone, entering layer
	// d+1, from the store (shallow prefix K/V shared across requests).
	SourceStore DeepSource = "store"
	// SourceRecompute: a refresh step computes every row of every layer.
	SourceRecompute DeepSource = "recompute"
	// SourceRequest: the request's own first step (which computes every
	// row) supplies the shallow layers' prefix K/V and the hidden state
	// entering layer d+1; no store is needed.
	SourceRequest DeepSource = "request"
	// SourceAuto lets the table choose (ResolveDeepSource): --deep-source's
	// default.
	SourceAuto DeepSource = "auto"
)

// ParseDeepSource parses a --deep-source value ("" is the store).
func ParseDeepSource(s string) (DeepSource, error) {
	switch DeepSource(s) {
	case "":
		return SourceStore, nil
	case SourceStore, SourceRecompute, SourceRequest:
		return DeepSource(s), nil
	}
	return "", fmt.Errorf("deep refresh source %q: want store, recompute or request", s)
}

// ResolveDeepSource resolves auto for table t: the store (prefix K/V
// shared across requests) when t is calibrated for it (dlmcache calibrate
// checked those depths against answers), else the request source, the one
// that kept every answer of the bundled model with a cosine table
// (docs/results.md: the store's stand-alone prefix K/V lose what the
// question writes into the prefix rows at cosine depths). Any other s is
// returned as it is (the methods that use it check it). why says which
// and why, for serve's startup line.
func ResolveDeepSource(s DeepSource, t *lut.Table) (source DeepSource, why string) {
	switch {
	case s != SourceAuto:
		return s, "--deep-source " + string(s)
	case t != nil && t.CalibratedFor(string(SourceStore)):
		return SourceStore, "the table is calibrated for the store source: shallow prefix K/V are shared across requests"
	case t != nil:
		return SourceRequest, "the table is not calibrated for the store source (dlmcache calibrate), so no prefix K/V are shared across requests; each request reuses its own first step's"
	}
	return SourceRequest, "no table"
}

// biCache is BiCache: layers 1..d, d from the table for the request's
// shared-prefix ratio, reuse the prefix's K/V (the shallow wrapper); the
// deeper layers keep the prefix rows' K/V within the request and refresh
// them every R steps, or, with a drift threshold, when Elastic-Cache's
// attention-drift signal fires (deepRefresh).
type biCache struct{ base }

func newBiCache(o Options) (Method, error) {
	if err := checkTable(o); err != nil {
		return nil, err
	}
	if o.BiCache.Refresh <= 0 && o.BiCache.Drift <= 0 {
		return nil, fmt.Errorf("refresh period (--refresh) must be positive, got %d", o.BiCache.Refresh)
	}
	if o.BiCache.Drift < 0 {
		return nil, fmt.Errorf("drift threshold must be positive (0: the fixed period), got %g", o.BiCache.Drift)
	}
	return &biCache{base{"bicache", o}}, nil
}

// biCacheKnobs are the bicache family's knobs: the depth (a table serving
// it at every ratio), the refresh period and the drift trigger.
var biCacheKnobs = []Knob{
	intKnob("depth", "layers whose prefix K/V are reused (0: none)", 0, func(o *Options, d int) {
		o.Table = DepthTable(lut.ModelID{Fingerprint: o.Fingerprint}, d)
	}),
	intKnob("refresh", "deep layers' refresh period R in steps", 1, func(o *Options, r int) { o.BiCache.Refresh = r }),
	floatKnob("drift", "Elastic-Cache's drift trigger γ (0: the fixed period)", 0, 2, func(o *Options, g float64) { o.BiCache.Drift = g }),
}

// biCacheGrid: the shallowest depths (deeper reuse broke long answers on
// the bundled model), the prefix K/V from the store shared across
// requests, on the schedule and under threshold decoding.
var biCacheGrid = []GridPoint{
	{Knobs: map[string]float64{"depth": 1}, Source: "store", Decoders: []string{"schedule", "threshold:0.9"}},
	{Knobs: map[string]float64{"depth": 2}, Source: "store", Decoders: []string{"schedule", "threshold:0.9"}},
}

// DefaultDrift is Elastic-Cache's γ when bicache-elastic is given none.
const DefaultDrift = 0.9

// newBiCacheElastic is bicache with the drift trigger on.
func newBiCacheElastic(o Options) (Method, error) {
	if o.BiCache.Drift == 0 {
		o.BiCache.Drift = DefaultDrift
	}
	m, err := newBiCache(o)
	if err != nil {
		return nil, err
	}
	m.(*biCache).name = "bicache-elastic"
	return m, nil
}

// checkTable validates what every bicache method needs: a table, and a
// store unless the request source serves the shallow layers.
func checkTable(o Options) error {
	if o.Table == nil {
		return errors.New("needs a table: pass --lut table.json (from dlmcache profile)")
	}
	if _, err := ParseDeepSource(string(o.DeepSource)); err != nil {
		return err
	}
	if o.Store == nil && o.DeepSource != SourceRequest {
		return errors.New("needs a prefix store (or the request deep source)")
	}
	return nil
}

func (m *biCache) Store() PrefixStore { return m.o.Store }
func (m *biCache) Table() *lut.Table  { return m.o.Table }

func (m *biCache) Source() string { return string(source(m.o.DeepSource)) }

func source(s DeepSource) DeepSource {
	if s == "" {
		return SourceStore
	}
	return s
}

func (m *biCache) Planner(lm *model.Network, salt string, info *Info) sample.Planner {
	deep := &deepRefresh{lm: lm, b: lm.Backend, L: len(lm.Blocks), period: m.o.BiCache.Refresh, drift: m.o.BiCache.Drift}
	p := tableWrapper(m.o, lm, salt, info, deep)
	p.offAtZero = true
	deep.info = p.info
	return p
}

// tableWrapper is the shallow wrapper with the table's depth around inner.
func tableWrapper(o Options, lm *model.Network, salt string, info *Info, inner sample.Planner) *shallow {
	if info == nil {
		info = &Info{}
	}
	src := source(o.DeepSource)
	return &shallow{lm: lm, b: lm.Backend, L: len(lm.Blocks), store: o.Store, src: src,
		id: PrefixID{Fingerprint: o.Fingerprint, Salt: joinSalt(o.Salt, salt)}, info: info, inner: inner,
		depth: func(r float64) (int, bool) { return o.Table.LookupSource(r, o.Stat, string(src)) }}
}

// joinSalt appends a request's salt to the method's.
func joinSalt(method, request string) string {
	if request == "" || request == method {
		return method
	}
	return method + "\x00" + request
}

// deepRefresh is BiCache's in-request half: the prefix rows of layers
// d..L-1 are computed on refresh steps and reused in between. The refresh
// fires every period steps, or with drift > 0 on Elastic-Cache's signal:
// per deep layer, the token that received the most attention at the last
// refresh, and the cosine between the attention the suffix rows put on it
// then and now; when it falls below drift at some layer, the next step
// refreshes the prefix rows from that layer on (the layers above it keep
// theirs), taking their hidden state entering that layer from the last
// refresh.
type deepRefresh struct {
	lm     *model.Network
	b      backend.Backend
	L      int
	period int
	drift  float64
	info   *Info

	m, n, d int
	prefix  []int32
	suffix  []int32
	keptK   []backend.Tensor // layers d..L-1: [m, kv]
	keptV   []backend.Tensor
	keptH   []backend.Tensor // drift: layers d..L-1, hidden entering the layer [m, d_model]

	refresh bool
	from    int // this step refreshes layers from..L-1
	pending int // drift fired at this layer in the last step (-1: no)
	star    []int
	ref     [][]float32 // per deep layer: the attention column at the last refresh
}

func (p *deepRefresh) setDepth(d int) { p.d = d }

func (p *deepRefresh) Begin(r *sample.Request) error {
	p.m, p.n = r.PrefixLen, len(r.Canvas)
	p.prefix, p.suffix = iota32(0, p.m), iota32(p.m, p.n)
	kv := p.lm.Config.KVDim()
	for l := p.d; l < p.L && p.m > 0; l++ {
		p.keptK = append(p.keptK, p.b.New(p.m, kv))
		p.keptV = append(p.keptV, p.b.New(p.m, kv))
		if p.drift > 0 {
			p.keptH = append(p.keptH, p.b.New(p.m, p.lm.Config.DModel))
		}
	}
	p.pending = -1
	p.star = make([]int, p.L)
	p.ref = make([][]float32, p.L)
	return nil
}

func (p *deepRefresh) End() {
	for _, ts := range [][]backend.Tensor{p.keptK, p.keptV, p.keptH} {
		for _, t := range ts {
			p.b.Free(t)
		}
	}
	p.keptK, p.keptV, p.keptH = nil, nil, nil
}

func (p *deepRefresh) After(*sample.Step, []int32) {}

func (p *deepRefresh) Plan(s *sample.Step) model.Plan {
	p.from = p.d
	switch {
	case s.Index == 0:
		p.refresh = true
	case p.drift > 0:
		p.refresh = p.pending >= 0
		if p.refresh {
			p.from = max(p.d, p.pending)
		}
	default:
		p.refresh = s.Index%p.period == 0 // (t-1) mod R = 0
	}
	p.pending = -1
	if p.refresh && p.d > 0 {
		p.info.Refreshes++
	}
	return p
}

func (p *deepRefresh) full() bool { return p.refresh && p.from == p.d }

func (p *deepRefresh) Rows(l int) []int32 {
	if p.refresh && (l >= p.from || l < p.d) {
		return nil
	}
	return p.suffix
}

// Hidden serves a drift refresh that starts above depth d: the prefix
// rows' hidden state entering layer from, kept at the last refresh.
func (p *deepRefresh) Hidden(l int, rows []int32, dst backend.Tensor) error {
	if len(p.keptH) == 0 || l <= p.d || len(rows) != p.m {
		return fmt.Errorf("cache: no hidden state for layer %d", l)
	}
	p.b.CopyRows(dst, nil, p.keptH[l-p.d], nil)
	return nil
}

func (p *deepRefresh) KV(l int, rows []int32, k, v backend.Tensor) error {
	if l < p.d || len(p.keptK) == 0 {
		return fmt.Errorf("cache: no K/V source for layer %d", l)
	}
	p.b.CopyRows(k, rows, p.keptK[l-p.d], rows)
	p.b.CopyRows(v, rows, p.keptV[l-p.d], rows)
	return nil
}

func (p *deepRefresh) Observe(l int, computed []int32, hidden, k, v backend.Tensor) {
	if !p.refresh || l < p.from || len(p.keptK) == 0 {
		return
	}
	// A refreshing layer computes every row: row index = position.
	p.b.CopyRows(p.keptK[l-p.d], nil, k, p.prefix)
	p.b.CopyRows(p.keptV[l-p.d], nil, v, p.prefix)
	if len(p.keptH) > 0 {
		p.b.CopyRows(p.keptH[l-p.d], nil, hidden, p.prefix)
	}
}

func (p *deepRefresh) WantsAttention(l int) bool { return p.drift > 0 && l >= p.d }

// ObserveAttention checks the drift of every deep layer's attention
// against its reference, and on refreshing layers then takes the new
// reference: the most-attended token over all query rows and the column
// the suffix rows put on it.
func (p *deepRefresh) ObserveAttention(l int, computed []int32, probs []float32) {
	n := p.n
	if p.pending < 0 && p.ref[l] != nil &&
		cosine(column(probs, computed, n, p.star[l], p.m), p.ref[l]) < p.drift {
		p.pending = l
	}
	if !p.refresh || l < p.from {
		return
	}
	mass := make([]float64, n)
	for i := range computed {
		for j, w := range probs[i*n : (i+1)*n] {
			mass[j] += float64(w)
		}
	}
	star := 0
	for j, w := range mass {
		if w > mass[star] {
			star = j
		}
	}
	p.star[l] = star
	p.ref[l] = column(probs, computed, n, star, p.m)
}

// column is the weight query rows at positions ≥ m put on key j.
func column(probs []float32, computed []int32, n, j, m int) []float32 {
	var c []float32
	for i, pos := range computed {
		if int(pos) >= m {
			c = append(c, probs[i*n+j])
		}
	}
	return c
}

func cosine(a, b []float32) float64 {
	if len(a) != len(b) {
		return 0
	}
	var ab, aa, bb float64
	for i := range a {
		ab += float64(a[i]) * float64(b[i])
		aa += float64(a[i]) * float64(a[i])
		bb += float64(b[i]) * float64(b[i])
	}
	if aa == 0 || bb == 0 {
		return 1
	}
	return ab / math.Sqrt(aa*bb)
}

// CheckModel refuses block-causal models (wholeCanvas).
func (m *biCache) CheckModel(c *model.Config) error { return wholeCanvas(m.name, c) }
