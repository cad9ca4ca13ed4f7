package main

import (
	"fmt"
	"strings"

	"github.com/spf13/pflag"

	"github.com/dlmcache/dlmcache/cache"
	"github.com/dlmcache/dlmcache/lut"
	"github.com/dlmcache/dlmcache/model"
	"github.com/dlmcache/dlmcache/model/cpu"
	"github.com/dlmcache/dlmcache/profile"
)

// cacheFlags are the caching options that eval, bench, sweep and serve share.
type cacheFlags struct {
	LUT         string
	Refresh     int
	Drift       float64
	CacheBytes  int64
	SpillBytes  int64
	Eviction    string
	DeepSource  string
	Stat        string
	Threshold   float64
	DualBlock   int
	Salt        string
	StoreBlocks int
	StoreFill   string
	Events      *cache.EventLog // set by serve: the block store's KV events
	D2          cache.D2Options
	DLLM        cache.DLLMOptions
	FreeRefresh int
	Decoder     string
}

func addCacheFlags(fl *pflag.FlagSet, c *cacheFlags) {
	fl.StringVar(&c.LUT, "lut", "", "ratio→depth table (table.json from dlmcache profile); needed by bicache methods")
	fl.IntVar(&c.Refresh, "refresh", 0, "BiCache: recompute the deep layers' prefix K/V every R steps (0: the model card's R, else 16)")
	fl.Int64Var(&c.CacheBytes, "cache-bytes", 1<<30, "prefix store budget in bytes")
	fl.Int64Var(&c.SpillBytes, "spill-bytes", 0, "host-memory second tier for prefixes evicted from the store (useful with --device cuda); 0: none")
	fl.StringVar(&c.Eviction, "eviction", "fifo", "prefix store eviction: fifo or lru (the whole-prefix store)")
	fl.IntVar(&c.StoreBlocks, "store-blocks", 0, "prefix store granularity: 0 keys whole prefixes; N > 0 stores N-token blocks under chained hashes, so prefixes sharing leading blocks share them (lazy LRU over leaves)")
	fl.StringVar(&c.StoreFill, "store-fill", "causal", "block store: what a block's K/V are computed over — causal (the prefix up to the block's end: a block depends on its chain alone) or whole (the request's whole prefix)")
	fl.StringVar(&c.DeepSource, "deep-source", "auto", "BiCache refresh input of the deep layers: recompute (full step), store (stored hidden state at depth d), request (the request's own first step; needs no store) or auto (request: docs/results.md)")
	fl.StringVar(&c.Stat, "stat", "mean", "table statistic served: mean (floor of the mean depth), mean-std, min")
	fl.Float64Var(&c.Threshold, "block-threshold", 0.9, "block methods: Fast-dLLM confidence threshold for parallel decoding")
	fl.IntVar(&c.DualBlock, "dual-block", 32, "block methods (block, freecache and their bicache compositions): block length in tokens when the regime has one block (clamped to a divisor of the gen length)")
	d := cache.DefaultOptions()
	fl.Float64Var(&c.Drift, "drift", 0, "bicache: Elastic-Cache's refresh trigger γ instead of the fixed period: refresh the deep layers when the most-attended token's attention column drifts below cosine γ (e.g. 0.9); 0: every --refresh steps")
	fl.IntVar(&c.D2.K, "d2-k", d.D2.K, "d2cache: masked slots recomputed per step, by certainty prior")
	fl.Float64Var(&c.D2.P, "d2-p", d.D2.P, "d2cache: attention-rollout importance share of the other rows recomputed per step (1: every row)")
	fl.Float64Var(&c.D2.Sigma, "d2-sigma", d.D2.Sigma, "d2cache: certainty density's Gaussian width in tokens")
	fl.BoolVar(&c.D2.Prior, "d2-prior-order", false, "d2cache: decode by certainty prior (confidence × density of decoded neighbours) instead of confidence alone")
	fl.IntVar(&c.DLLM.Kp, "dllm-kp", d.DLLM.Kp, "dllm-cache: refresh the prompt's K/V every Kp steps")
	fl.IntVar(&c.DLLM.Kr, "dllm-kr", d.DLLM.Kr, "dllm-cache: refresh the response's K/V every Kr steps")
	fl.Float64Var(&c.DLLM.Rho, "dllm-rho", d.DLLM.Rho, "dllm-cache: between refreshes, the fraction of response rows recomputed (those whose V changed most)")
	fl.IntVar(&c.FreeRefresh, "free-refresh", 0, "freecache: a full forward every N steps (0: only the first)")
	fl.StringVar(&c.Decoder, "decoder", "", "decoder for every method: schedule (the schedule's count of commits a step) or threshold:T (Fast-dLLM's parallel decoding, T in (0, 1]); empty: each method's own (threshold for block, the schedule for the rest); a method spec NAME@DECODER sets it for one method")
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
	stat, err := parseStat(c.Stat)
	if err != nil {
		return nil, err
	}
	if c.Refresh < 0 {
		return nil, fmt.Errorf("--refresh must be positive (0: the model card's R), got %d", c.Refresh)
	}
	dec, err := model.ParseDecoding(c.Decoder)
	if err != nil {
		return nil, fmt.Errorf("--decoder: %w", err)
	}
	src, _ := deepSource(c.DeepSource, table)
	o := cache.Options{Decoding: dec, Store: store, Table: table, Stat: stat, DeepSource: cache.DeepSource(src),
		Fingerprint: lm.Fingerprint, Salt: c.Salt, Refresh: lm.Card.RefreshOr(c.Refresh), Drift: c.Drift,
		BlockLength: c.DualBlock, Threshold: c.Threshold, D2: c.D2, DLLM: c.DLLM, FreeRefresh: c.FreeRefresh}
	m, err := cache.New(name, o)
	if err != nil {
		return nil, err
	}
	return m, cache.CheckModel(m, lm.Config)
}

