package kvevents

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/go-zeromq/zmq4/security/null"

	"github.com/dlmcache/dlmcache/cache"
)

// Config configures a Publisher.
type Config struct {
	// Log is the block store's event log the publisher reads.
	Log *cache.EventLog
	// Endpoint is the PUB socket's address: tcp://*:PORT (every
	// interface) or tcp://HOST:PORT; the publisher binds it (port 0
	// picks a free one). Empty: no bound socket (Connect only).
	Endpoint string
	// Connect, if not empty, are subscribers' bound addresses
	// (tcp://HOST:PORT) the publisher dials, as vLLM's PUB connects to
	// an address without a wildcard: a router that binds one SUB socket
	// for every engine (llm-d's indexer with a zmqEndpoint) is reached
	// this way. A lost or refused connection is redialled every
	// RedialInterval until Close.
	Connect []string
	// RedialInterval is the wait between dials of a Connect address
	// (default 1 s).
	RedialInterval time.Duration
	// ReplayEndpoint, if not empty, is the ROUTER socket's address.
	ReplayEndpoint string
	// Topic is every message's first frame (llm-d's kv@POD@MODEL).
	Topic string
	// Layout chooses vLLM's arrays or its tagged maps.
	Layout Layout
	// BlockSize is the store's block length in tokens.
	BlockSize int
	// Partial marks every stored block with PartialDepthKey (a
	// bidirectional model's store).
	Partial bool
	// ExtraKeys chooses what BlockStored's extra_keys carry (default
	// ExtraAll: the cache salt and, with Partial, the marker).
	ExtraKeys ExtraKeys
	// DPRank is the batches' data_parallel_rank.
	DPRank int
	// SubscriberBuffer is how many batches may wait for one subscriber;
	// past it the subscriber's batches are dropped and counted (default
	// 1024). ReplayBatches is how many batches the replay socket holds
	// (default 10,000, vLLM's buffer_steps).
	SubscriberBuffer, ReplayBatches int
	// SendBuffer, if positive, is each subscriber connection's kernel send
	// buffer in bytes (SO_SNDBUF): with SubscriberBuffer, what one slow
	// subscriber may hold of this process's memory.
	SendBuffer int
	// WriteTimeout bounds a write to a subscriber or a replay consumer
	// that makes no progress; past it the connection is closed (default
	// 10 s).
	WriteTimeout time.Duration
	// Now is the clock of the batches' timestamps (default time.Now).
	Now func() time.Time
}

// Stats are a publisher's counters.
type Stats struct {
	Batches     uint64 // batches published
	Events      uint64 // events in them
	Dropped     uint64 // batches not queued to a subscriber whose buffer was full, or lost with its connection
	Lost        uint64 // store events overwritten in the log before the publisher read them
	Replays     uint64 // replay requests answered (every batch asked for sent)
	Dials       uint64 // connections made to Connect addresses (the first and every redial)
	Subscribers int    // connected subscribers
	Seq         uint64 // the next batch's sequence number
}

// Publisher sends a block store's events to ZMQ subscribers. A subscriber
// that is slow or gone never holds up the store or another subscriber:
// each has a bounded queue, and what does not fit is dropped and counted
// (Stats.Dropped); the store's side is the event log's bounded ring.
type Publisher struct {
	cfg    Config
	ln, rl net.Listener
	done   chan struct{}
	wg     sync.WaitGroup

	mu     sync.Mutex
	subs   map[*subscriber]struct{}
	replay []batch // ring of the last ReplayBatches, oldest first
	seq    uint64

	batches, events, dropped, lost, replays, dials atomic.Uint64
}

type batch struct {
	seq     uint64
	payload []byte
}

type subscriber struct {
	nc     net.Conn
	zc     *zmq4.Conn
	ch     chan [][]byte
	mu     sync.Mutex
	topics map[string]bool
	once   sync.Once
	gone   chan struct{}
}

