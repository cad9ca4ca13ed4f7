package engine

import (
	"fmt"

	"github.com/dlmcache/dlmcache/cache"
	"github.com/dlmcache/dlmcache/model/backend"
	"github.com/dlmcache/dlmcache/model/cpu"
)

// StoreConfig is the prefix store the methods share: its budget and kind.
type StoreConfig struct {
	Bytes      int64  // --cache-bytes
	SpillBytes int64  // --spill-bytes: a host-memory second tier (whole-prefix store)
	Eviction   string // --eviction: fifo or lru (whole-prefix store)
	// Blocks is --store-blocks: 0 keys whole prefixes, N stores N-token
	// blocks (at least MinStoreBlocks). Build gives the exact block cache
	// the model's own block for 0 (cache.ExactStoreBlocks).
	Blocks int
	Fill   string // --store-fill: causal or whole (block store)
	// Events, with a block store, keeps its KV events (serve).
	Events bool

	// modelBlocks: Blocks is the model's own block, not the flag's, so
	// the flag's floor does not apply.
	modelBlocks bool
}

// MinStoreBlocks is --store-blocks' least block length: the block store's
// causal fill runs one forward per block over the tokens up to it, so a
// prefix of P tokens costs P/N forwards. On the bundled llada-tiny (one
// thread, AMD EPYC), filling 1,024 tokens took 16.5 s in blocks of 1, 7.1 s
// of 2, 1.8 s of 4, 1.16 s of 8, 0.79 s of 16 and 0.32 s of 32: from 8 up
// a halving of the block costs at most 1.5×, below it 1.5–4× each.
const MinStoreBlocks = 8

// NewStore builds the prefix store s asks for on backend b (events: the
// block store's KV event log, or nil).
func NewStore(b backend.Backend, s StoreConfig, events *cache.EventLog) (cache.PrefixStore, error) {
	ev, err := cache.ParseEviction(s.Eviction)
	if err != nil {
		return nil, err
	}
	if s.Blocks < 0 {
		return nil, fmt.Errorf("--store-blocks %d: want 0 (whole prefixes) or a block length", s.Blocks)
	}
	if s.Blocks > 0 && s.Blocks < MinStoreBlocks && !s.modelBlocks {
		return nil, fmt.Errorf("--store-blocks %d: want at least %d tokens a block (or 0: whole prefixes): the causal fill runs one forward per block, "+
			"so smaller blocks multiply a prefix's forwards (a 1,024-token prefix took 16.5 s in blocks of 1, 1.8 s of 4, 1.2 s of 8, 0.8 s of 16: docs/serving.md)", s.Blocks, MinStoreBlocks)
	}
	if s.Blocks > 0 {
		if s.SpillBytes > 0 {
			return nil, fmt.Errorf("--spill-bytes works with the whole-prefix store only (--store-blocks 0)")
		}
		if s.Fill != "causal" && s.Fill != "whole" {
			return nil, fmt.Errorf("--store-fill %q: want causal or whole", s.Fill)
		}
		return cache.NewBlockStore(b, s.Blocks, s.Bytes, s.Fill == "causal", events), nil
	}
	store := cache.NewStore(b, s.Bytes, ev)
	if s.SpillBytes > 0 {
		store.SetSpill(cache.NewStore(cpu.New(0), s.SpillBytes, ev))
	}
	return store, nil
}
