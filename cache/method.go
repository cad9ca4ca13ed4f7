package cache

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/dlmcache/dlmcache/lut"
	"github.com/dlmcache/dlmcache/model"
)

// Method is a caching method: the whole policy of one strategy — the
// per-request planner that steers the forward through model.Plan, the
// generation options it needs (block decoding, thresholds) and what it
// shares across requests. Build one with New.
type Method interface {
	// Name is the registered name ("bicache", "bicache+block", …).
	Name() string
	// Gen adapts generation options to the method (block methods decode in
	// blocks, Fast-dLLM's threshold rule, …). It is idempotent.
	Gen(o model.GenOptions) model.GenOptions
	// Planner returns a planner for one request (nil: compute every row at
	// every step). info, if not nil, is filled in at the request's start.
	// salt, if not empty, isolates the request's stored prefixes from other
	// tenants' (appended to the method's own salt).
	Planner(lm *model.LLaDA, salt string, info *Info) model.Planner
	// Store is the prefix store shared across requests (nil: none).
	Store() PrefixStore
	// Table is the ratio → depth table the method serves (nil: none).
	Table() *lut.Table
	// Source is the deep source whose calibrated depths the method serves
	// ("store", "request" or "recompute"; "" for methods without a table).
	Source() string
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

// Options configure every method; each reads the fields it needs and
// validates them.
type Options struct {
	Store       PrefixStore // prefix store (prefix-all and the bicache family): *Store or *BlockStore
	Table       *lut.Table  // ratio → depth (the bicache family)
	Stat        lut.Statistic
	DeepSource  DeepSource
	Fingerprint string // model fingerprint, part of the store key
	Salt        string // tenant isolation, part of the store key

	// Refresh is BiCache's deep refresh period R in steps.
	Refresh int
	// Drift, if > 0, replaces the fixed period by Elastic-Cache's trigger
	// γ: refresh when the cosine between the most-attended token's
	// attention column now and at the last refresh falls below γ, from the
	// first layer where it does (γ > 1: every step).
	Drift float64

	// BlockLength is the semi-autoregressive block length block methods
	// decode in when the options have one block (0: 32).
	BlockLength int
	// Threshold is Fast-dLLM's confidence threshold (block methods).
	Threshold float64

	D2   D2Options
	DLLM DLLMOptions
	// FreeRefresh, if > 0, makes FreeCache run a full forward every that
	// many steps (1: every step, as none).
	FreeRefresh int

	// Decoding, unless the zero value, replaces the method's own decoder
	// (the schedule; threshold decoding for block): any cache under any
	// decoder. A method spec "NAME@DECODER" sets it too.
	Decoding model.Decoding
}

// DefaultOptions are the papers' defaults.
func DefaultOptions() Options {
	return Options{Stat: lut.Mean, DeepSource: SourceStore, Refresh: 16, BlockLength: 32, Threshold: 0.9,
		D2: D2Options{K: 32, P: 0.1, Sigma: 10}, DLLM: DLLMOptions{Kp: 50, Kr: 2, Rho: 0.25}}
}

// Spec is a registered method.
type Spec struct {
	Name    string
	Summary string
	New     func(o Options) (Method, error)
	// Base is the method a composition or variant is built on ("" for the
	// primitives): bench reports speed-ups against none and against it.
	Base string
	// Knobs are the settings the method owns, by name (declared in its
	// file): what a table's setting and calibration's grid set.
	Knobs []Knob
	// Grid is what calibration tries of the method by default (declared
	// in its file; none: the method is not searched by default).
	Grid []GridPoint
}

// registry lists the methods in the order --help and bench show them.
var registry = []Spec{
	{"none", "every row, every layer, every step", newNone, "", nil, nil},
	{"prefix-all", "the shared prefix's K/V from the store at every layer and step (an autoregressive server's prefix cache)", newPrefixAll, "", nil, nil},
	{"bicache", "BiCache: layers 1..d (d from the table) reuse the prefix's K/V; deeper layers refresh the prefix rows every R steps (or on attention drift with --drift)", newBiCache, "", biCacheKnobs, biCacheGrid},
	{"bicache-elastic", "BiCache with Elastic-Cache's trigger: the deep layers refresh when the most-attended token's attention drifts below cosine γ (--drift, default 0.9), from the layer where it does", newBiCacheElastic, "bicache", biCacheKnobs, nil},
	{"block", "Fast-dLLM's dual cache: a full forward at each block start, then only the block's rows; threshold decoding (another with NAME@DECODER)", newBlock, "", blockKnobs, blockGrid},
	{"bicache+block", "BiCache's shallow prefix reuse under Fast-dLLM's dual cache", composed(newBlock), "block", slices.Concat(biCacheKnobs, blockKnobs), nil},
	{"exact-block", "block-causal models only: committed blocks' K/V kept at every layer, each step computes the current block; a shared prefix's full blocks from the store at every layer (exact: the answers of none)", newExactBlock, "", nil, nil},
	{"d2cache", "d2Cache: after a full first step, only the most certain masked slots, the tokens just decoded and the rollout-important rest are recomputed", newD2Cache, "", d2Knobs, d2Grid},
	{"dllm-cache", "dLLM-Cache: prompt refreshed every Kp steps, response every Kr, and between refreshes the response rows whose V changed most", newDLLMCache, "", dllmKnobs, nil},
	{"freecache", "FlashDLM's FreeCache: finished blocks frozen; each step computes the current block and everything after it", newFreeCache, "", freeKnobs, nil},
	{"bicache+d2cache", "BiCache's shallow prefix reuse under d2Cache", composed(newD2Cache), "d2cache", slices.Concat(biCacheKnobs, d2Knobs), nil},
	{"bicache+freecache", "BiCache's shallow prefix reuse under FreeCache", composed(newFreeCache), "freecache", slices.Concat(biCacheKnobs, freeKnobs), nil},
}

// The table method builds the methods its table names from the registry,
// so it joins it at init.
func init() {
	registry = append(registry, Spec{"table", "the calibrated table's choice (dlmcache calibrate, format v3): each request served by the method, knobs and decoder chosen for its ratio bin and answer-length class", newTableMethod, "", nil, nil})
}

// Specs returns the registered methods.
func Specs() []Spec { return slices.Clone(registry) }

// Names returns the registered method names.
func Names() []string {
	r := make([]string, len(registry))
	for i, s := range registry {
		r[i] = s.Name
	}
	return r
}

// Lookup returns the registered method name (a spec's "@DECODER" is
// ignored).
func Lookup(name string) (Spec, error) {
	name, _, _ = strings.Cut(name, "@")
	for _, s := range registry {
		if s.Name == name {
			return s, nil
		}
	}
	return Spec{}, fmt.Errorf("unknown method %q (want one of %s)", name, strings.Join(Names(), ", "))
}

// ParseSpec splits a method spec "NAME[@DECODER]" ("none@threshold:0.9",
// "block@schedule") into the registered name and the decoding (the zero
// value without "@").
func ParseSpec(spec string) (string, model.Decoding, error) {
	name, dec, has := strings.Cut(spec, "@")
	if _, err := Lookup(name); err != nil {
		return "", model.Decoding{}, err
	}
	if !has {
		return name, model.Decoding{}, nil
	}
	d, err := model.ParseDecoding(dec)
	if err != nil {
		return "", model.Decoding{}, fmt.Errorf("method %s: %w", spec, err)
	}
	if d.IsDefault() {
		return "", model.Decoding{}, fmt.Errorf("method %s: nothing after @ (want NAME@schedule or NAME@threshold:T)", spec)
	}
	return name, d, nil
}

// New builds the method a spec names: a registered name, optionally with
// "@DECODER" (which overrides o.Decoding). A method whose decoding is not
// its own is named NAME@DECODER.
func New(spec string, o Options) (Method, error) {
	name, dec, err := ParseSpec(spec)
	if err != nil {
		return nil, err
	}
	if !dec.IsDefault() {
		o.Decoding = dec
	}
	s, _ := Lookup(name)
	m, err := s.New(o)
	if err != nil {
		return nil, fmt.Errorf("method %s: %w", spec, err)
	}
	if o.Decoding.IsDefault() {
		return m, nil
	}
	return &decoded{Method: m, d: o.Decoding}, nil
}

// decoded is a method under a decoder other than its own.
type decoded struct {
	Method
	d model.Decoding
}

func (m *decoded) Name() string { return m.Method.Name() + "@" + m.d.String() }

func (m *decoded) Gen(o model.GenOptions) model.GenOptions { return m.d.Apply(m.Method.Gen(o)) }

// Decoding is the decoder a method generates with on options o (its own,
// or the one it was built with).
func Decoding(m Method, o model.GenOptions) model.Decoding { return model.DecodingOf(m.Gen(o)) }

// Info is what a request's planner did, for metrics.
type Info struct {
	Depth       int     // layers served from the store (0: none)
	Ratio       float64 // the request's shared-prefix ratio
	Clamped     bool    // the ratio lay outside the table's filled bins
	Hit         bool    // the prefix was in the store
	PrefixToken int     // prefix length m
	// QueryTokens and HitTokens count the prefix tokens looked up in the
	// store and found there.
	QueryTokens, HitTokens int
	// PrefixRows is the (layer, row) pairs computed to fill the store on a
	// miss (the prefix run alone): L·m, or 0 on a hit.
	PrefixRows int
	// PrefixFLOPs is the matrix-product FLOPs of that fill (0 on a hit).
	PrefixFLOPs float64
	// Refreshes counts the steps on which the deep layers refreshed
	// (bicache: fixed period or drift trigger).
	Refreshes int
}

// Request is one generation to run under a method.
type Request struct {
	Prompt    []int32 // prompt token ids
	PrefixLen int     // shared-prefix length m
	Salt      string  // per-request cache salt ("" for none)
	// Positions, if not nil, are the prompt's RoPE position ids (a prompt
	// composed of modules, Schema.Compose); nil: 0, 1, 2, …
	Positions []int32
}

// Result is a generation and what the method did for it.
type Result struct {
	*model.Generation
	Info Info
}

// Run generates an answer to r under meth: the one path that serve, eval,
// bench and the calibration take. gen is adapted by meth.Gen.
func Run(ctx context.Context, lm *model.LLaDA, meth Method, r Request, gen model.GenOptions) (*Result, error) {
	meth = Resolve(meth, len(r.Prompt), r.PrefixLen, gen)
	res := &Result{}
	if r.Positions != nil {
		gen.Positions = r.Positions
	}
	g, err := lm.Generate(ctx, r.Prompt, r.PrefixLen, meth.Gen(gen), meth.Planner(lm, r.Salt, &res.Info))
	if err != nil {
		return nil, err
	}
	res.Generation = g
	return res, nil
}

// base carries what every method has: its name and options.
type base struct {
	name string
	o    Options
}

func (b *base) options() Options                        { return b.o }
func (b *base) Name() string                            { return b.name }
func (b *base) Store() PrefixStore                      { return nil }
func (b *base) Table() *lut.Table                       { return nil }
func (b *base) Source() string                          { return "" }
func (b *base) Gen(o model.GenOptions) model.GenOptions { return o }

// none computes everything.
type none struct{ base }

func newNone(o Options) (Method, error) { return &none{base{"none", o}}, nil }

func (*none) Planner(*model.LLaDA, string, *Info) model.Planner { return nil }

// blocked sets o's block length for a block method: the method's block
// length (32 by default, clamped to a divisor of the gen length) when o
// has one block, with the steps rounded to a multiple of the blocks.
func blocked(o model.GenOptions, length int) model.GenOptions {
	if o.BlockLength == 0 || o.BlockLength == o.GenLength {
		if length <= 0 {
			length = 32
		}
		o.BlockLength = min(length, o.GenLength)
		for o.GenLength%o.BlockLength != 0 {
			o.BlockLength--
		}
	}
	blocks := o.GenLength / o.BlockLength
	o.Steps = max(blocks, o.Steps-o.Steps%blocks)
	return o
}
