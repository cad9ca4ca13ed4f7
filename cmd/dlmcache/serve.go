package main

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/dlmcache/dlmcache/cache"
	"github.com/dlmcache/dlmcache/engine"
	"github.com/dlmcache/dlmcache/internal/memlimit"
	"github.com/dlmcache/dlmcache/model/backend"
	"github.com/dlmcache/dlmcache/model/load"
	"github.com/dlmcache/dlmcache/serve"
	"github.com/dlmcache/dlmcache/serve/kvevents"
)

type serveOptions struct {
	f *factory

	modelFlags
	Addr   string
	Method string
	Cache  cacheFlags
	regimeFlags
	MaxConcurrency int
	MaxBatch       int
	Workers        int
	StoreAnswers   bool
	Modules        string
	MaxQueue       int
	MaxEventWaits  int
	KVEvents       string
	KVReplay       string
	KVPod          string
	KVLayout       string
	KVConnect      []string
	KVExtraKeys    string
	ResetPrefix    bool
	QueueWait      time.Duration
	Timeout        time.Duration
	Grace          time.Duration
	MaxBodyBytes   int64
	StreamBuffer   int
	WriteTimeout   time.Duration
	ReadTimeout    time.Duration
	ReadHeader     time.Duration
	IdleTimeout    time.Duration
	MaxTokens      int
	IdleTrim       time.Duration
	APIKeys        []string
	APIKeyFile     string
	SharedCache    bool
	MaxContext     int
	ServedName     string
	Quiet          bool
	// AllowUncalibrated serves a table no calibration checked (a cosine
	// estimate).
	AllowUncalibrated bool

	// ready, if not nil, gets the listening address (tests).
	ready func(addr string)
}

