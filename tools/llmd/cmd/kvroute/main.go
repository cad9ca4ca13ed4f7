// Command kvroute routes held-out traffic to dlmcache replicas on the
// scores of llm-d-kv-cache's own indexer, fed by the replicas' KV events,
// against round robin on fresh replicas. It starts the replicas on
// loopback (dlmcache serve --kv-events … --kv-events-extra-keys none),
// subscribes llm-d's event pool to them — llm-d dialling each replica's
// bound PUB socket (its pod discovery), or with -connect llm-d binding one
// SUB socket the replicas dial (--kv-events-connect) — and for each
// request tokenizes it with the replica's POST /tokenize, asks the indexer
// (ScoreTokens: the longest prefix of the request's blocks a pod holds)
// and sends it to the best replica (ties round robin). It prints the share
// of prompt tokens found in the chosen replica's store
// (usage.prompt_tokens_details.cached_tokens) and, per replica, how many of
// blocks llm-d's index holds for it against the replica's
// dlmcache_prefix_cache_entries.
//
//	/usr/bin/python3 tools/kvrouter/smoke.py --dump-traffic > /tmp/traffic.jsonl
//	cd tools/llmd && go run ./cmd/kvroute -bin /tmp/dlmcache -model ../../models/llada-tiny-block -traffic /tmp/traffic.jsonl
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/llm-d/llm-d-kv-cache/pkg/kvcache"
	"github.com/llm-d/llm-d-kv-cache/pkg/kvcache/kvblock"
	lkv "github.com/llm-d/llm-d-kv-cache/pkg/kvevents"
	"github.com/llm-d/llm-d-kv-cache/pkg/kvevents/engineadapter"
)

type options struct {
	bin, model, traffic, layout string
	replicas, port, maxTokens   int
	cacheBytes                  int64
	connect                     bool
	serveArgs                   []string
}

type replica struct {
	cmd               *exec.Cmd
	pod, http, events string
}

func main() {
	var o options
	flag.StringVar(&o.bin, "bin", "/tmp/dlmcache", "the dlmcache binary")
	flag.StringVar(&o.model, "model", "models/llada-tiny-block", "the model the replicas serve")
	flag.StringVar(&o.traffic, "traffic", "/tmp/traffic.jsonl", "JSON lines [system, question] (tools/kvrouter/smoke.py --dump-traffic)")
	flag.StringVar(&o.layout, "layout", "array", "--kv-events-layout")
	flag.IntVar(&o.replicas, "replicas", 2, "replicas")
	flag.IntVar(&o.port, "port", 18300, "the first replica's HTTP port (then +10 each; events on +1; with -connect llm-d binds port-1)")
	flag.IntVar(&o.maxTokens, "max-tokens", 32, "answer tokens")
	flag.Int64Var(&o.cacheBytes, "cache-bytes", 16<<20, "each replica's --cache-bytes")
	flag.BoolVar(&o.connect, "connect", false, "llm-d binds one SUB socket and the replicas dial it (--kv-events-connect)")
	verbosity := flag.Int("v", -1, "llm-d's log verbosity on stderr (its debug lines at 4); default: none")
	flag.Parse()
	o.serveArgs = flag.Args()
	if *verbosity >= 0 {
		log.SetLogger(funcr.New(func(prefix, args string) { fmt.Fprintln(os.Stderr, prefix, args) }, funcr.Options{Verbosity: *verbosity}))
	} else {
		log.SetLogger(logr.Discard())
	}
	traffic, err := readTraffic(o.traffic)
	if err != nil {
		fail(err)
	}
	for _, policy := range []string{"llm-d", "round-robin"} {
		t0 := time.Now()
		if err := run(o, policy, traffic); err != nil {
			fail(err)
		}
		fmt.Printf("  %.0f s\n", time.Since(t0).Seconds())
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "kvroute:", err)
	os.Exit(1)
}

func readTraffic(path string) ([][2]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out [][2]string
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var t [2]string
		if err := json.Unmarshal(sc.Bytes(), &t); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		out = append(out, t)
	}
	return out, sc.Err()
}

func postJSON(url string, in, out any) error {
	b, err := json.Marshal(in)
	if err != nil {
		return err
	}
	resp, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != 200 {
		return fmt.Errorf("%s: %s: %s", url, resp.Status, body)
	}
	return json.Unmarshal(body, out)
}

// metric reads one unlabelled value from a replica's /metrics.
func metric(base, name string) (float64, error) {
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(body), "\n") {
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(rest), 64)
		}
	}
	return 0, nil
}

