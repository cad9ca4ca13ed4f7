package cache

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/pflag"

	"github.com/dlmcache/dlmcache/lut"
	"github.com/dlmcache/dlmcache/model"
	"github.com/dlmcache/dlmcache/model/load"
	"github.com/dlmcache/dlmcache/model/sample"
)

// Method is a caching method: the whole policy of one strategy — the
// per-request planner that steers the forward through model.Plan and the
// generation options it needs (block decoding, thresholds). What only some
// methods have is an optional interface: a prefix store shared across
// requests (Storer), a ratio → depth table and its deep source (Tabled), a
// choice per request (Chooser), models it cannot serve (ModelChecker).
// Build one with New.
type Method interface {
	// Name is the registered name ("bicache", "bicache+block", …).
	Name() string
	// Gen adapts generation options to the method (block methods decode in
	// blocks, Fast-dLLM's threshold rule, …). It is idempotent.
	Gen(o sample.GenOptions) sample.GenOptions
	// Planner returns a planner for one request (nil: compute every row at
	// every step). info, if not nil, is filled in at the request's start.
	// salt, if not empty, isolates the request's stored prefixes from other
	// tenants' (appended to the method's own salt).
	Planner(lm *model.Network, salt string, info *Info) sample.Planner
}

// Storer is a method that keeps prefixes in a store shared across
// requests (prefix-all, the bicache family, exact-block, table, modules).
type Storer interface {
	Method
	Store() PrefixStore
}

// Tabled is a method that serves a ratio → depth table (the bicache
// family; table serves its choices).
type Tabled interface {
	Method
	Table() *lut.Table
	// Source is the deep source whose calibrated depths the method serves
	// ("store", "request" or "recompute"; "" for none).
	Source() string
}

// StoreOf is the prefix store m shares across requests (nil: none).
func StoreOf(m Method) PrefixStore {
	if s, ok := m.(Storer); ok {
		return s.Store()
	}
	return nil
}

// TableOf is the table m serves (nil: none).
func TableOf(m Method) *lut.Table {
	if t, ok := m.(Tabled); ok {
		return t.Table()
	}
	return nil
}

// SourceOf is the deep source whose calibrated depths m serves ("" for a
// method without one).
func SourceOf(m Method) string {
	if t, ok := m.(Tabled); ok {
		return t.Source()
	}
	return ""
}

// Options configure a method: what every method may share (the store,
// the table and how it is read, the model's fingerprint, the salt, the
// decoder) and one typed value per method, declared in the method's file
// with its flags.
type Options struct {
	Store       PrefixStore // prefix store (prefix-all and the bicache family): *Store or *BlockStore
	Table       *lut.Table  // ratio → depth (the bicache family); the choices (table)
	Stat        lut.Statistic
	DeepSource  DeepSource
	Fingerprint string // model fingerprint, part of the store key
	Salt        string // tenant isolation, part of the store key

	// Decoding, unless the zero value, replaces the method's own decoder
	// (the schedule; threshold decoding for block): any cache under any
	// decoder. A method spec "NAME@DECODER" sets it too.
	Decoding sample.Decoding
	// GuideFingerprint is the guide a table's (or a calibration's) guided
	// settings decode with: FromSetting refuses a guided setting without
	// one (the guide itself comes with each request's generation
	// options).
	GuideFingerprint string

	BiCache BiCacheOptions // bicache.go
	Block   BlockOptions   // block.go (freecache's block length too)
	D2      D2Options      // d2cache.go
	DLLM    DLLMOptions    // dllmcache.go
	Free    FreeOptions    // freecache.go
	Modules ModuleOptions  // modules.go
}

// DefaultOptions are the papers' defaults.
func DefaultOptions() Options {
	return Options{Stat: lut.Mean, DeepSource: SourceStore, BiCache: BiCacheOptions{Refresh: 16},
		Block: BlockOptions{Length: 32, Threshold: 0.9},
		D2:    D2Options{K: 32, P: 0.1, Sigma: 10}, DLLM: DLLMOptions{Kp: 50, Kr: 2, Rho: 0.25}}
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
	// Flags declares the method's command-line flags on fl, bound to its
	// options in o (declared in its file; AddFlags declares every
	// method's).
	Flags func(fl *pflag.FlagSet, o *Options)
	// Calibration is the method whose calibrated depths it serves (a
	// table's calibration.method; "" for the method's own name): bicache's
	// compositions serve bicache's.
	Calibration string
	// Needs, if not empty, says what the method needs that no flag gives
	// (the module method: a schema): it is built by the code that has
	// that, and not offered by name (Names, --help, bench).
	Needs string
}

