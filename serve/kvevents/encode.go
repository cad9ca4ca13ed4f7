// Package kvevents publishes a block store's KV events in vLLM's wire
// format, for the cache-aware routers that read vLLM's stream (llm-d's
// precise prefix-cache scorer, NVIDIA Dynamo's KV router): a ZMQ PUB
// socket sending three-frame messages [topic, sequence, payload], the
// payload a msgpack event batch of BlockStored, BlockRemoved and
// AllBlocksCleared events, and a ZMQ ROUTER socket that replays the
// batches it still holds from a sequence number a consumer asks for.
//
// The wire layout (vllm/distributed/kv_events.py):
//
//	frames:  topic (UTF-8), sequence (8 bytes, big-endian, from 0), payload
//	batch:   [ts float64, [event…], data_parallel_rank]  (both layouts)
//	stored:  ["BlockStored", block_hashes, parent_block_hash|nil, token_ids,
//	          block_size, lora_id (nil), medium ("GPU"), lora_name (nil)
//	          [, extra_keys]]
//	removed: ["BlockRemoved", block_hashes, medium]
//	cleared: ["AllBlocksCleared"]
//
// In the Map layout each event is a map whose first key, "type", names it,
// followed by the same fields by name; the batch stays a positional array,
// as vLLM writes it (its events became tagged maps, its batch did not), and
// as every router reads it. extra_keys (one entry per block: an
// array of keys or nil) is left out when every entry is nil, as vLLM's
// encoder leaves out fields at their default. Block hashes are the store's
// 64-bit chained keys written as signed 64-bit integers (their two's
// complement bits) in msgpack's 9-byte int64 form (0xd3) whatever their
// value: llm-d's decoder reads a hash only as a 64-bit integer (or bytes)
// and rejects the whole batch when one arrives as a fixint or an 8-, 16- or
// 32-bit integer, the forms a compact encoder picks for a small value;
// Dynamo's reads an int64 as its signed hash.
//
// extra_keys is what a consumer folds into its own block keys: llm-d
// treats every string in it as a multimodal item's hash, so a request
// whose keys it computes from tokens alone never matches a block that
// carries one (ExtraKeys chooses what is written).
package kvevents

import (
	"bytes"
	"fmt"
	"slices"
	"strings"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/dlmcache/dlmcache/cache"
)

// Layout is how events are written: vLLM's positional arrays, or the
// tagged maps newer vLLM writes.
type Layout int

const (
	// Array writes each event as an array led by its type name and the
	// batch as [ts, events, data_parallel_rank].
	Array Layout = iota
	// Map writes each event as a map tagged by "type" inside the same
	// positional batch [ts, events, data_parallel_rank].
	Map
)

var layoutNames = []string{Array: "array", Map: "map"}

// ParseLayout reads a layout's name: "array" or "map".
func ParseLayout(s string) (Layout, error) {
	return parseName[Layout]("kv-events layout", layoutNames, s)
}

func (l Layout) String() string { return nameOf(layoutNames, int(l)) }

// PartialDepthKey is the extra key of every block a bidirectional model's
// store announces: the block holds K/V computed over the prefix of the
// request that stored it, which the bicache family reuses to a depth and
// refreshes past it, not exact K/V a causal engine would compute.
const PartialDepthKey = "dlmcache:partial-depth"

// ExtraKeys chooses what a BlockStored's extra_keys carry.
type ExtraKeys int

const (
	// ExtraAll writes a first block's cache salt and, on a bidirectional
	// model, PartialDepthKey in every block's.
	ExtraAll ExtraKeys = iota
	// ExtraSalt writes the cache salt only, as vLLM does.
	ExtraSalt
	// ExtraNone writes no extra keys: blocks keyed by their tokens alone,
	// as llm-d's scorer keys a request it has not seen multimodal input in.
	ExtraNone
)

var extraKeysNames = []string{ExtraAll: "all", ExtraSalt: "salt", ExtraNone: "none"}

// ParseExtraKeys reads a policy's name: "all", "salt" or "none".
func ParseExtraKeys(s string) (ExtraKeys, error) {
	return parseName[ExtraKeys]("kv-events extra keys", extraKeysNames, s)
}

func (x ExtraKeys) String() string { return nameOf(extraKeysNames, int(x)) }

// parseName is the value whose name in names (indexed by value) is s;
// what names the setting in the error.
func parseName[T ~int](what string, names []string, s string) (T, error) {
	if i := slices.Index(names, s); i >= 0 {
		return T(i), nil
	}
	return 0, fmt.Errorf("%s %q: want %s or %s", what, s, strings.Join(names[:len(names)-1], ", "), names[len(names)-1])
}

// nameOf is value i's name in names; the first's for one out of range.
func nameOf(names []string, i int) string {
	if i < 0 || i >= len(names) {
		return names[0]
	}
	return names[i]
}

// Medium is the storage tier events name (vLLM's MEDIUM_GPU: the tier
// routers score as the engine's own cache).
const Medium = "GPU"

// Event is one event of a batch in vLLM's schema.
type Event struct {
	Type        string // "BlockStored", "BlockRemoved" or "AllBlocksCleared"
	BlockHashes []cache.Key
	Parent      cache.Key // BlockStored: the first block's parent, when HasParent
	HasParent   bool
	TokenIDs    []int32 // BlockStored: every block's tokens, in order
	BlockSize   int
	ExtraKeys   [][]string // BlockStored: per block, nil or its extra keys
}