// deepSource resolves --deep-source auto for table t: the store (prefix
// K/V shared across requests) when t is calibrated for it (dlmcache
// calibrate checked those depths against answers), else the request
// source, the one that kept every answer of the bundled model with a
// cosine table (docs/results.md: the store's stand-alone prefix K/V lose
// what the question writes into the prefix rows at cosine depths). why
// says which and why, for serve's startup line.
func deepSource(flag string, t *lut.Table) (source, why string) {
	switch {
	case flag != "auto":
		return flag, "--deep-source " + flag
	case t != nil && t.CalibratedFor("store"):
		return "store", "the table is calibrated for the store source: shallow prefix K/V are shared across requests"
	case t != nil:
		return "request", "the table is not calibrated for the store source (dlmcache calibrate), so no prefix K/V are shared across requests; each request reuses its own first step's"
	}
	return "request", "no table"
}

// methodEnv is a loaded model with its generation defaults and the --lut
// table: what eval, bench and the sweeps build their methods from.
type methodEnv struct {
	lm    *loadedModel
	gen   model.GenOptions
	table *lut.Table // nil without --lut
	cache *cacheFlags
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
	if c.LUT != "" {
		if e.table, err = readTable(c.LUT, lm); err != nil {
			lm.Close()
			return nil, err
		}
		src, _ := deepSource(c.DeepSource, e.table)
		if w := crossRequestWarning(src, e.table); w != "" {
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

// newStore builds the prefix store the flags ask for.
func newStore(lm *loadedModel, c *cacheFlags) (cache.PrefixStore, error) {
	ev, err := cache.ParseEviction(c.Eviction)
	if err != nil {
		return nil, err
	}
	if c.StoreBlocks < 0 {
		return nil, fmt.Errorf("--store-blocks %d: want 0 (whole prefixes) or a block length", c.StoreBlocks)
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