// registry lists the methods in the order --help and bench show them.
var registry = []Spec{
	{Name: "none", Summary: "every row, every layer, every step", New: newNone},
	{Name: "prefix-all", Summary: "the shared prefix's K/V from the store at every layer and step (an autoregressive server's prefix cache)", New: newPrefixAll},
	{Name: "bicache", Summary: "BiCache: layers 1..d (d from the table) reuse the prefix's K/V; deeper layers refresh the prefix rows every R steps (or on attention drift with --drift)",
		New: newBiCache, Knobs: biCacheKnobs, Grid: biCacheGrid, Flags: biCacheFlags},
	{Name: "bicache-elastic", Summary: "BiCache with Elastic-Cache's trigger: the deep layers refresh when the most-attended token's attention drifts below cosine γ (--drift, default 0.9), from the layer where it does",
		New: newBiCacheElastic, Base: "bicache", Knobs: biCacheKnobs, Flags: biCacheFlags},
	{Name: "block", Summary: "Fast-dLLM's dual cache: a full forward at each block start, then only the block's rows; threshold decoding (another with NAME@DECODER)",
		New: newBlock, Knobs: blockKnobs, Grid: blockGrid, Flags: blockFlags},
	{Name: "bicache+block", Summary: "BiCache's shallow prefix reuse under Fast-dLLM's dual cache",
		New: composed(newBlock), Base: "block", Knobs: slices.Concat(biCacheKnobs, blockKnobs), Flags: flags(biCacheFlags, blockFlags), Calibration: "bicache"},
	{Name: "exact-block", Summary: "block-causal models only: committed blocks' K/V kept at every layer, each step computes the current block; a shared prefix's full blocks from the store at every layer (exact: the answers of none)",
		New: newExactBlock},
	{Name: "d2cache", Summary: "d2Cache: after a full first step, only the most certain masked slots, the tokens just decoded and the rollout-important rest are recomputed",
		New: newD2Cache, Knobs: d2Knobs, Grid: d2Grid, Flags: d2Flags},
	{Name: "dllm-cache", Summary: "dLLM-Cache: prompt refreshed every Kp steps, response every Kr, and between refreshes the response rows whose V changed most",
		New: newDLLMCache, Knobs: dllmKnobs, Flags: dllmFlags},
	{Name: "freecache", Summary: "FlashDLM's FreeCache: finished blocks frozen; each step computes the current block and everything after it",
		New: newFreeCache, Knobs: freeKnobs, Flags: freeFlags},
	{Name: "bicache+d2cache", Summary: "BiCache's shallow prefix reuse under d2Cache",
		New: composed(newD2Cache), Base: "d2cache", Knobs: slices.Concat(biCacheKnobs, d2Knobs), Flags: flags(biCacheFlags, d2Flags), Calibration: "bicache"},
	{Name: "bicache+freecache", Summary: "BiCache's shallow prefix reuse under FreeCache",
		New: composed(newFreeCache), Base: "freecache", Knobs: slices.Concat(biCacheKnobs, freeKnobs), Flags: flags(biCacheFlags, freeFlags), Calibration: "bicache"},
	moduleSpec,
}

// flags declares each of fs's flags.
func flags(fs ...func(*pflag.FlagSet, *Options)) func(*pflag.FlagSet, *Options) {
	return func(fl *pflag.FlagSet, o *Options) {
		for _, f := range fs {
			f(fl, o)
		}
	}
}

// AddFlags declares on fl, bound to o, the flags of every method offered by
// name (each method's Spec.Flags; a flag several methods declare, once).
// With names, it declares only the flags so named, of any registered
// method: serve takes the module method's --module-depth (only serve
// builds that method), calibrate bicache's --refresh alone. The flags
// leave some settings to the model and the table: Options.ForModel
// settles them.
func AddFlags(fl *pflag.FlagSet, o *Options, names ...string) {
	found := map[string]bool{}
	for _, s := range registry {
		if s.Flags == nil || (s.Needs != "" && len(names) == 0) {
			continue
		}
		own := pflag.NewFlagSet(s.Name, pflag.ContinueOnError)
		s.Flags(own, o)
		if len(names) == 0 {
			fl.AddFlagSet(own) // skips the flags fl has already
			continue
		}
		own.VisitAll(func(f *pflag.Flag) {
			if slices.Contains(names, f.Name) && !found[f.Name] {
				found[f.Name] = true
				fl.AddFlag(f)
			}
		})
	}
	for _, n := range names {
		if !found[n] {
			panic("cache.AddFlags: no method declares --" + n)
		}
	}
}