func (opts *serveOptions) run(ctx context.Context) error {
	if opts.MaxBatch < 1 {
		return fmt.Errorf("--max-batch must be at least 1, got %d", opts.MaxBatch)
	}
	if opts.MaxTokens < 1 {
		return fmt.Errorf("--max-completion-tokens must be at least 1, got %d", opts.MaxTokens)
	}
	keys, keyWarning, err := apiKeys(opts.APIKeys, opts.APIKeyFile)
	if err != nil {
		return err
	}
	cfg := opts.Cache.config(opts.f, opts.modelFlags, opts.regimeFlags)
	cfg.Method, cfg.DefaultMethod, cfg.RequireCalibrated = opts.Method, true, !opts.AllowUncalibrated
	cfg.Store.Events = true
	return withEngine(cfg, func(eng *engine.Engine) error {
		lm, gen, meth := eng.Model, eng.Gen, eng.Method
		var notes []string
		for _, n := range []string{eng.MethodNote, eng.StoreNote} {
			if n != "" {
				notes = append(notes, n)
			}
		}
		guide, guideStore, guideNote, err := eng.ServedGuide()
		if err != nil {
			return err
		}
		if opts.StoreAnswers {
			note, err := storeAnswersServed(meth)
			if err != nil {
				return err
			}
			if note != "" {
				notes, opts.StoreAnswers = append(notes, note), false
			}
		}
		var mods *serve.Modules
		if opts.Modules != "" {
			if mods, err = serve.LoadModules(opts.Modules, lm.Model, opts.Cache.Method.Modules.Depth, lm.Card.RefreshOr(opts.Cache.Method.BiCache.Refresh)); err != nil {
				return fmt.Errorf("--modules: %w", err)
			}
		}
		pub, kvNote, err := opts.kvEvents(lm, meth, eng.Events)
		if err != nil {
			return err
		}
		if pub != nil {
			defer pub.Close()
		}
		workers, workersNote, err := serveWorkers(opts.Workers, opts.MaxBatch, lm.Backend)
		if err != nil {
			return err
		}
		var logw = opts.f.ErrOut
		if opts.Quiet {
			logw = nil
		}
		var guideModel *load.Model
		if guide != nil {
			guideModel = guide.Model
		}
		srv, err := serve.New(serve.Config{
			Model: lm.Model, Guide: guideModel, GuideStore: guideStore, Name: cmp.Or(opts.ServedName, lm.ServedName()), APIKeys: keys, SharedCacheAcrossKeys: opts.SharedCache, MaxGenLength: opts.MaxTokens, IdleTrim: opts.IdleTrim, Method: meth, Gen: gen, Events: eng.Events, KVEvents: pub, ResetPrefixCache: opts.ResetPrefix, StoreAnswers: opts.StoreAnswers,
			MaxConcurrency: concurrency(opts.MaxConcurrency, opts.MaxBatch), MaxBatch: opts.MaxBatch, Workers: workers, MaxQueue: opts.MaxQueue, QueueWait: opts.QueueWait, MaxEventWaits: opts.MaxEventWaits,
			Timeout: opts.Timeout, MaxBodyBytes: opts.MaxBodyBytes, StreamBufferBytes: opts.StreamBuffer, WriteTimeout: opts.WriteTimeout,
			ReadTimeout: opts.ReadTimeout, ReadHeaderTimeout: opts.ReadHeader, IdleTimeout: opts.IdleTimeout, MaxContext: opts.MaxContext, Log: logw, Modules: mods,
		})
		if err != nil {
			return err
		}
		ln, err := net.Listen("tcp", opts.Addr)
		if err != nil {
			return fmt.Errorf("--addr %s: %w", opts.Addr, err)
		}
		fmt.Fprintf(opts.f.ErrOut, "dlmcache serve: model %s (%s, %s), method %s (%s), store %d bytes %s, gen %d/%d/%d, max concurrency %d, max batch %d, %s; listening on http://%s\n",
			lm.Name, lm.Config.ArchName(), lm.Fingerprint, eng.MethodName, eng.TableNote(), opts.Cache.CacheBytes, opts.Cache.Eviction,
			gen.GenLength, gen.Steps, gen.BlockLength, srv.MaxConcurrency(), max(1, opts.MaxBatch), workersNote, ln.Addr())
		if guideNote != "" {
			notes = append(notes, guideNote)
		}
		for _, n := range notes {
			fmt.Fprintf(opts.f.ErrOut, "dlmcache serve: %s\n", n)
		}
		if bs, ok := cache.StoreOf(meth).(*cache.BlockStore); ok {
			fmt.Fprintf(opts.f.ErrOut, "dlmcache serve: block store of %d-token blocks: a cache-aware router must hash prompts in blocks of %d (GET /v1/models' block_size)\n", bs.BlockSize(), bs.BlockSize())
		}
		if kvNote != "" {
			fmt.Fprintf(opts.f.ErrOut, "dlmcache serve: %s\n", kvNote)
		}
		for _, w := range srv.Warnings() {
			fmt.Fprintf(opts.f.ErrOut, "dlmcache serve: warning: %s\n", w)
		}
		fmt.Fprintf(opts.f.ErrOut, "dlmcache serve: %s; idle trim after %s\n", memlimit.Apply(), opts.IdleTrim)
		opts.accessLines(len(keys), keyWarning, mods)
		if opts.ready != nil {
			opts.ready(ln.Addr().String())
		}
		err = srv.Serve(ctx, ln, opts.Grace)
		fmt.Fprintln(opts.f.ErrOut, "dlmcache serve: stopped")
		return err
	})
}

// accessLines prints who may call the server (keys API keys) and the
// prompt modules it serves.
func (opts *serveOptions) accessLines(keys int, keyWarning string, mods *serve.Modules) {
	if keys > 0 {
		iso := "each key its own cache namespace"
		if opts.SharedCache {
			iso = "the prefix cache shared across keys (--shared-cache-across-keys: only cache_salt separates tenants)"
		}
		fmt.Fprintf(opts.f.ErrOut, "dlmcache serve: %d API keys: requests need \"Authorization: Bearer KEY\" (/health, /healthz and / are open); %s\n", keys, iso)
	}
	if keyWarning != "" {
		fmt.Fprintf(opts.f.ErrOut, "dlmcache serve: warning: %s\n", keyWarning)
	}
	if mods != nil {
		var names []string
		for _, m := range mods.Infos() {
			names = append(names, fmt.Sprintf("%s (%d tokens at %d)", m.Name, m.Tokens, m.Start))
		}
		fmt.Fprintf(opts.f.ErrOut, "dlmcache serve: prompt modules at depth %d: %s\n", opts.Cache.Method.Modules.Depth, strings.Join(names, ", "))
	}
}

