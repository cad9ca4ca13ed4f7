package llmd

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/llm-d/llm-d-kv-cache/pkg/kvcache"
	"github.com/llm-d/llm-d-kv-cache/pkg/kvcache/kvblock"
	lkv "github.com/llm-d/llm-d-kv-cache/pkg/kvevents"
	"github.com/llm-d/llm-d-kv-cache/pkg/kvevents/engineadapter"

	"github.com/dlmcache/dlmcache/cache"
	"github.com/dlmcache/dlmcache/serve/kvevents"
)

const model = "llada-tiny-block"

// indexer is llm-d's indexer and event pool: blocks of bs tokens, its
// in-memory index, its vLLM adapter.
func indexer(t *testing.T, ctx context.Context, bs int) (*kvcache.Indexer, *lkv.SubscriberManager) {
	t.Helper()
	tp, err := kvblock.NewChunkedTokenDatabase(&kvblock.TokenProcessorConfig{BlockSizeTokens: bs})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := kvcache.NewDefaultConfig()
	if err != nil {
		t.Fatal(err)
	}
	ix, err := kvcache.NewKVCacheIndexer(ctx, cfg, tp)
	if err != nil {
		t.Fatal(err)
	}
	pool := lkv.NewPool(&lkv.Config{TopicFilter: "kv@", Concurrency: 2}, ix.KVBlockIndex(), tp, engineadapter.NewVLLMAdapter())
	pool.Start(ctx)
	sm := lkv.NewSubscriberManager(pool)
	t.Cleanup(func() { sm.Shutdown(context.Background()); pool.Shutdown(context.Background()) })
	return ix, sm
}

// freePort is a loopback port nothing listens on.
func freePort(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func waitScore(t *testing.T, what string, score func() float64, want float64) {
	t.Helper()
	var got float64
	for i := 0; i < 300; i++ {
		if got = score(); got == want {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s: llm-d's score %v, want %v", what, got, want)
}

// A dlmcache publisher fed a block store's events, llm-d's subscriber on
// its socket: llm-d's index scores the stored prefix, loses an evicted
// block's tail, and a clear. Both ways round: llm-d dialling dlmcache's
// bound PUB (its pod discovery), and dlmcache dialling llm-d's bound SUB
// (--kv-events-connect; llm-d's indexer with one zmqEndpoint), which the
// publisher dials again when llm-d's socket goes and comes back. llm-d folds
// every string in extra_keys into its block keys as a multimodal hash and
// keys a request by its tokens alone, so with the partial-depth marker, or
// a cache_salt (as vLLM writes it), nothing scores: what
// --kv-events-extra-keys none is for.
func TestLLMDIndexFromPublisher(t *testing.T) {
	const bs = 4
	toks := func(n, seed int) []int32 {
		out := make([]int32, n)
		for i := range out {
			out[i] = int32(seed*1000 + i)
		}
		return out
	}
	utoks := func(ts []int32) []uint32 {
		out := make([]uint32, len(ts))
		for i, x := range ts {
			out[i] = uint32(x)
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		connect bool
		extra   kvevents.ExtraKeys
		want    float64
	}{
		{"bind/none", false, kvevents.ExtraNone, 3},
		{"connect/none", true, kvevents.ExtraNone, 3},
		{"bind/salt", false, kvevents.ExtraSalt, 0},
		{"bind/all", false, kvevents.ExtraAll, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			ix, sm := indexer(t, ctx, bs)
			log := cache.NewEventLog(256)
			pod := "10.0.0.1:8000"
			cfg := kvevents.Config{Log: log, Topic: "kv@" + pod + "@" + model, BlockSize: bs, Partial: true, ExtraKeys: tc.extra,
				RedialInterval: 50 * time.Millisecond}
			addr := freePort(t)
			if tc.connect {
				cfg.Connect = []string{"tcp://" + addr}
				if err := sm.EnsureSubscriber(ctx, pod, "tcp://"+addr, "kv@", false); err != nil {
					t.Fatal(err)
				}
			} else {
				cfg.Endpoint = "tcp://" + addr
			}
			pub, err := kvevents.Start(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer pub.Close()
			if !tc.connect {
				if err := sm.EnsureSubscriber(ctx, pod, "tcp://"+addr, "kv@", true); err != nil {
					t.Fatal(err)
				}
			}
			for i := 0; i < 300 && pub.Stats().Subscribers == 0; i++ {
				time.Sleep(20 * time.Millisecond)
			}
			time.Sleep(200 * time.Millisecond) // the subscription follows the handshake

			prompt := toks(3*bs+2, 1)
			var parent cache.Key
			for b := 0; b < 3; b++ {
				k := cache.Key(uint64(b+1) * 0x9e3779b97f4a7c15)
				log.Add(cache.KVEvent{Type: "stored", Key: k, ParentKey: parent, HasParent: b > 0, TokenIDs: prompt[b*bs : (b+1)*bs], CacheSalt: "tenant"})
				parent = k
			}
			score := func() float64 {
				s, err := ix.ScoreTokens(ctx, utoks(prompt), model, nil, nil)
				if err != nil {
					t.Fatal(err)
				}
				return s[pod]
			}
			if tc.want == 0 {
				time.Sleep(500 * time.Millisecond)
				if got := score(); got != 0 {
					t.Fatalf("marked blocks scored %v", got)
				}
				if st := pub.Stats(); st.Batches == 0 {
					t.Fatalf("nothing published: %+v", st)
				}
				return
			}
			waitScore(t, "three stored blocks", score, tc.want)
			log.Add(cache.KVEvent{Type: "removed", Key: parent})
			waitScore(t, "the last block evicted", score, tc.want-1)
			log.Add(cache.KVEvent{Type: "cleared"})
			waitScore(t, "all blocks cleared", score, 0)
			if !tc.connect {
				return
			}
			// llm-d's socket goes and comes back (a router restart): the
			// publisher dials it again and llm-d indexes what follows.
			dials := pub.Stats().Dials
			sm.RemoveSubscriber(ctx, pod)
			for i := 0; i < 500 && pub.Stats().Subscribers > 0; i++ {
				time.Sleep(20 * time.Millisecond)
			}
			if err := sm.EnsureSubscriber(ctx, pod, "tcp://"+addr, "kv@", false); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 750 && pub.Stats().Dials == dials; i++ { // llm-d retries a busy port after 5 s
				time.Sleep(20 * time.Millisecond)
			}
			if pub.Stats().Dials == dials {
				t.Fatalf("no redial after llm-d's socket came back: %+v", pub.Stats())
			}
			time.Sleep(200 * time.Millisecond)
			log.Add(cache.KVEvent{Type: "stored", Key: 0x1234, TokenIDs: prompt[:bs]})
			waitScore(t, "a block stored after the redial", score, 1)
		})
	}
}
