package engine

import (
	"context"
	"fmt"
	"io"
	"slices"

	"github.com/dlmcache/dlmcache/cache"
	"github.com/dlmcache/dlmcache/lut"
	"github.com/dlmcache/dlmcache/model/sample"
	"github.com/dlmcache/dlmcache/regime"
)

// Config is what a command asks of the engine: the model, the regime, the
// method, the table, the guide and the prefix store. The commands fill it
// from their flags and nothing else; Build settles every default.
type Config struct {
	Model   string        // --model: a directory, a GGUF file or a name
	Device  string        // --device: cpu or cuda
	Threads int           // --threads (0: all cores)
	Regime  regime.Regime // zero values: the model's defaults
	// TableRegime generates in the table's regime where it records one
	// (lut verify), in place of Regime.
	TableRegime bool

	// Method is the served method's spec (NAME[@DECODER]); with "" and
	// DefaultMethod, the default for the model and the table (the exact
	// block cache on a block-causal model, else TableMethod); with "" and
	// no DefaultMethod, Build builds no method (NewMethod builds them).
	Method        string
	DefaultMethod bool
	// Methods are the other methods the command will build (bench's
	// list): with the exact block cache among them, the store defaults
	// to the model's blocks.
	Methods []string

	LUT string // --lut: the ratio → depth table ("": none)
	// RequireCalibrated refuses a table no calibration checked (serve
	// without --allow-uncalibrated).
	RequireCalibrated bool
	Guide             string // --guide: the guided decoder's guide ("": none)

	Store   StoreConfig
	Salt    string        // the methods' cache salt
	Decoder string        // --decoder: every method's decoder ("": each method's own)
	Options cache.Options // every method's flags (cache.AddFlags)

	// Log, if not nil, gets the start-up lines: the model, its regime,
	// the guide and the table's warnings.
	Log io.Writer
}

// Engine is a built Config: the model and its guide, the generation
// options, the table and the served method.
type Engine struct {
	cfg   Config
	Model *Model
	Guide *Model            // nil without --guide
	Gen   sample.GenOptions // Gen.Guide is the guide's network
	Table *lut.Table        // nil without --lut
	// Method is the served method (nil when the config names none) and
	// MethodName its spec as chosen.
	Method     cache.Method
	MethodName string
	// Events is the block store's KV event log (StoreConfig.Events).
	Events *cache.EventLog
	// MethodNote and StoreNote say what Build chose for the method and
	// the store where the model decided it ("" otherwise).
	MethodNote, StoreNote string

	source    cache.DeepSource // --deep-source, resolved once for the table
	sourceWhy string
}