func (opts *serveOptions) flags(fl *pflag.FlagSet) {
	opts.modelFlags.add(fl)
	fl.StringVar(&opts.Addr, "addr", "127.0.0.1:8080", "listen address (host:port; port 0 picks a free one)")
	fl.StringVar(&opts.ServedName, "served-model-name", "", "the model name the API reports (GET /v1/models, responses' model); default: the model's name")
	fl.StringVar(&opts.Method, "method", "", "caching method: "+strings.Join(cache.Names(), ", ")+"; default: exact-block on a block-causal model, else bicache with --lut, else none")
	addCacheFlags(fl, &opts.Cache)
	addGuideFlag(fl, &opts.Cache.Guide)
	opts.regimeFlags.add(fl)
	fl.BoolVar(&opts.StoreAnswers, "store-answers", false, "with a block store (--store-blocks N, or exact-block's own): keep each answered conversation's blocks as the next turn renders them, so it reuses every earlier turn (a fill forward per request over what is not stored yet: exact-block keeps an answer's committed blocks without this flag, so the fill is the answer's last block and the turn's end); a method with no prefix store stores nothing (said at start)")
	fl.StringVar(&opts.Modules, "modules", "", "prompt-module schema (JSON: {\"modules\": [{\"name\", \"text\", \"start\"}]}): chat requests import modules by name (\"modules\": [...]) to open their system message with them, each module's K/V computed once at its reserved positions and reused")
	cache.AddFlags(fl, &opts.Cache.Method, "module-depth") // the module method's, serve's alone
	fl.IntVar(&opts.MaxBatch, "max-batch", defaultMaxBatch, "generations whose step forwards run as one batched forward (continuous batching; 16 gave 1.4–1.7× the requests/s of two unbatched generations at 16 clients on an idle 2-core CPU: docs/serving.md); 1: each runs its own forwards, which does better on a CPU shared with other work")
	fl.IntVar(&opts.Workers, "workers", 0, "batches run side by side, the generations spread over them, each on its share of the threads while others have work and on all of them alone (0: 2 where --max-batch is above 1 and --threads at least 2, else 1; 2 gave the exact block cache 1.1–1.2× the tokens/s of 1 at 16 clients on an idle 2-core CPU: docs/serving.md)")
	fl.IntVar(&opts.MaxConcurrency, "max-concurrency", 0, "generations run at once, over all workers (0: --max-batch when above 1, else 2, which gave 33–59% more tokens/s than 1 on a 2-core CPU: see docs/serving.md)")
	fl.IntVar(&opts.MaxQueue, "max-queue", 1024, "requests that may wait for a generation slot beyond those running; more get 429 (0: 4×max-concurrency)")
	fl.IntVar(&opts.MaxEventWaits, "max-event-waits", serve.DefaultMaxEventWaits, "GET /v1/kv_events long-polls (?wait=) open at once; more get 429 (a shutdown answers the open ones at once)")
	fl.StringVar(&opts.KVEvents, "kv-events", "", "publish the block store's KV events in vLLM's format on a ZMQ PUB socket at this address (tcp://*:5557; bound, every interface for *) for cache-aware routers (llm-d's precise prefix-cache scorer, Dynamo's KV router); needs a block store (--store-blocks N); default: off")
	fl.StringVar(&opts.KVReplay, "kv-events-replay", "", "with --kv-events: a ZMQ ROUTER socket (tcp://*:5558) answering a consumer's 8-byte start sequence with every batch still held from it (the last 10,000), then sequence −1")
	fl.StringVar(&opts.KVPod, "kv-events-pod", "", "with --kv-events: the pod address in the events' topic kv@POD@MODEL (llm-d matches it to the pod's IP:port); default: the host name")
	fl.StringSliceVar(&opts.KVConnect, "kv-events-connect", nil, "publish the KV events by dialling a router's bound SUB socket at this address (tcp://HOST:5557; repeat or comma-separate for several), as vLLM's PUB connects to an address without a wildcard: llm-d's indexer given a zmqEndpoint binds one socket for every engine; redialled every second while it is down; with or without --kv-events")
	fl.StringVar(&opts.KVExtraKeys, "kv-events-extra-keys", "all", "with --kv-events: what BlockStored's extra_keys carry: all (a first block's cache_salt, and on a bidirectional model the marker \""+kvevents.PartialDepthKey+"\" in every block's), salt (the cache_salt only, as vLLM), none (no extra keys: llm-d folds every string in them into its block keys as a multimodal hash, so its scorer, keying requests by tokens alone, matches no block that carries one: set none for llm-d; Dynamo reads a first block's first string as its cache namespace: set salt for Dynamo)")
	fl.StringVar(&opts.KVLayout, "kv-events-layout", "array", "with --kv-events: array (each event a positional array led by its type name, as vLLM wrote until mid-2026; every llm-d release and Dynamo's relay read it) or map (each event a map tagged by \"type\" in the same positional batch, as newer vLLM writes; llm-d reads it from v0.9.0)")
	fl.BoolVar(&opts.ResetPrefix, "reset-prefix-cache", false, "serve POST /reset_prefix_cache (vLLM's), which removes every block of the block store (one AllBlocksCleared event): any client with a key may then empty every tenant's cache")
	fl.DurationVar(&opts.QueueWait, "queue-wait", 0, "longest wait for a generation slot before a 503 (0: --timeout)")
	fl.DurationVar(&opts.Timeout, "timeout", 5*time.Minute, "per-request time limit, queueing included (504 past it)")
	fl.DurationVar(&opts.Grace, "grace", 30*time.Second, "on SIGINT/SIGTERM, how long requests in flight may take to finish")
	fl.Int64Var(&opts.MaxBodyBytes, "max-body-bytes", 1<<20, "largest request body (413 past it)")
	fl.IntVar(&opts.StreamBuffer, "stream-buffer-bytes", 1<<20, "a streamed response's output that may wait for its client; past it the request is cancelled (slow_reader), so a client that stops reading never holds up the others")
	fl.DurationVar(&opts.WriteTimeout, "write-timeout", 30*time.Second, "longest a write to a client may make no progress; past it the response is cut and the request cancelled (write_timeout)")
	fl.DurationVar(&opts.ReadTimeout, "read-timeout", 30*time.Second, "longest time to read a request, header and body")
	fl.DurationVar(&opts.ReadHeader, "read-header-timeout", 10*time.Second, "longest time to read a request's header")
	fl.DurationVar(&opts.IdleTimeout, "idle-timeout", 2*time.Minute, "longest a keep-alive connection may wait for its next request")
	fl.IntVar(&opts.MaxContext, "max-context", 0, "largest prompt + gen length in tokens (0: the model's max_sequence_length)")
	fl.DurationVar(&opts.IdleTrim, "idle-trim", 2*time.Second, "after this long with no request in flight, return the memory the last burst left (pooled buffers, freed heap) to the kernel; negative: never")
	fl.IntVar(&opts.MaxTokens, "max-completion-tokens", serve.DefaultMaxGenLength, "most completion tokens (max_tokens, gen_length) one request may ask for; more get 400")
	fl.StringArrayVar(&opts.APIKeys, "api-key", nil, "API key requests must send as \"Authorization: Bearer KEY\" (repeatable; /health, /healthz and the playground page stay open); a key on the command line shows in the process list: prefer --api-key-file")
	fl.StringVar(&opts.APIKeyFile, "api-key-file", "", "file of API keys, one a line (blank lines and lines starting with # skipped); with --api-key, all are accepted; a file others can read gets a warning")
	fl.BoolVar(&opts.SharedCache, "shared-cache-across-keys", false, "with API keys, let every key reuse every other key's cached prefixes (only cache_salt then separates tenants); default: each key is its own cache namespace, so no key can learn another's prompts from prefix_hit")
	fl.BoolVar(&opts.Quiet, "quiet", false, "no per-request log lines")
	fl.BoolVar(&opts.AllowUncalibrated, "allow-uncalibrated", false, "serve a --lut table no calibration checked against the model's answers (profile's cosine estimates lost 10 points on held-out requests: docs/results.md)")
}

