package main

import (
	"fmt"
	"strings"

	"github.com/spf13/pflag"

	"github.com/dlmcache/dlmcache/cache"
	"github.com/dlmcache/dlmcache/lut"
	"github.com/dlmcache/dlmcache/model/cpu"
	"github.com/dlmcache/dlmcache/model/sample"
	"github.com/dlmcache/dlmcache/profile"
)

// cacheFlags are the caching options that eval, bench, sweep and serve
// share: the table, the prefix store and the decoder here; each method's
// own settings in Method, whose flags the method declares in its file
// under cache/ (cache.AddFlags).
type cacheFlags struct {
	LUT         string
	CacheBytes  int64
	SpillBytes  int64
	Eviction    string
	Salt        string
	StoreBlocks int
	// storeBlocksModel: StoreBlocks is the model's own block (exactStore),
	// not the flag's, so the flag's floor does not apply.
	storeBlocksModel bool
	StoreFill        string
	Events           *cache.EventLog // set by serve: the block store's KV events
	Decoder          string
	Method           cache.Options // every method's flags (cache.AddFlags); ForModel settles them
	// Guide is --guide (generate, eval, bench and serve declare it:
	// addGuideFlag); guide the model loadMethodEnv loaded from it, which
	// the guided decoder needs.
	Guide string
	guide *loadedModel
}

func addCacheFlags(fl *pflag.FlagSet, c *cacheFlags) {
	fl.StringVar(&c.LUT, "lut", "", "ratio→depth table (table.json from dlmcache profile); needed by bicache methods")
	fl.Int64Var(&c.CacheBytes, "cache-bytes", 1<<30, "prefix store budget in bytes")
	fl.Int64Var(&c.SpillBytes, "spill-bytes", 0, "host-memory second tier for prefixes evicted from the store (useful with --device cuda); 0: none")
	fl.StringVar(&c.Eviction, "eviction", "fifo", "prefix store eviction: fifo or lru (the whole-prefix store)")
	fl.IntVar(&c.StoreBlocks, "store-blocks", 0, "prefix store granularity: 0 keys whole prefixes; N ≥ 8 stores N-token blocks under chained hashes, so prefixes sharing leading blocks share them (lazy LRU over leaves); smaller blocks are refused (one fill forward per block)")
	fl.StringVar(&c.StoreFill, "store-fill", "causal", "block store: what a block's K/V are computed over — causal (the prefix up to the block's end: a block depends on its chain alone) or whole (the request's whole prefix)")
	fl.StringVar(&c.Decoder, "decoder", "", "decoder for every method: schedule (the schedule's count of commits a step), threshold:T (Fast-dLLM's parallel decoding, T in (0, 1]) or, where the command takes --guide, guided or guided:TAU[:K] (FlashDLM's guided diffusion), either with +threshold:T (the model's proposals at least T confident kept where the guide rejects them); empty: each method's own (threshold for block, the schedule for the rest); a method spec NAME@DECODER sets it for one method")
	cache.AddFlags(fl, &c.Method)
}

// methodsHelp lists the registered methods for --help.
func methodsHelp() string {
	var b strings.Builder
	for _, s := range cache.Specs() {
		fmt.Fprintf(&b, "\n  %-18s %s", s.Name, s.Summary)
	}
	return b.String()
}

// readTable loads --lut and refuses a table made for another model.
func readTable(path string, lm *loadedModel) (*lut.Table, error) {
	t, err := lut.Read(path)
	if err != nil {
		return nil, err
	}
	if err := t.Check(lm.Name, len(lm.Blocks), lm.Fingerprint); err != nil {
		return nil, fmt.Errorf("--lut %s: %w (profile this model with `dlmcache profile --model %s`)", path, err, lm.Name)
	}
	return t, nil
}

// newMethod builds a caching method by name on a (possibly shared) store
// and table.
func newMethod(name string, c *cacheFlags, lm *loadedModel, store cache.PrefixStore, table *lut.Table) (cache.Method, error) {
	o, err := c.Method.ForModel(lm.Card, table)
	if err != nil {
		return nil, err
	}
	if o.Decoding, err = sample.ParseDecoding(c.Decoder); err != nil {
		return nil, fmt.Errorf("--decoder: %w", err)
	}
	o.Store, o.Table, o.Fingerprint, o.Salt = store, table, lm.Fingerprint, c.Salt
	m, err := cache.New(name, o)
	if err != nil {
		return nil, err
	}
	d := o.Decoding
	if _, sd, _ := cache.ParseSpec(name); !sd.IsDefault() {
		d = sd
	}
	if d.Guided() && c.guide == nil {
		return nil, fmt.Errorf("method %s: decoder %s needs a guide: --guide MODEL, an autoregressive LM with the model's vocabulary and chat template (generate, eval, bench and serve take it)", m.Name(), d)
	}
	return m, cache.CheckModel(m, lm.Config)
}

// methodEnv is a loaded model with its generation defaults and the --lut
// table: what eval, bench and the sweeps build their methods from.
type methodEnv struct {
	lm    *loadedModel
	gen   sample.GenOptions // gen.Guide is --guide's model (nil without)
	table *lut.Table        // nil without --lut
	cache *cacheFlags
}

// close closes the model and the guide.
func (e *methodEnv) close() {
	if g := e.cache.guide; g != nil {
		g.Close()
		e.cache.guide = nil
	}
	e.lm.Close()
}