// Events turns a store's events into vLLM's, in order: consecutive stored
// blocks that extend one another become one BlockStored, as vLLM writes a
// request's new blocks; consecutive removals one BlockRemoved. Under
// ExtraAll and ExtraSalt each first block's extra keys hold its cache_salt
// (when not empty); under ExtraAll, with partial, every block's hold
// PartialDepthKey.
func Events(evs []cache.KVEvent, blockSize int, partial bool, x ExtraKeys) []Event {
	var out []Event
	for _, e := range evs {
		var last *Event
		if len(out) > 0 {
			last = &out[len(out)-1]
		}
		switch e.Type {
		case "stored":
			var extra []string
			if x != ExtraNone && !e.HasParent && e.CacheSalt != "" {
				extra = append(extra, e.CacheSalt)
			}
			if partial && x == ExtraAll {
				extra = append(extra, PartialDepthKey)
			}
			if last != nil && last.Type == "BlockStored" && e.HasParent && e.ParentKey == last.BlockHashes[len(last.BlockHashes)-1] {
				last.BlockHashes = append(last.BlockHashes, e.Key)
				last.TokenIDs = append(last.TokenIDs, e.TokenIDs...)
				last.ExtraKeys = append(last.ExtraKeys, extra)
				continue
			}
			out = append(out, Event{Type: "BlockStored", BlockHashes: []cache.Key{e.Key}, Parent: e.ParentKey, HasParent: e.HasParent,
				TokenIDs: append([]int32(nil), e.TokenIDs...), BlockSize: blockSize, ExtraKeys: [][]string{extra}})
		case "removed":
			if last != nil && last.Type == "BlockRemoved" {
				last.BlockHashes = append(last.BlockHashes, e.Key)
				continue
			}
			out = append(out, Event{Type: "BlockRemoved", BlockHashes: []cache.Key{e.Key}})
		case "cleared":
			out = append(out, Event{Type: "AllBlocksCleared"})
		}
	}
	return out
}

// Encode writes an event batch in layout l.
func Encode(l Layout, ts float64, events []Event, dpRank int) ([]byte, error) {
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	w := &writer{enc: enc}
	w.arrayLen(3)
	w.err1(enc.EncodeFloat64(ts))
	w.arrayLen(len(events))
	for _, e := range events {
		w.event(l, e)
	}
	w.err1(enc.EncodeInt(int64(dpRank)))
	return buf.Bytes(), w.err
}

type writer struct {
	enc *msgpack.Encoder
	err error
}

func (w *writer) err1(err error) {
	if w.err == nil {
		w.err = err
	}
}
func (w *writer) str(s string)     { w.err1(w.enc.EncodeString(s)) }
func (w *writer) arrayLen(n int)   { w.err1(w.enc.EncodeArrayLen(n)) }
func (w *writer) mapLen(n int)     { w.err1(w.enc.EncodeMapLen(n)) }
func (w *writer) null()            { w.err1(w.enc.EncodeNil()) }
func (w *writer) hash(k cache.Key) { w.err1(w.enc.EncodeInt64(int64(k))) }

// field starts a field: its name in the Map layout, nothing in the Array.
func (w *writer) field(l Layout, name string) {
	if l == Map {
		w.str(name)
	}
}

func (w *writer) hashes(ks []cache.Key) {
	w.arrayLen(len(ks))
	for _, k := range ks {
		w.hash(k)
	}
}

func (w *writer) event(l Layout, e Event) {
	n := 1
	extra := false
	switch e.Type {
	case "BlockStored":
		for _, x := range e.ExtraKeys {
			extra = extra || x != nil
		}
		n = 8
		if extra {
			n = 9
		}
	case "BlockRemoved":
		n = 3
	}
	if l == Map {
		w.mapLen(n)
		w.str("type")
	} else {
		w.arrayLen(n)
	}
	w.str(e.Type)
	switch e.Type {
	case "BlockStored":
		w.field(l, "block_hashes")
		w.hashes(e.BlockHashes)
		w.field(l, "parent_block_hash")
		if e.HasParent {
			w.hash(e.Parent)
		} else {
			w.null()
		}
		w.field(l, "token_ids")
		w.arrayLen(len(e.TokenIDs))
		for _, t := range e.TokenIDs {
			w.err1(w.enc.EncodeInt(int64(t)))
		}
		w.field(l, "block_size")
		w.err1(w.enc.EncodeInt(int64(e.BlockSize)))
		w.field(l, "lora_id")
		w.null()
		w.field(l, "medium")
		w.str(Medium)
		w.field(l, "lora_name")
		w.null()
		if extra {
			w.field(l, "extra_keys")
			w.arrayLen(len(e.ExtraKeys))
			for _, x := range e.ExtraKeys {
				if x == nil {
					w.null()
					continue
				}
				w.arrayLen(len(x))
				for _, k := range x {
					w.str(k)
				}
			}
		}
	case "BlockRemoved":
		w.field(l, "block_hashes")
		w.hashes(e.BlockHashes)
		w.field(l, "medium")
		w.str(Medium)
	}
}