// kvEvents starts the ZMQ KV-event publisher when --kv-events is set,
// and says what it publishes.
func (opts *serveOptions) kvEvents(lm *engine.Model, meth cache.Method, events *cache.EventLog) (*kvevents.Publisher, string, error) {
	if opts.KVEvents == "" && len(opts.KVConnect) == 0 {
		if opts.KVReplay != "" {
			return nil, "", fmt.Errorf("--kv-events-replay replays the --kv-events stream: set --kv-events or --kv-events-connect too")
		}
		return nil, "", nil
	}
	bs, ok := cache.StoreOf(meth).(*cache.BlockStore)
	if !ok || events == nil {
		return nil, "", fmt.Errorf("--kv-events publishes a block store's blocks, but method %s keeps whole prefixes or none: add --store-blocks N (a block store of N-token blocks)", meth.Name())
	}
	layout, err := kvevents.ParseLayout(opts.KVLayout)
	if err != nil {
		return nil, "", fmt.Errorf("--kv-events-layout: %w", err)
	}
	extra, err := kvevents.ParseExtraKeys(opts.KVExtraKeys)
	if err != nil {
		return nil, "", fmt.Errorf("--kv-events-extra-keys: %w", err)
	}
	pod := opts.KVPod
	if pod == "" {
		if pod, err = os.Hostname(); err != nil {
			return nil, "", fmt.Errorf("--kv-events-pod: no host name (%v): set it", err)
		}
	}
	name := cmp.Or(opts.ServedName, lm.ServedName())
	partial := !lm.Config.Causal && lm.Config.CausalBlock() == 0
	pub, err := kvevents.Start(kvevents.Config{Log: events, Endpoint: opts.KVEvents, Connect: opts.KVConnect, ReplayEndpoint: opts.KVReplay,
		Topic: "kv@" + pod + "@" + name, Layout: layout, BlockSize: bs.BlockSize(), Partial: partial, ExtraKeys: extra})
	if err != nil {
		return nil, "", fmt.Errorf("--kv-events: %w", err)
	}
	kind := "exact blocks (a causal or block-causal model)"
	switch {
	case partial && extra == kvevents.ExtraAll:
		kind = fmt.Sprintf("blocks of a bidirectional model, marked %q in their extra keys", kvevents.PartialDepthKey)
	case partial:
		kind = fmt.Sprintf("blocks of a bidirectional model, unmarked (--kv-events-extra-keys %s)", extra)
	}
	replay := "no replay socket"
	if pub.ReplayAddr() != nil {
		replay = "replay on tcp://" + pub.ReplayAddr().String()
	}
	var where []string
	if pub.Addr() != nil {
		where = append(where, "on tcp://"+pub.Addr().String())
	}
	if len(opts.KVConnect) > 0 {
		where = append(where, "dialling "+strings.Join(opts.KVConnect, ", "))
	}
	return pub, fmt.Sprintf("KV events (vLLM's %s layout, extra keys %s) %s, topic %q, %s; %s", layout, extra, strings.Join(where, " and "), "kv@"+pod+"@"+name, kind, replay), nil
}

