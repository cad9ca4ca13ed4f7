package main

import (
	"fmt"
	"strings"

	"github.com/spf13/pflag"

	"github.com/dlmcache/dlmcache/cache"
	"github.com/dlmcache/dlmcache/engine"
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
	StoreFill   string
	Decoder     string
	Method      cache.Options // every method's flags (cache.AddFlags); engine.Build settles them
	// Guide is --guide (generate, eval, bench and serve declare it:
	// addGuideFlag).
	Guide string
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

// config is the engine's config of these flags and mf's, rf's, its
// start-up lines to f's stderr.
func (c *cacheFlags) config(f *factory, mf modelFlags, rf regimeFlags) engine.Config {
	cfg := modelConfig(f, mf, rf)
	cfg.LUT, cfg.Guide, cfg.Salt, cfg.Decoder, cfg.Options = c.LUT, c.Guide, c.Salt, c.Decoder, c.Method
	cfg.Store = engine.StoreConfig{Bytes: c.CacheBytes, SpillBytes: c.SpillBytes, Eviction: c.Eviction, Blocks: c.StoreBlocks, Fill: c.StoreFill}
	return cfg
}

// methodsHelp lists the registered methods for --help.
func methodsHelp() string {
	var b strings.Builder
	for _, s := range cache.Specs() {
		fmt.Fprintf(&b, "\n  %-18s %s", s.Name, s.Summary)
	}
	return b.String()
}