// ForModel settles what the flags (AddFlags) leave to the model and the
// table: it checks --stat and --refresh, takes the model card's R for
// --refresh 0 and resolves --deep-source auto for table t
// (ResolveDeepSource).
func (o Options) ForModel(card load.Card, t *lut.Table) (Options, error) {
	switch o.Stat {
	case lut.Mean, lut.MeanStd, lut.MinStat:
	default:
		return o, fmt.Errorf("--stat %q: want mean, mean-std or min", o.Stat)
	}
	if o.BiCache.Refresh < 0 {
		return o, fmt.Errorf("--refresh must be positive (0: the model card's R), got %d", o.BiCache.Refresh)
	}
	o.BiCache.Refresh = card.RefreshOr(o.BiCache.Refresh)
	o.DeepSource, _ = ResolveDeepSource(o.DeepSource, t)
	return o, nil
}

// The table method builds the methods its table names from the registry,
// so it joins it at init.
func init() {
	registry = append(registry, Spec{Name: "table", Summary: "the calibrated table's choice (dlmcache calibrate, format v3): each request served by the method, knobs and decoder chosen for its ratio bin and answer-length class",
		New: newTableMethod, Calibration: "search"})
}

// Specs returns the methods offered by name (those that need nothing a
// flag cannot give).
func Specs() []Spec {
	return slices.DeleteFunc(slices.Clone(registry), func(s Spec) bool { return s.Needs != "" })
}

