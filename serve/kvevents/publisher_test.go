package kvevents

import (
	"context"
	"encoding/binary"
	"net"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/go-zeromq/zmq4/security/null"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/dlmcache/dlmcache/cache"
)

func startPublisher(t *testing.T, log *cache.EventLog, configure ...func(*Config)) *Publisher {
	t.Helper()
	c := Config{Log: log, Endpoint: "tcp://127.0.0.1:0", ReplayEndpoint: "tcp://127.0.0.1:0", Topic: "kv@pod-a:8000@tiny",
		BlockSize: 2, Now: func() time.Time { return time.Unix(1, 500_000_000) }}
	for _, f := range configure {
		f(&c)
	}
	p, err := Start(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for i := 0; i < 1000; i++ {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

func stored(key, parent cache.Key, toks ...int32) cache.KVEvent {
	return cache.KVEvent{Type: "stored", Key: key, ParentKey: parent, HasParent: parent != 0, TokenIDs: toks}
}

// dialSub is a SUB socket on ctx dialled to p and subscribed to topic.
func dialSub(ctx context.Context, t *testing.T, p *Publisher, topic string) zmq4.Socket {
	t.Helper()
	sub := zmq4.NewSub(ctx)
	if err := sub.Dial("tcp://" + p.Addr().String()); err != nil {
		sub.Close()
		t.Fatal(err)
	}
	if err := sub.SetOption(zmq4.OptionSubscribe, topic); err != nil {
		sub.Close()
		t.Fatal(err)
	}
	return sub
}

// A ZMQ SUB socket (go-zeromq's own) gets [topic, sequence, payload]
// messages whose payload decodes as vLLM's batch; a DEALER on the replay
// socket gets every held batch from the sequence it asks for, then the end
// marker.
func TestPublishAndReplay(t *testing.T) {
	log := cache.NewEventLog(64)
	p := startPublisher(t, log)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sub := dialSub(ctx, t, p, "kv@")
	defer sub.Close()
	waitFor(t, "the subscription", func() bool { return hasSubscriber(p) })
	log.Add(stored(1, 0, 5, 6))
	log.Add(stored(2, 1, 7, 8))
	msg, err := sub.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if len(msg.Frames) != 3 || string(msg.Frames[0]) != "kv@pod-a:8000@tiny" || binary.BigEndian.Uint64(msg.Frames[1]) != 0 {
		t.Fatalf("message %q", msg.Frames)
	}
	var b []any
	if err := msgpack.Unmarshal(msg.Frames[2], &b); err != nil {
		t.Fatal(err)
	}
	if len(b) != 3 || b[0] != 1.5 {
		t.Fatalf("batch %v", b)
	}
	evs := b[1].([]any)
	if n := len(evs); n != 1 && n != 2 {
		t.Fatalf("events %v", evs)
	}
	if ev := evs[0].([]any); ev[0] != "BlockStored" || len(ev) != 8 {
		t.Fatalf("event %v", ev)
	}
	log.Add(cache.KVEvent{Type: "cleared"})
	// The subscriber reads on to the clear's batch: its sequence number + 1
	// is how many batches there are, however the stores were batched.
	n := uint64(0)
	for n == 0 {
		m, err := sub.Recv()
		if err != nil {
			t.Fatal(err)
		}
		var bb []any
		if err := msgpack.Unmarshal(m.Frames[2], &bb); err != nil {
			t.Fatal(err)
		}
		for _, ev := range bb[1].([]any) {
			if ev.([]any)[0] == "AllBlocksCleared" {
				n = binary.BigEndian.Uint64(m.Frames[1]) + 1
			}
		}
	}

	// Replay from 1: batches 1..n-1, then the end marker.
	d := zmq4.NewDealer(ctx)
	defer d.Close()
	if err := d.Dial("tcp://" + p.ReplayAddr().String()); err != nil {
		t.Fatal(err)
	}
	var start [8]byte
	binary.BigEndian.PutUint64(start[:], 1)
	if err := d.Send(zmq4.NewMsgFrom([]byte{}, start[:])); err != nil {
		t.Fatal(err)
	}
	for want := uint64(1); ; want++ {
		m, err := d.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if len(m.Frames) != 3 || len(m.Frames[0]) != 0 {
			t.Fatalf("replay frames %q", m.Frames)
		}
		if string(m.Frames[1]) == string(EndSeq) {
			if want != n || len(m.Frames[2]) != 0 {
				t.Fatalf("end marker after %d batches, want %d", want-1, n-1)
			}
			break
		}
		if got := binary.BigEndian.Uint64(m.Frames[1]); got != want {
			t.Fatalf("replayed seq %d, want %d", got, want)
		}
	}
	if p.Stats().Replays != 1 {
		t.Errorf("replays %d", p.Stats().Replays)
	}
}

// A subscriber that completes the handshake, subscribes and never reads
// holds up nothing: the log's writer never waits, the publisher goes on
// publishing (its batches to that subscriber dropped and counted past its
// queue and the kernel's buffers), and a second subscriber gets them.
// With no subscriber at all, nothing is dropped or queued.
func TestSlowSubscriberNeverBlocks(t *testing.T) {
	log := cache.NewEventLog(1 << 12)
	p := startPublisher(t, log, func(c *Config) { c.SubscriberBuffer = 4; c.WriteTimeout = time.Hour })
	for i := range 100 {
		log.Add(stored(cache.Key(i+1), 0, 1, 2))
	}
	waitFor(t, "publishing with no subscriber", func() bool { return p.Stats().Seq > 0 && p.cfg.Log.Seq() == 100 && p.Stats().Batches == p.Stats().Seq })
	if s := p.Stats(); s.Dropped != 0 || s.Subscribers != 0 {
		t.Errorf("no subscriber: %+v", s)
	}

	nc, err := net.Dial("tcp", p.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	zc, err := zmq4.Open(nc, null.Security(), zmq4.Sub, zmq4.SocketIdentity(""), false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := zc.SendMsg(zmq4.NewMsg(append([]byte{1}, "kv@"...))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the stuck subscriber's subscription", func() bool { return hasSubscriber(p) })
	// Batches of 1,024 events of 64 tokens each until some are dropped.
	toks := make([]int32, 64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; p.Stats().Dropped == 0 && i < 1<<20; i++ {
			log.Add(stored(cache.Key(1000+i), 0, toks...))
		}
	}()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("the log's writer was held up by a subscriber that never reads")
	}
	s := p.Stats()
	if s.Dropped == 0 {
		t.Fatalf("nothing dropped for a subscriber that never reads: %+v", s)
	}
	// A second subscriber still gets what is published now.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sub := dialSub(ctx, t, p, "")
	defer sub.Close()
	waitFor(t, "two subscribers", func() bool { return p.Stats().Subscribers == 2 })
	time.Sleep(50 * time.Millisecond) // the subscription frame after the handshake
	log.Add(cache.KVEvent{Type: "cleared"})
	for {
		m, err := sub.Recv()
		if err != nil {
			t.Fatalf("%v: %+v (log seq %d)", err, p.Stats(), log.Seq())
		}
		var b []any
		if err := msgpack.Unmarshal(m.Frames[2], &b); err != nil {
			t.Fatal(err)
		}
		if evs := b[1].([]any); evs[len(evs)-1].([]any)[0] == "AllBlocksCleared" {
			break
		}
	}
}

// With Connect the publisher dials a subscriber's bound SUB socket (as
// vLLM's PUB connects to a router that binds one socket for every engine),
// and dials again when that subscriber goes and comes back.
func TestConnectAndRedial(t *testing.T) {
	log := cache.NewEventLog(64)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	listen := func(ep string) zmq4.Socket {
		sub := zmq4.NewSub(ctx)
		if err := sub.Listen(ep); err != nil {
			t.Fatal(err)
		}
		if err := sub.SetOption(zmq4.OptionSubscribe, "kv@"); err != nil {
			t.Fatal(err)
		}
		return sub
	}
	sub := listen("tcp://127.0.0.1:0")
	ep := "tcp://" + sub.Addr().String()
	p := startPublisher(t, log, func(c *Config) {
		c.Endpoint, c.ReplayEndpoint, c.Connect, c.RedialInterval = "", "", []string{ep}, 20*time.Millisecond
	})
	if p.Addr() != nil {
		t.Errorf("no Endpoint, yet bound at %v", p.Addr())
	}
	subscribed := func() bool { return hasSubscriber(p) }
	waitFor(t, "the dialled subscription", subscribed)
	log.Add(stored(1, 0, 5, 6))
	if m, err := sub.Recv(); err != nil || len(m.Frames) != 3 || binary.BigEndian.Uint64(m.Frames[1]) != 0 {
		t.Fatalf("first message %q (%v)", m.Frames, err)
	}
	sub.Close()
	waitFor(t, "the lost connection", func() bool { return p.Stats().Subscribers == 0 })
	sub = listen(ep)
	defer sub.Close()
	waitFor(t, "the redial", func() bool { return p.Stats().Dials >= 2 && subscribed() })
	log.Add(stored(2, 1, 7, 8))
	if m, err := sub.Recv(); err != nil || len(m.Frames) != 3 || binary.BigEndian.Uint64(m.Frames[1]) != 1 {
		t.Fatalf("message after the redial %q (%v)", m.Frames, err)
	}
	if _, err := Start(Config{Log: log, Connect: []string{"tcp://*:5557"}}); err == nil {
		t.Error("Connect to tcp://*:5557: no error")
	}
	if _, err := Start(Config{Log: log}); err == nil {
		t.Error("neither Endpoint nor Connect: no error")
	}
}

// hasSubscriber reports whether one of p's subscribers has subscribed to
// its topic.
func hasSubscriber(p *Publisher) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for s := range p.subs {
		if s.subscribed(p.cfg.Topic) {
			return true
		}
	}
	return false
}