// EndSeq is the replay socket's end marker: sequence −1, an empty payload.
var EndSeq = []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// listenAddr turns tcp://*:PORT or tcp://HOST:PORT into a listen address.
func listenAddr(ep string) (string, error) {
	rest, ok := strings.CutPrefix(ep, "tcp://")
	if !ok {
		return "", fmt.Errorf("%q: want tcp://*:PORT or tcp://HOST:PORT", ep)
	}
	host, port, err := net.SplitHostPort(rest)
	if err != nil {
		return "", fmt.Errorf("%q: %w", ep, err)
	}
	if host == "*" {
		host = ""
	}
	return net.JoinHostPort(host, port), nil
}

// Start binds the sockets and starts publishing.
func Start(cfg Config) (*Publisher, error) {
	if cfg.Log == nil {
		return nil, errors.New("kvevents: no event log (a block store)")
	}
	if cfg.SubscriberBuffer <= 0 {
		cfg.SubscriberBuffer = 1024
	}
	if cfg.ReplayBatches <= 0 {
		cfg.ReplayBatches = 10_000
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = 10 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.RedialInterval <= 0 {
		cfg.RedialInterval = time.Second
	}
	if cfg.Endpoint == "" && len(cfg.Connect) == 0 {
		return nil, errors.New("kvevents: no address to bind (Endpoint) or dial (Connect)")
	}
	var dials []string
	for _, c := range cfg.Connect {
		a, err := dialAddr(c)
		if err != nil {
			return nil, err
		}
		dials = append(dials, a)
	}
	p := &Publisher{cfg: cfg, done: make(chan struct{}), subs: map[*subscriber]struct{}{}}
	if cfg.Endpoint != "" {
		addr, err := listenAddr(cfg.Endpoint)
		if err != nil {
			return nil, err
		}
		if p.ln, err = net.Listen("tcp", addr); err != nil {
			return nil, err
		}
	}
	if cfg.ReplayEndpoint != "" {
		ra, err := listenAddr(cfg.ReplayEndpoint)
		if err == nil {
			p.rl, err = net.Listen("tcp", ra)
		}
		if err != nil {
			if p.ln != nil {
				p.ln.Close()
			}
			return nil, err
		}
		p.wg.Add(1)
		go p.accept(p.rl, p.serveReplay)
	}
	if p.ln != nil {
		p.wg.Add(1)
		go p.accept(p.ln, func(nc net.Conn) { p.serveSubscriber(nc, true) })
	}
	for _, a := range dials {
		p.wg.Add(1)
		go p.dial(a)
	}
	p.wg.Add(1)
	go p.run()
	return p, nil
}

// dialAddr turns tcp://HOST:PORT into a dial address (no wildcard: a
// connecting socket needs the peer's address).
func dialAddr(ep string) (string, error) {
	a, err := listenAddr(ep)
	if err != nil {
		return "", err
	}
	if host, _, _ := net.SplitHostPort(a); host == "" || strings.HasPrefix(ep, "tcp://*") {
		return "", fmt.Errorf("%q: a connecting socket needs the subscriber's host: tcp://HOST:PORT", ep)
	}
	return a, nil
}

// dial keeps a connection to a subscriber's bound SUB socket: it dials,
// serves the connection as a subscriber's until it ends, and dials again
// every RedialInterval until Close.
func (p *Publisher) dial(addr string) {
	defer p.wg.Done()
	d := net.Dialer{Timeout: p.cfg.WriteTimeout}
	for {
		nc, err := d.Dial("tcp", addr)
		if err == nil {
			p.dials.Add(1)
			p.serveSubscriber(nc, false)
		}
		select {
		case <-p.done:
			return
		case <-time.After(p.cfg.RedialInterval):
		}
	}
}

// Addr is the bound PUB socket's address (nil without Endpoint);
// ReplayAddr the ROUTER's (nil without).
func (p *Publisher) Addr() net.Addr {
	if p.ln == nil {
		return nil
	}
	return p.ln.Addr()
}
func (p *Publisher) ReplayAddr() net.Addr {
	if p.rl == nil {
		return nil
	}
	return p.rl.Addr()
}

// Stats returns the publisher's counters.
func (p *Publisher) Stats() Stats {
	p.mu.Lock()
	n, seq := len(p.subs), p.seq
	p.mu.Unlock()
	return Stats{Batches: p.batches.Load(), Events: p.events.Load(), Dropped: p.dropped.Load(), Lost: p.lost.Load(),
		Replays: p.replays.Load(), Dials: p.dials.Load(), Subscribers: n, Seq: seq}
}

// Close stops publishing and closes every connection.
func (p *Publisher) Close() error {
	select {
	case <-p.done:
		return nil
	default:
	}
	close(p.done)
	var err error
	if p.ln != nil {
		err = p.ln.Close()
	}
	if p.rl != nil {
		p.rl.Close()
	}
	p.mu.Lock()
	for s := range p.subs {
		s.close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

// maxBatchEvents bounds the store events one batch carries.
const maxBatchEvents = 1024

// run reads the log and publishes what it finds, a batch per wake-up.
func (p *Publisher) run() {
	defer p.wg.Done()
	var last uint64
	for {
		evs, gap, next := p.cfg.Log.Since(last)
		if gap && len(evs) > 0 {
			p.lost.Add(evs[0].Seq - last - 1)
		}
		if len(evs) > 0 {
			for lo := 0; lo < len(evs); lo += maxBatchEvents {
				p.publish(evs[lo:min(lo+maxBatchEvents, len(evs))])
			}
			last = evs[len(evs)-1].Seq
			continue
		}
		select {
		case <-next:
		case <-p.done:
			return
		}
	}
}

// publish encodes one batch, keeps it for replay and queues it to every
// subscriber of its topic, dropping it for those whose queue is full.
func (p *Publisher) publish(evs []cache.KVEvent) {
	events := Events(evs, p.cfg.BlockSize, p.cfg.Partial, p.cfg.ExtraKeys)
	now := p.cfg.Now()
	ts := float64(now.UnixNano()) / 1e9
	payload, err := Encode(p.cfg.Layout, ts, events, p.cfg.DPRank)
	if err != nil {
		return // the encoder writes to memory: no error to expect
	}
	p.mu.Lock()
	seq := p.seq
	p.seq++
	if len(p.replay) == p.cfg.ReplayBatches {
		p.replay = p.replay[1:]
	}
	p.replay = append(p.replay, batch{seq, payload})
	var seqb [8]byte
	binary.BigEndian.PutUint64(seqb[:], seq)
	frames := [][]byte{[]byte(p.cfg.Topic), seqb[:], payload}
	for s := range p.subs {
		if !s.subscribed(p.cfg.Topic) {
			continue
		}
		select {
		case s.ch <- frames:
		default:
			p.dropped.Add(1)
		}
	}
	p.mu.Unlock()
	p.batches.Add(1)
	p.events.Add(uint64(len(events)))
}

// accept serves each connection ln accepts (subscribers on the PUB
// endpoint, consumers on the replay one) on a goroutine of its own until ln
// is closed.
func (p *Publisher) accept(ln net.Listener, serve func(net.Conn)) {
	defer p.wg.Done()
	for {
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		go serve(nc)
	}
}

// open does the ZMTP handshake (NULL security) under the write timeout.
// server is the greeting's as-server flag: set on accepted connections,
// clear on dialled ones.
func (p *Publisher) open(nc net.Conn, typ zmq4.SocketType, server bool) (*zmq4.Conn, error) {
	nc.SetDeadline(time.Now().Add(p.cfg.WriteTimeout)) //nolint:errcheck // a TCP conn
	zc, err := zmq4.Open(nc, null.Security(), typ, zmq4.SocketIdentity(""), server, nil)
	nc.SetDeadline(time.Time{}) //nolint:errcheck
	return zc, err
}

func (p *Publisher) serveSubscriber(nc net.Conn, server bool) {
	if tc, ok := nc.(*net.TCPConn); ok && p.cfg.SendBuffer > 0 {
		tc.SetWriteBuffer(p.cfg.SendBuffer) //nolint:errcheck // the kernel's default stays
	}
	zc, err := p.open(nc, zmq4.Pub, server)
	if err != nil {
		nc.Close()
		return
	}
	s := &subscriber{nc: nc, zc: zc, ch: make(chan [][]byte, p.cfg.SubscriberBuffer), topics: map[string]bool{}, gone: make(chan struct{})}
	p.mu.Lock()
	select {
	case <-p.done:
		p.mu.Unlock()
		s.close()
		return
	default:
	}
	p.subs[s] = struct{}{}
	p.mu.Unlock()
	go s.readSubscriptions()
	defer func() {
		p.mu.Lock()
		delete(p.subs, s)
		p.dropped.Add(uint64(len(s.ch)))
		p.mu.Unlock()
		s.close()
	}()
	for {
		select {
		case f := <-s.ch:
			nc.SetWriteDeadline(time.Now().Add(p.cfg.WriteTimeout)) //nolint:errcheck
			if err := zc.SendMsg(zmq4.NewMsgFrom(f...)); err != nil {
				p.dropped.Add(1)
				return
			}
		case <-s.gone:
			return
		case <-p.done:
			return
		}
	}
}

// readSubscriptions applies the subscriber's (un)subscribe messages: a
// frame led by 1 (subscribe) or 0 (unsubscribe) and the topic prefix.
func (s *subscriber) readSubscriptions() {
	defer s.close()
	for {
		msg, err := s.zc.RecvMsg()
		if err != nil {
			return
		}
		if msg.Type != zmq4.UsrMsg || len(msg.Frames) != 1 || len(msg.Frames[0]) == 0 {
			continue
		}
		f := msg.Frames[0]
		s.mu.Lock()
		switch f[0] {
		case 1:
			s.topics[string(f[1:])] = true
		case 0:
			delete(s.topics, string(f[1:]))
		}
		s.mu.Unlock()
	}
}

func (s *subscriber) subscribed(topic string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for t := range s.topics {
		if strings.HasPrefix(topic, t) {
			return true
		}
	}
	return false
}

func (s *subscriber) close() {
	s.once.Do(func() {
		close(s.gone)
		s.nc.Close()
	})
}

// serveReplay answers replay requests: a message whose last frame is an
// 8-byte big-endian start sequence (after a REQ socket's empty delimiter,
// or a DEALER's envelope) gets every held batch from that sequence on as
// [envelope…, sequence, payload], then [envelope…, EndSeq, ""].
func (p *Publisher) serveReplay(nc net.Conn) {
	defer nc.Close()
	zc, err := p.open(nc, zmq4.Router, true)
	if err != nil {
		return
	}
	go func() { <-p.done; nc.Close() }()
	for {
		msg, err := zc.RecvMsg()
		if err != nil {
			return
		}
		if msg.Type != zmq4.UsrMsg || len(msg.Frames) == 0 || len(msg.Frames[len(msg.Frames)-1]) != 8 {
			continue
		}
		env := msg.Frames[:len(msg.Frames)-1]
		start := binary.BigEndian.Uint64(msg.Frames[len(msg.Frames)-1])
		p.mu.Lock()
		held := append([]batch(nil), p.replay...)
		p.mu.Unlock()
		send := func(a, b []byte) error {
			nc.SetWriteDeadline(time.Now().Add(p.cfg.WriteTimeout)) //nolint:errcheck
			return zc.SendMsg(zmq4.NewMsgFrom(append(append([][]byte(nil), env...), a, b)...))
		}
		for _, b := range held {
			if b.seq < start {
				continue
			}
			var seqb [8]byte
			binary.BigEndian.PutUint64(seqb[:], b.seq)
			if err := send(seqb[:], b.payload); err != nil {
				return
			}
		}
		// Counted before the end marker goes out, so that a client holding
		// the marker sees its request in Stats.
		p.replays.Add(1)
		if err := send(EndSeq, nil); err != nil {
			return
		}
	}
}
