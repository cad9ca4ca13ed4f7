package cache

import "sync"

// KVEvent is one change to a block store, for cache-aware routers that
// follow which replica holds which prefix blocks (vLLM's KV events): a
// block stored or removed, named by its chained hash and its parent's
// ("" for a first block). It carries no token ids and no salt.
type KVEvent struct {
	Seq    uint64 `json:"seq"`
	Type   string `json:"type"` // "stored" or "removed"
	Hash   string `json:"block_hash"`
	Parent string `json:"parent_hash,omitempty"`
	Tokens int    `json:"token_count"`
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
func (g *EventLog) add(e KVEvent) {
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
	for _, e := range g.events {
		if e.Seq > seq {
			events = append(events, e)
		}
	}
	return events, gap, g.wake
}

// Seq is the last sequence number.
func (g *EventLog) Seq() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.seq
}