func start(o options, k int, sink string) (*replica, int, error) {
	port := o.port + 10*k
	r := &replica{pod: fmt.Sprintf("127.0.0.1:%d", port), http: fmt.Sprintf("http://127.0.0.1:%d", port),
		events: fmt.Sprintf("tcp://127.0.0.1:%d", port+1)}
	args := []string{"serve", "--model", o.model, "--addr", r.pod, "--quiet", "--cache-bytes", strconv.FormatInt(o.cacheBytes, 10),
		"--kv-events-pod", r.pod, "--kv-events-layout", o.layout, "--kv-events-extra-keys", "none", "--max-concurrency", "1", "--max-batch", "1"}
	if sink != "" {
		args = append(args, "--kv-events-connect", sink)
	} else {
		args = append(args, "--kv-events", r.events)
	}
	logf, err := os.Create(fmt.Sprintf("/tmp/kvroute-replica-%d.log", k))
	if err != nil {
		return nil, 0, err
	}
	r.cmd = exec.Command(o.bin, append(args, o.serveArgs...)...)
	r.cmd.Stderr = logf
	if err := r.cmd.Start(); err != nil {
		return nil, 0, err
	}
	for i := 0; i < 600; i++ {
		resp, err := http.Get(r.http + "/v1/models")
		if err == nil {
			var m struct {
				Data []struct {
					ID        string `json:"id"`
					BlockSize int    `json:"block_size"`
				} `json:"data"`
			}
			err = json.NewDecoder(resp.Body).Decode(&m)
			resp.Body.Close()
			if err == nil && len(m.Data) > 0 {
				return r, m.Data[0].BlockSize, nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil, 0, fmt.Errorf("replica %d did not start: /tmp/kvroute-replica-%d.log", k, k)
}

func run(o options, policy string, traffic [][2]string) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sink := ""
	if o.connect {
		sink = fmt.Sprintf("tcp://127.0.0.1:%d", o.port-1)
	}
	var reps []*replica
	defer func() {
		for _, r := range reps {
			r.cmd.Process.Signal(os.Interrupt) //nolint:errcheck
			r.cmd.Wait()                       //nolint:errcheck
		}
	}()
	bs := 0
	for k := 0; k < o.replicas; k++ {
		r, b, err := start(o, k, sink)
		if err != nil {
			return err
		}
		reps, bs = append(reps, r), b
	}
	// llm-d's indexer: its token processor in the replicas' block size, its
	// in-memory index, its event pool with the vLLM adapter.
	tp, err := kvblock.NewChunkedTokenDatabase(&kvblock.TokenProcessorConfig{BlockSizeTokens: bs})
	if err != nil {
		return err
	}
	cfg, err := kvcache.NewDefaultConfig()
	if err != nil {
		return err
	}
	ix, err := kvcache.NewKVCacheIndexer(ctx, cfg, tp)
	if err != nil {
		return err
	}
	rec := &recorder{Index: ix.KVBlockIndex(), keys: map[kvblock.BlockHash]bool{}}
	pool := lkv.NewPool(&lkv.Config{TopicFilter: "kv@", Concurrency: 2}, rec, tp, engineadapter.NewVLLMAdapter())
	pool.Start(ctx)
	defer pool.Shutdown(context.Background())
	sm := lkv.NewSubscriberManager(pool)
	defer sm.Shutdown(context.Background())
	if o.connect {
		if err := sm.EnsureSubscriber(ctx, "sink", sink, "kv@", false); err != nil {
			return err
		}
	} else {
		for _, r := range reps {
			if err := sm.EnsureSubscriber(ctx, r.pod, r.events, "kv@", true); err != nil {
				return err
			}
		}
	}
	if err := waitSubscribers(reps); err != nil {
		return err
	}
	time.Sleep(500 * time.Millisecond) // the subscriptions follow the handshakes
	pods := make([]string, len(reps))
	for i, r := range reps {
		pods[i] = r.pod
	}
	model := "" // the topic's model: what the replicas serve as
	var prompt, cached int
	for n, t := range traffic {
		msgs := []map[string]string{{"role": "system", "content": t[0]}, {"role": "user", "content": t[1]}}
		var tok struct {
			Tokens []uint32 `json:"tokens"`
		}
		if err := postJSON(reps[0].http+"/tokenize", map[string]any{"messages": msgs}, &tok); err != nil {
			return err
		}
		if model == "" {
			if model, err = servedModel(reps[0].http); err != nil {
				return err
			}
		}
		i := n % len(reps)
		if policy == "llm-d" {
			scores, err := ix.ScoreTokens(ctx, tok.Tokens, model, pods, nil)
			if err != nil {
				return err
			}
			i = bestScored(scores, pods, n)
		}
		var resp struct {
			Usage struct {
				PromptTokens  int `json:"prompt_tokens"`
				PromptDetails struct {
					CachedTokens int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
		}
		if err := postJSON(reps[i].http+"/v1/chat/completions", map[string]any{"messages": msgs, "max_tokens": o.maxTokens, "temperature": 0}, &resp); err != nil {
			return err
		}
		prompt += resp.Usage.PromptTokens
		cached += resp.Usage.PromptDetails.CachedTokens
		// Let llm-d's pool apply the replica's events before the next
		// decision: the batches cross loopback in well under this.
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond)
	fmt.Printf("%-12s %d requests: %d of %d prompt tokens cached (%.1f%%)\n", policy, len(traffic), cached, prompt, 100*float64(cached)/float64(prompt))
	return report(ctx, reps, rec, ix.KVBlockIndex())
}

// waitSubscribers waits until every replica counts a KV-event
// subscriber (dlmcache_kv_events_subscribers), for up to 30 s each.
func waitSubscribers(reps []*replica) error {
	for _, r := range reps {
		for i := 0; ; i++ {
			n, err := metric(r.http, "dlmcache_kv_events_subscribers")
			if err == nil && n >= 1 {
				break
			}
			if i == 300 {
				return fmt.Errorf("%s: no KV-event subscriber after 30 s", r.pod)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nil
}

// servedModel is the model the server at url serves as (/v1/models).
func servedModel(url string) (string, error) {
	var m struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	resp, err := http.Get(url + "/v1/models")
	if err != nil {
		return "", err
	}
	err = json.NewDecoder(resp.Body).Decode(&m)
	resp.Body.Close()
	if err != nil || len(m.Data) == 0 {
		return "", fmt.Errorf("/v1/models: %v", err)
	}
	return m.Data[0].ID, nil
}

// bestScored is the index in pods of the best-scored pod, ties broken
// round-robin by the request number n.
func bestScored(scores map[string]float64, pods []string, n int) int {
	best := -1.0
	var ties []int
	for j, p := range pods {
		switch s := scores[p]; {
		case s > best:
			best, ties = s, []int{j}
		case s == best:
			ties = append(ties, j)
		}
	}
	return ties[n%len(ties)]
}

// report prints, per replica, the blocks llm-d's index believes it holds
// against its own /metrics count, its evictions and dropped batches.
func report(ctx context.Context, reps []*replica, rec *recorder, index kvblock.Index) error {
	for _, r := range reps {
		held, _ := metric(r.http, "dlmcache_prefix_cache_entries")
		ev, _ := metric(r.http, "dlmcache_prefix_cache_evictions_total")
		drops, _ := metric(r.http, "dlmcache_kv_events_dropped_total")
		believed := 0
		for _, k := range rec.all() {
			got, err := index.Lookup(ctx, []kvblock.BlockHash{k}, nil)
			if err != nil {
				return err
			}
			for _, e := range got[k] {
				if e.PodIdentifier == r.pod {
					believed++
					break
				}
			}
		}
		verdict := "agree"
		if float64(believed) != held {
			verdict = "DIFFER"
		}
		fmt.Printf("  %s: llm-d's index holds %d blocks, /metrics %d (%s); %d evictions, %d batches dropped\n",
			r.pod, believed, int(held), verdict, int(ev), int(drops))
	}
	return nil
}

// recorder is llm-d's index with a record of every key its event pool
// added, so the blocks it holds for a pod can be counted (the index has
// no listing of its own).
type recorder struct {
	kvblock.Index
	mu   sync.Mutex
	keys map[kvblock.BlockHash]bool
}

func (r *recorder) Add(ctx context.Context, engineKeys, requestKeys []kvblock.BlockHash, entries []kvblock.PodEntry) error {
	r.mu.Lock()
	for _, k := range requestKeys {
		r.keys[k] = true
	}
	r.mu.Unlock()
	return r.Index.Add(ctx, engineKeys, requestKeys, entries)
}

func (r *recorder) all() []kvblock.BlockHash {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]kvblock.BlockHash, 0, len(r.keys))
	for k := range r.keys {
		out = append(out, k)
	}
	return out
}