func loadMethodEnv(f *factory, mf modelFlags, rf regimeFlags, c *cacheFlags) (*methodEnv, error) {
	if _, err := cache.ParseEviction(c.Eviction); err != nil {
		return nil, err
	}
	lm, gen, err := loadRegime(f, mf, rf)
	if err != nil {
		return nil, err
	}
	e := &methodEnv{lm: lm, gen: gen, cache: c}
	if c.Guide != "" {
		g, err := loadGuide(f, c.Guide, lm, mf)
		if err != nil {
			lm.Close()
			return nil, err
		}
		fmt.Fprintln(f.ErrOut, "dlmcache: guide", g.describe())
		c.guide, e.gen.Guide = g, g.Network
	}
	if c.LUT != "" {
		if e.table, err = readTable(c.LUT, lm); err != nil {
			e.close()
			return nil, err
		}
		var gid *lut.ModelID
		if c.guide != nil {
			id := c.guide.modelID()
			gid = &id
		}
		if err := e.table.CheckGuide(gid); err != nil {
			e.close()
			return nil, fmt.Errorf("--lut %s: %w", c.LUT, err)
		}
		src, _ := cache.ResolveDeepSource(c.Method.DeepSource, e.table)
		if w := crossRequestWarning(string(src), e.table); w != "" {
			fmt.Fprintln(f.ErrOut, "warning:", w)
		}
		if err := e.table.CheckRegime(regimeOf(e.gen)); err != nil {
			fmt.Fprintf(f.ErrOut, "warning: --lut %s: %v: its depths were measured in another regime (profile or calibrate in this one)\n", c.LUT, err)
		}
	}
	return e, nil
}

// crossRequestWarning warns when the bicache methods would reuse the store's
// shallow K/V across requests at depths from the whole-prefix cosine: on the
// bundled model those depths (6–7) lost 23 points or more, while a table from
// the worst prefix row's cosine (depth 2) kept every answer
// (docs/results.md, section 4).
func crossRequestWarning(source string, t *lut.Table) string {
	if t == nil || source == "request" || t.SimilarityName() == string(profile.SimRowMin) || t.CalibratedFor(source) {
		return ""
	}
	return fmt.Sprintf("--deep-source %s reuses the store's prefix K/V across requests at this table's depths, which come from the whole-prefix cosine (similarity %q); "+
		"that overstates the safe depth when questions rewrite a few prefix rows. Serve the %s that dlmcache profile writes next to table.json "+
		"(or build one with `dlmcache lut build --similarity %s`), or use --deep-source request.",
		source, t.SimilarityName(), profile.CrossTableFile, profile.SimRowMin)
}

// method builds a method on a fresh prefix store, with table t (nil: the
// --lut table).
func (e *methodEnv) method(name string, c *cacheFlags, t *lut.Table) (cache.Method, error) {
	if t == nil {
		t = e.table
	}
	store, err := newStore(e.lm, c)
	if err != nil {
		return nil, err
	}
	return newMethod(name, c, e.lm, store, t)
}

// minStoreBlocks is --store-blocks' least block length: the block store's
// causal fill runs one forward per block over the tokens up to it, so a
// prefix of P tokens costs P/N forwards. On the bundled llada-tiny (one
// thread, AMD EPYC), filling 1,024 tokens took 16.5 s in blocks of 1, 7.1 s
// of 2, 1.8 s of 4, 1.16 s of 8, 0.79 s of 16 and 0.32 s of 32: from 8 up
// a halving of the block costs at most 1.5×, below it 1.5–4× each.
const minStoreBlocks = 8

// newStore builds the prefix store the flags ask for.
func newStore(lm *loadedModel, c *cacheFlags) (cache.PrefixStore, error) {
	ev, err := cache.ParseEviction(c.Eviction)
	if err != nil {
		return nil, err
	}
	if c.StoreBlocks < 0 {
		return nil, fmt.Errorf("--store-blocks %d: want 0 (whole prefixes) or a block length", c.StoreBlocks)
	}
	if c.StoreBlocks > 0 && c.StoreBlocks < minStoreBlocks && !c.storeBlocksModel {
		return nil, fmt.Errorf("--store-blocks %d: want at least %d tokens a block (or 0: whole prefixes): the causal fill runs one forward per block, "+
			"so smaller blocks multiply a prefix's forwards (a 1,024-token prefix took 16.5 s in blocks of 1, 1.8 s of 4, 1.2 s of 8, 0.8 s of 16: docs/serving.md)", c.StoreBlocks, minStoreBlocks)
	}
	if c.StoreBlocks > 0 {
		if c.SpillBytes > 0 {
			return nil, fmt.Errorf("--spill-bytes works with the whole-prefix store only (--store-blocks 0)")
		}
		if c.StoreFill != "causal" && c.StoreFill != "whole" {
			return nil, fmt.Errorf("--store-fill %q: want causal or whole", c.StoreFill)
		}
		return cache.NewBlockStore(lm.Backend, c.StoreBlocks, c.CacheBytes, c.StoreFill == "causal", c.Events), nil
	}
	store := cache.NewStore(lm.Backend, c.CacheBytes, ev)
	if c.SpillBytes > 0 {
		store.SetSpill(cache.NewStore(cpu.New(0), c.SpillBytes, ev))
	}
	return store, nil
}