// Names returns the names of the methods offered by name.
func Names() []string {
	var r []string
	for _, s := range Specs() {
		r = append(r, s.Name)
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

// CheckTable refuses a calibrated table for the method a spec names when
// the table was calibrated for another: the method's Spec.Calibration
// (bicache's compositions serve bicache's depths) or its own name.
func CheckTable(t *lut.Table, spec string) error {
	if t.Calibration == nil || t.Calibration.Method == "" {
		return nil
	}
	s, err := Lookup(spec)
	if err != nil {
		return err
	}
	if cmp.Or(s.Calibration, s.Name) != t.Calibration.Method {
		return fmt.Errorf("table was calibrated for method %s, not %s", t.Calibration.Method, spec)
	}
	return nil
}

// ParseSpec splits a method spec "NAME[@DECODER]" ("none@threshold:0.9",
// "block@schedule") into the registered name and the decoding (the zero
// value without "@").
func ParseSpec(spec string) (string, sample.Decoding, error) {
	name, dec, has := strings.Cut(spec, "@")
	if _, err := Lookup(name); err != nil {
		return "", sample.Decoding{}, err
	}
	if !has {
		return name, sample.Decoding{}, nil
	}
	d, err := sample.ParseDecoding(dec)
	if err != nil {
		return "", sample.Decoding{}, fmt.Errorf("method %s: %w", spec, err)
	}
	if d.IsDefault() {
		return "", sample.Decoding{}, fmt.Errorf("method %s: nothing after @ (want NAME@schedule, NAME@threshold:T or NAME@guided)", spec)
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
	d sample.Decoding
}

func (m *decoded) Name() string { return m.Method.Name() + "@" + m.d.String() }

func (m *decoded) Gen(o sample.GenOptions) sample.GenOptions { return m.d.Apply(m.Method.Gen(o)) }

// The optional interfaces of the method under the decoder.
func (m *decoded) Store() PrefixStore               { return StoreOf(m.Method) }
func (m *decoded) Table() *lut.Table                { return TableOf(m.Method) }
func (m *decoded) Source() string                   { return SourceOf(m.Method) }
func (m *decoded) CheckModel(c *model.Config) error { return CheckModel(m.Method, c) }

// options are the method's own (StorePrefix reads its store, fingerprint
// and salt from them).
func (m *decoded) options() Options {
	if b, ok := m.Method.(interface{ options() Options }); ok {
		return b.options()
	}
	return Options{}
}

// Decoding is the decoder a method generates with on options o (its own,
// or the one it was built with).
func Decoding(m Method, o sample.GenOptions) sample.Decoding { return sample.DecodingOf(m.Gen(o)) }

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
	*sample.Generation
	Info Info
}

// Run generates an answer to r under meth: the one path that serve, eval,
// bench and the calibration take. The request's method is resolved once
// (Choose) and gen adapted by it; a block-causal model's block defaults
// are the caller's (engine.Model.GenOptions settles them).
func Run(ctx context.Context, lm *model.Network, meth Method, r Request, gen sample.GenOptions) (*Result, error) {
	meth, gen = Choose(meth, len(r.Prompt), r.PrefixLen, gen)
	return Generate(ctx, lm, meth, r, gen)
}

// Generate generates an answer to r under a method already chosen for it
// (Choose), with the options that method adapted.
func Generate(ctx context.Context, lm *model.Network, meth Method, r Request, gen sample.GenOptions) (*Result, error) {
	res := &Result{}
	if r.Positions != nil {
		gen.Positions = r.Positions
	}
	g, err := sample.Generate(ctx, lm, r.Prompt, r.PrefixLen, gen, meth.Planner(lm, r.Salt, &res.Info))
	if err != nil {
		return nil, err
	}
	res.Generation = g
	return res, nil
}

// ModelChecker is a method that serves only some models: CheckModel says
// why it cannot serve c (nil: it can).
type ModelChecker interface {
	CheckModel(c *model.Config) error
}

// CheckModel reports why meth cannot serve a model of config c (nil: it
// can). Methods that serve every model pass. An autoregressive model
// (model.Config.Causal) is served by none alone (or none@schedule): it
// decodes one token per forward with its own exact K/V cache, so no
// diffusion cache or decoder applies to it.
func CheckModel(meth Method, c *model.Config) error {
	if c != nil && c.Causal {
		inner, d := meth, sample.Decoding{}
		if dm, ok := meth.(*decoded); ok {
			inner, d = dm.Method, dm.d
		}
		if _, ok := inner.(*none); !ok || (!d.IsDefault() && d.Kind != sample.DecodeSchedule) {
			return fmt.Errorf("method %s: this model (%s) is autoregressive: it decodes one token per forward with its own exact K/V cache, "+
				"so no diffusion cache or decoder applies; use none", meth.Name(), c.ArchName())
		}
		return nil
	}
	if dm, ok := meth.(*decoded); ok && dm.d.Guided() && c != nil && c.CausalBlock() > 0 {
		return fmt.Errorf("method %s: guided decoding of a block-causal model (blocks of %d) is not supported; use threshold or schedule decoding", meth.Name(), c.CausalBlock())
	}
	if mc, ok := meth.(ModelChecker); ok {
		return mc.CheckModel(c)
	}
	return nil
}

// wholeCanvas refuses a block-causal model for a method whose plans index
// the rows of the whole canvas at every step: block decoding feeds each
// step only the canvas up to the current block's end.
func wholeCanvas(name string, c *model.Config) error {
	if B := c.CausalBlock(); B > 0 {
		return fmt.Errorf("%s plans rows over the whole canvas at every step, but this model is block-causal (blocks of %d) "+
			"and decodes one block at a time: use exact-block (exact reuse at every layer), block or none", name, B)
	}
	return nil
}

// base carries what every method has: its name and options.
type base struct {
	name string
	o    Options
}

func (b *base) options() Options                          { return b.o }
func (b *base) Name() string                              { return b.name }
func (b *base) Gen(o sample.GenOptions) sample.GenOptions { return o }

// none computes everything.
type none struct{ base }

func newNone(o Options) (Method, error) { return &none{base{"none", o}}, nil }

func (*none) Planner(*model.Network, string, *Info) sample.Planner { return nil }

// blocked sets o's block length for a block method: the method's block
// length (32 by default, clamped to a divisor of the gen length) when o
// has one block, with the steps rounded to a multiple of the blocks.
//
// A block length past the gen length is a block-causal model's own block
// (model.Config.BlockDefaults; cache.Run applies it), which such a model
// decodes in whatever the method's length: it is left as it is.
func blocked(o sample.GenOptions, length int) sample.GenOptions {
	if o.BlockLength > o.GenLength {
		return o
	}
	if o.BlockLength == 0 || o.BlockLength == o.GenLength {
		if length <= 0 {
			length = 32
		}
		o.BlockLength = min(length, o.GenLength)
		for o.GenLength%o.BlockLength != 0 {
			o.BlockLength--
		}
	}
	blocks := o.Blocks()
	o.Steps = max(blocks, o.Steps-o.Steps%blocks)
	return o
}