// serveWorkers is --workers after its default, and the start-up line's
// words for it: 2 where batches run (--max-batch above 1) and the
// backend divides at least two threads among them, else 1; more than one
// asked of a backend that cannot divide its threads is an error.
func serveWorkers(flag, batch int, be backend.Backend) (int, string, error) {
	th, ok := be.(backend.Threaded)
	switch {
	case flag < 0:
		return 0, "", fmt.Errorf("--workers must be at least 0 (0: the default), got %d", flag)
	case batch <= 1 && flag > 1:
		return 0, "", fmt.Errorf("--workers %d needs batched forwards (--max-batch above 1)", flag)
	case flag > 1 && !ok:
		return 0, "", fmt.Errorf("--workers %d: the %s backend cannot divide its threads among workers: use 1", flag, be.Name())
	case batch <= 1:
		return 1, "no batches (--max-batch 1)", nil
	}
	n := flag
	if n == 0 {
		n = 1
		if ok && th.Threads() >= 2 {
			n = 2
		}
	}
	if n == 1 {
		return 1, "1 worker", nil
	}
	return n, fmt.Sprintf("%d workers (%d threads for a worker alone, %d each when all have work)", n, th.Threads(), serve.ShareThreads(th.Threads(), n)), nil
}

// defaultMaxBatch is --max-batch's default: the 16-client batch measured
// in docs/serving.md ("Batched forwards").
const defaultMaxBatch = 16

// concurrency is --max-concurrency after its default: --max-batch when
// batching (shared by the workers: each generation holds its K/V for its
// whole run, so the default bounds the memory as one batch did), else 2.
func concurrency(flag, batch int) int {
	switch {
	case flag > 0:
		return flag
	case batch > 1:
		return batch
	}
	return 2
}

