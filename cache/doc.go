// Package cache holds the caching methods for diffusion language models and
// the cross-request prefix K/V store they share.
//
// A method (Method) owns its whole policy: the per-request planner that
// steers the model's one forward through model.Plan, the generation options
// it needs (Gen: block decoding, Fast-dLLM's threshold), its validation
// (New fails on options it cannot use) and, through optional interfaces,
// what it shares across requests (Storer, Tabled: StoreOf, TableOf).
// Methods are registered in one list (Specs, Names, New), which bench,
// eval, serve and --help read; Run is the one path every generation takes.
//
// Each method's file declares its typed options (BiCacheOptions,
// BlockOptions, D2Options, DLLMOptions, FreeOptions, ModuleOptions: fields
// of Options), its command-line flags (Spec.Flags; AddFlags declares every
// method's, or the named ones, Options.ForModel settles what they leave to the model and the
// table, such as --deep-source auto) and its knobs and calibration grid.
//
// One file per method: none and the registry (method.go), prefixall.go,
// bicache.go (BiCache, with Elastic-Cache's drift trigger as an option of
// its deep refresh), block.go (Fast-dLLM's dual cache), d2cache.go,
// dllmcache.go, freecache.go (FlashDLM's FreeCache), exactblock.go
// (block-causal models), table.go (a calibrated table's choice per
// request), modules.go (Prompt Cache's modules and their store). wrapper.go is
// BiCache's shallow prefix reuse as a wrapper around another planner — the
// way ollama's kvcache wrapper composes two caches — and compose.go builds
// the published compositions from it (bicache+block, bicache+d2cache,
// bicache+freecache). kv.go holds the shared pieces (kept K/V buffers, row
// sets); store.go the whole-prefix store, blockstore.go the block-granular
// store (chained block hashes, longest-chain reuse, lazy LRU over leaves)
// and events.go its KV event log for cache-aware routers. Methods take
// either through PrefixStore.
package cache
