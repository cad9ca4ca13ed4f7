package serve

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"maps"
	"net"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/go-zeromq/zmq4/security/null"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/dlmcache/dlmcache/cache"
	"github.com/dlmcache/dlmcache/serve/kvevents"
)

// kvServer is blockServer with its event log published on a ZMQ socket.
func kvServer(t *testing.T, blocks int, layout kvevents.Layout) (*Server, *cache.BlockStore, *kvevents.Publisher) {
	t.Helper()
	var pub *kvevents.Publisher
	s, st := blockServer(t, blocks, func(c *Config) {
		var err error
		pub, err = kvevents.Start(kvevents.Config{Log: c.Events, Endpoint: "tcp://127.0.0.1:0", ReplayEndpoint: "tcp://127.0.0.1:0",
			Topic: "kv@127.0.0.1:8000@tiny", Layout: layout, BlockSize: 8, Partial: true, SubscriberBuffer: 2, SendBuffer: 1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pub.Close() })
		c.KVEvents = pub
		c.ResetPrefixCache = true
	})
	return s, st, pub
}

// Generations on a server publishing KV events, with a subscriber that
// connects, subscribes and never reads: every generation completes, the
// batches that did not fit its queue are counted in /metrics, and a
// reading subscriber's index (rebuilt from BlockStored / BlockRemoved
// events in vLLM's map layout) equals the store's blocks. /v1/models
// names the block size; /reset_prefix_cache clears the store with one
// AllBlocksCleared event.
func TestKVEventsOverZMQ(t *testing.T) {
	s, st, pub := kvServer(t, 6, kvevents.Map)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	stuck := stuckSubscriber(t, pub)
	defer stuck.Close()
	sub := zmq4.NewSub(ctx)
	defer sub.Close()
	if err := sub.Dial("tcp://" + pub.Addr().String()); err != nil {
		t.Fatal(err)
	}
	if err := sub.SetOption(zmq4.OptionSubscribe, "kv@127.0.0.1:8000@"); err != nil {
		t.Fatal(err)
	}
	for pub.Stats().Subscribers < 2 {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // the subscriptions, after the handshakes
	x := &kvIndex{t: t, ctx: ctx, pub: pub, batches: receiveBatches(t, sub), index: map[string]bool{}}

	doc := "Reference table: alpha is 12, beta is 7, gamma is 30, delta is 4, epsilon is 19, zeta is 8."
	for i := range 16 {
		sys := doc + strings.Repeat(" Answer briefly.", i%5) + strings.Repeat(" Be exact.", i/5)
		q := []string{"What is beta?", "What is gamma?", "What is alpha?", "What is zeta?"}[i%4]
		if rec := post(t, s, "/v1/chat/completions", chatBody(sys, q, "")); rec.Code != 200 {
			t.Fatalf("request %d: %d %s", i, rec.Code, rec.Body)
		}
	}
	page := metricsPage(t, s)
	if metric(t, page, "dlmcache_prefix_cache_evictions_total") == 0 {
		t.Fatal("no eviction: make the store smaller")
	}
	time.Sleep(100 * time.Millisecond) // the last events, through the log to the publisher
	x.catchUp()
	if got, want := slices.Sorted(maps.Keys(x.index)), st.Blocks(); !slices.Equal(got, want) {
		t.Errorf("the subscriber's index %v\nthe store's blocks     %v", got, want)
	}
	if x.stored == 0 || x.removed == 0 || !x.partial {
		t.Errorf("stored %d, removed %d events, partial marker %v", x.stored, x.removed, x.partial)
	}
	if x.replayed > 0 {
		t.Logf("%d gaps of the reading subscriber filled from the replay socket", x.replayed)
	}
	page = metricsPage(t, s)
	if d := metric(t, page, "dlmcache_kv_events_dropped_total"); d == 0 {
		t.Errorf("no batch dropped for the subscriber that never reads (queue of 2): %v", pub.Stats())
	}
	if n := metric(t, page, "dlmcache_kv_events_batches_total"); n == 0 || metric(t, page, "dlmcache_kv_events_subscribers") != 2 ||
		!strings.Contains(page, "dlmcache_kv_events_dials_total 0\n") {
		t.Errorf("batches %v, stats %+v", n, pub.Stats())
	}

	var models struct {
		Data []struct {
			BlockSize int `json:"block_size"`
		} `json:"data"`
	}
	if err := json.Unmarshal(get(t, s, "/v1/models").Body.Bytes(), &models); err != nil || len(models.Data) != 1 || models.Data[0].BlockSize != 8 {
		t.Errorf("/v1/models: %+v %v", models, err)
	}
	if rec := post(t, s, "/reset_prefix_cache", ""); rec.Code != 200 || len(st.Blocks()) != 0 {
		t.Fatalf("/reset_prefix_cache: %d %s", rec.Code, rec.Body)
	}
	time.Sleep(100 * time.Millisecond)
	x.catchUp()
	if x.cleared != 1 || len(x.index) != 0 {
		t.Errorf("cleared %d, index %d", x.cleared, len(x.index))
	}
}

// stuckSubscriber connects to pub and subscribes (handshake and
// subscription), then reads nothing, on the kernel's smallest buffer.
func stuckSubscriber(t *testing.T, pub *kvevents.Publisher) net.Conn {
	t.Helper()
	nc, err := net.Dial("tcp", pub.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	nc.(*net.TCPConn).SetReadBuffer(1) //nolint:errcheck // the kernel's smallest
	zc, err := zmq4.Open(nc, null.Security(), zmq4.Sub, zmq4.SocketIdentity(""), false, nil)
	if err != nil {
		nc.Close()
		t.Fatal(err)
	}
	if err := zc.SendMsg(zmq4.NewMsg(append([]byte{1}, "kv@"...))); err != nil {
		nc.Close()
		t.Fatal(err)
	}
	return nc
}

// eventBatch is one published batch: its sequence number and events.
type eventBatch struct {
	seq    uint64
	events []map[string]any
}

// decodeBatch decodes a batch message's frames (topic, sequence number,
// msgpack payload).
func decodeBatch(m zmq4.Msg) (eventBatch, error) {
	var b struct { // [ts, events, data_parallel_rank]
		_      struct{} `msgpack:",array"`
		TS     float64
		Events []map[string]any
		Rank   int
	}
	err := msgpack.Unmarshal(m.Frames[2], &b)
	return eventBatch{binary.BigEndian.Uint64(m.Frames[1]), b.Events}, err
}

// receiveBatches decodes what sub receives onto the channel it returns,
// closed when sub's receiving ends.
func receiveBatches(t *testing.T, sub zmq4.Socket) <-chan eventBatch {
	batches := make(chan eventBatch, 1<<12)
	go func() {
		defer close(batches)
		for {
			m, err := sub.Recv()
			if err != nil {
				return
			}
			b, err := decodeBatch(m)
			if err != nil {
				t.Error(err)
				return
			}
			batches <- b
		}
	}()
	return batches
}

// kvIndex is a reading subscriber's index of the store's blocks, rebuilt
// from the events, and the events it counted.
type kvIndex struct {
	t       *testing.T
	ctx     context.Context
	pub     *kvevents.Publisher
	batches <-chan eventBatch

	index                    map[string]bool
	stored, removed, cleared int
	partial                  bool
	next                     uint64 // the next batch's sequence number
	replayed                 int    // gaps filled from the replay socket
}

// catchUp applies the batches up to the publisher's sequence number,
// those dropped for this subscriber from the replay socket.
func (x *kvIndex) catchUp() {
	x.t.Helper()
	until := x.pub.Stats().Seq
	for x.next < until {
		var b eventBatch
		var ok bool
		select {
		case b, ok = <-x.batches:
		case <-time.After(2 * time.Second):
			// The last batches dropped for this subscriber: replay them.
			for _, r := range replay(x.t, x.ctx, x.pub, x.next) {
				x.apply(r.events)
				x.next = r.seq + 1
			}
			x.replayed++
			continue
		}
		if !ok {
			x.t.Fatalf("no batch %d (of %d)", x.next, until)
		}
		if b.seq < x.next {
			continue
		}
		if b.seq > x.next { // dropped for this subscriber too: replay the gap
			for _, r := range replay(x.t, x.ctx, x.pub, x.next) {
				if r.seq < b.seq {
					x.apply(r.events)
				}
			}
			x.replayed++
		}
		x.next = b.seq + 1
		x.apply(b.events)
	}
}

// apply applies one batch's events to the index.
func (x *kvIndex) apply(events []map[string]any) {
	for _, e := range events {
		switch e["type"] {
		case "BlockStored":
			x.stored++
			for _, h := range e["block_hashes"].([]any) {
				x.index[cache.Key(toInt(h)).String()] = true
			}
			if ek, ok := e["extra_keys"].([]any); ok {
				x.partial = x.partial || slices.Contains(ek[len(ek)-1].([]any), any(kvevents.PartialDepthKey))
			}
		case "BlockRemoved":
			x.removed++
			for _, h := range e["block_hashes"].([]any) {
				delete(x.index, cache.Key(toInt(h)).String())
			}
		case "AllBlocksCleared":
			x.cleared++
			clear(x.index)
		}
	}
}

// replay asks the publisher's replay socket for the batches from start on.
func replay(t *testing.T, ctx context.Context, pub *kvevents.Publisher, start uint64) []eventBatch {
	t.Helper()
	d := zmq4.NewDealer(ctx)
	defer d.Close()
	if err := d.Dial("tcp://" + pub.ReplayAddr().String()); err != nil {
		t.Fatal(err)
	}
	var sb [8]byte
	binary.BigEndian.PutUint64(sb[:], start)
	if err := d.Send(zmq4.NewMsgFrom([]byte{}, sb[:])); err != nil {
		t.Fatal(err)
	}
	var out []eventBatch
	for {
		m, err := d.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if string(m.Frames[1]) == string(kvevents.EndSeq) {
			return out
		}
		b, err := decodeBatch(m)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
}

// toInt is a msgpack-decoded integer of any width as an int64.
func toInt(v any) int64 {
	switch r := reflect.ValueOf(v); {
	case r.CanInt():
		return r.Int()
	case r.CanUint():
		return int64(r.Uint())
	}
	return 0
}