// apiKeys gathers --api-key and the keys of --api-key-file.
func apiKeys(flags []string, file string) (keys []string, warning string, err error) {
	keys = slices.Clone(flags)
	for i, k := range keys {
		if strings.TrimSpace(k) == "" || strings.TrimSpace(k) != k {
			return nil, "", fmt.Errorf("--api-key %d is empty or has surrounding spaces", i+1)
		}
	}
	if file == "" {
		return keys, "", nil
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		return nil, "", fmt.Errorf("--api-key-file: %w", err)
	}
	if st, err := os.Stat(file); err == nil && st.Mode().Perm()&0o077 != 0 {
		warning = fmt.Sprintf("--api-key-file %s is readable by others (mode %04o): chmod 600 it", file, st.Mode().Perm())
	}
	n := 0
	for _, line := range strings.Split(string(raw), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		keys = append(keys, line)
		n++
	}
	if n == 0 {
		return nil, "", fmt.Errorf("--api-key-file %s holds no keys (one a line)", file)
	}
	return keys, warning, nil
}

// storeAnswersServed checks --store-answers against the method served:
// answered conversations are kept in a block store; a method that keeps
// whole prefixes needs --store-blocks, and one that keeps no prefix store
// (none, the approximate caches of one request) has nothing to keep them
// in, which the note says (the server then stores nothing, as bench does
// for such a method).
func storeAnswersServed(meth cache.Method) (note string, err error) {
	blocks, whole := storesOf([]cache.Method{meth})
	switch {
	case len(whole) > 0:
		return "", fmt.Errorf("--store-answers keeps answered conversations in a block store, but method %s keeps whole prefixes: add --store-blocks N (a block store of N-token blocks)", meth.Name())
	case len(blocks) == 0:
		return fmt.Sprintf("--store-answers: method %s keeps no prefix store, so no answered conversation is stored", meth.Name()), nil
	}
	return "", nil
}

func newCmdServe(f *factory, runF func(*serveOptions) error) *cobra.Command {
	return newCommand(&serveOptions{f: f}, runF, &cobra.Command{
		Use:   "serve",
		Short: "Serve an OpenAI-compatible HTTP API with shared-prefix caching",
		Long: `Serve answers POST /v1/chat/completions and POST /v1/completions in
OpenAI's shapes, with GET /metrics (Prometheus text) and GET /healthz.

A chat's leading system messages are the shared prefix: requests with the
same one (and the same cache_salt) share its stored K/V. max_tokens sets the
gen length (rounded up to whole blocks) and caps the returned tokens
(finish_reason "length" when it cuts); stop strings cut the answer;
gen_length, steps, block_length and cache_salt are accepted as extra fields;
stream=true streams server-sent events (a chunk per committed block;
stream_options.include_usage; dlmcache_stream_canvas adds the canvas after
every step); with --modules, "modules": ["name", …] imports prompt modules
(GET /v1/modules lists them) that open the system message; tools, tool_choice, response_format and logprobs are refused
with a 400 naming the field. GET /health answers as /healthz does.

With no --method, a block-causal model (config.json "block_causal") is
served with exact-block and a block store of the model's block size unless
--store-blocks says otherwise: committed blocks' K/V are computed once and
every full block of a shared prefix or an earlier turn is reused at every
layer, with the answers of computing every row.

With --lut and no --method, a calibrated table (table.json from dlmcache
calibrate) serves each request with the method, knobs and decoder it chose
for the request's ratio bin and answer-length class (the table method; the
response's dlmcache.method and /metrics' dlmcache_method_requests_total say
which); a v2 table serves bicache at its calibrated depths. A table no
calibration checked (profile's table-cosine*.json) is refused unless
--allow-uncalibrated; a table made for another model is refused at start.

A streamed response goes through a bounded buffer of its own with a write
deadline: a client that stops reading is cut (--stream-buffer-bytes,
--write-timeout) and never holds up the generations batched with it.

SIGINT or SIGTERM stop accepting, let the requests in flight finish for up
to --grace, answer those still running with 503, and exit.

Methods:` + methodsHelp(),
		Example: `  dlmcache serve --model model/testdata/tiny-bf16
  dlmcache serve --lut out/table.json --addr 127.0.0.1:8080 --cache-bytes 2147483648
  curl -s localhost:8080/v1/chat/completions -d '{"messages":[{"role":"system","content":"Be terse."},{"role":"user","content":"Hi"}]}'`,
		Args: cobra.NoArgs,
	})
}
