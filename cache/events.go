package cache

import "sync"

// KVEvent is one change to a block store, for cache-aware routers that
// follow which replica holds which prefix blocks (vLLM's KV events): a
// block stored or removed, named by its chained hash and its parent's
// ("" for a first block), or every block cleared. Its JSON form (GET
// /v1/kv_events) carries no token ids and no salt; the fields without a
// JSON name are for the ZMQ stream in vLLM's format (serve/kvevents),
// which carries a stored block's token ids and the request's cache_salt.
type KVEvent struct {
	Seq    uint64 `json:"seq"`
	Type   string `json:"type"` // "stored", "removed" or "cleared"
	Hash   string `json:"block_hash,omitempty"`
	Parent string `json:"parent_hash,omitempty"`
	Tokens int    `json:"token_count"`

	Key       Key     `json:"-"` // the block's hash
	ParentKey Key     `json:"-"` // its parent's (HasParent)
	HasParent bool    `json:"-"` // false: a first block
	TokenIDs  []int32 `json:"-"` // a stored block's tokens
	// CacheSalt is the cache_salt the block was stored under (the part of
	// its salt a client sent; the API key's namespace and the method's
	// salt are not in it).
	CacheSalt string `json:"-"`
}

// EventLog keeps the last events of a store with increasing sequence
// numbers, so that a router can resume from the last one it saw.
type EventLog struct {
	mu     sync.Mutex
	seq    uint64
	events []KVEvent // ring of the last cap events, oldest first
	cap    int
	wake   chan struct{} // closed and replaced on every event
}

// NewEventLog keeps the last capacity events (at least 1).
func NewEventLog(capacity int) *EventLog {
	return &EventLog{cap: max(1, capacity), wake: make(chan struct{})}
}

// add appends e with the next sequence number. A nil log drops it.
func (g *EventLog) add(e KVEvent) { g.Add(e) }

// Add appends e with the next sequence number (a store's events; tests of
// the log's readers). A nil log drops it. It never blocks on a reader.
func (g *EventLog) Add(e KVEvent) {
	if g == nil {
		return
	}
	g.mu.Lock()
	g.seq++
	e.Seq = g.seq
	if len(g.events) == g.cap {
		g.events = g.events[1:]
	}
	g.events = append(g.events, e)
	close(g.wake)
	g.wake = make(chan struct{})
	g.mu.Unlock()
}

// Since returns the events after sequence number seq, whether events after
// seq were dropped (the caller must resync), and a channel closed at the
// next event.
func (g *EventLog) Since(seq uint64) (events []KVEvent, gap bool, next <-chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.events) > 0 && g.events[0].Seq > seq+1 {
		gap = true
	}
	// The ring's sequence numbers are consecutive: the first one after seq
	// is at its offset from the oldest.
	if n := len(g.events); n > 0 {
		i := 0
		if seq >= g.events[0].Seq {
			i = int(min(seq-g.events[0].Seq+1, uint64(n)))
		}
		events = append(events, g.events[i:]...)
	}
	return events, gap, g.wake
}

// Seq is the last sequence number.
func (g *EventLog) Seq() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.seq
}