// Build loads the model (and the guide), settles the generation options,
// reads and checks the table, settles the prefix store and builds the
// served method: every default and check once. On error nothing stays
// open.
func Build(cfg Config) (*Engine, error) {
	if cfg.Store.Eviction != "" {
		if _, err := cache.ParseEviction(cfg.Store.Eviction); err != nil {
			return nil, err
		}
	}
	e := &Engine{cfg: cfg}
	if err := e.build(); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

func (e *Engine) build() error {
	c := &e.cfg
	m, err := LoadModel(c.Model, c.Device, c.Threads)
	if err != nil {
		return err
	}
	e.Model = m
	e.logf("dlmcache: %s\n", m.Describe())
	if e.Gen, err = m.GenOptions(c.Regime); err != nil {
		return err
	}
	if line := m.RegimeLine(e.Gen); line != "" {
		e.logf("dlmcache: %s\n", line)
	}
	if c.Guide != "" {
		if err := e.AddGuide(c.Guide); err != nil {
			return err
		}
		e.logf("dlmcache: guide %s\n", e.Guide.Describe())
	}
	if c.LUT != "" {
		if err := e.openTable(); err != nil {
			return err
		}
	} else {
		e.source, e.sourceWhy = cache.ResolveDeepSource(c.Options.DeepSource, nil)
	}
	if t := e.Table; c.TableRegime && t != nil && t.GenLength > 0 {
		guide := e.Gen.Guide
		if e.Gen, err = m.GenOptions(t.Regime); err != nil {
			return err
		}
		e.Gen.Guide = guide
	}
	return e.served()
}

// served settles the served method's name and the store's block length,
// and builds the method.
func (e *Engine) served() error {
	c := &e.cfg
	name := c.Method
	if name == "" && c.DefaultMethod {
		name, e.MethodNote = cache.ExactDefault(e.Model.Config)
	}
	blocks, note := cache.ExactStoreBlocks(e.Model.Config, append(slices.Clone(c.Methods), name), c.Store.Blocks)
	if note != "" {
		c.Store.Blocks, c.Store.modelBlocks, e.StoreNote = blocks, true, note
	}
	if name == "" && c.DefaultMethod {
		name = TableMethod(e.Table)
	}
	if c.Store.Events && c.Store.Blocks > 0 {
		e.Events = cache.NewEventLog(1 << 16)
	}
	if name == "" {
		return nil
	}
	meth, err := e.NewMethod(name, nil, nil)
	if err != nil {
		return err
	}
	e.Method, e.MethodName = meth, name
	return nil
}

// AddGuide loads --guide name for the model, on its device and threads.
func (e *Engine) AddGuide(name string) error {
	g, err := LoadGuide(name, e.Model, e.cfg.Device, e.cfg.Threads)
	if err != nil {
		return err
	}
	e.cfg.Guide, e.Guide, e.Gen.Guide = name, g, g.Network
	return nil
}

// Close closes the model and the guide.
func (e *Engine) Close() {
	if e.Guide != nil {
		e.Guide.Close()
		e.Guide = nil
	}
	if e.Model != nil {
		e.Model.Close()
	}
}

// Store is the prefix store the config settled (the block length the
// exact block cache chose included).
func (e *Engine) Store() StoreConfig { return e.cfg.Store }

// NewMethod builds a method by spec on a fresh prefix store, with table t
// (nil: the engine's) and the config's method options changed by edit
// (nil: as they are).
func (e *Engine) NewMethod(spec string, t *lut.Table, edit func(*cache.Options)) (cache.Method, error) {
	c, m := &e.cfg, e.Model
	if t == nil {
		t = e.Table
	}
	store, err := NewStore(m.Backend, c.Store, e.Events)
	if err != nil {
		return nil, err
	}
	o := c.Options
	if edit != nil {
		edit(&o)
	}
	if t == e.Table {
		o.DeepSource = e.source
	}
	if o, err = o.ForModel(m.Card, t); err != nil {
		return nil, err
	}
	if o.Decoding, err = sample.ParseDecoding(c.Decoder); err != nil {
		return nil, fmt.Errorf("--decoder: %w", err)
	}
	o.Store, o.Table, o.Fingerprint, o.Salt = store, t, m.Fingerprint, c.Salt
	meth, err := cache.New(spec, o)
	if err != nil {
		return nil, err
	}
	d := o.Decoding
	if _, sd, _ := cache.ParseSpec(spec); !sd.IsDefault() {
		d = sd
	}
	if d.Guided() && e.Guide == nil {
		return nil, fmt.Errorf("method %s: decoder %s needs a guide: --guide MODEL, an autoregressive LM with the model's vocabulary and chat template (generate, eval, bench and serve take it)", meth.Name(), d)
	}
	return meth, cache.CheckModel(meth, m.Config)
}

// Run generates request r under meth (nil: the served method) with
// options gen, resolving the request's method once (cache.Run).
func (e *Engine) Run(ctx context.Context, meth cache.Method, r cache.Request, gen sample.GenOptions) (*cache.Result, error) {
	if meth == nil {
		meth = e.Method
	}
	return cache.Run(ctx, e.Model.Network, meth, r, gen)
}

func (e *Engine) logf(format string, args ...any) {
	if e.cfg.Log != nil {
		fmt.Fprintf(e.cfg.Log, format, args...)
	}
}
