package serve

import (
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/dlmcache/dlmcache/cache"
	"github.com/dlmcache/dlmcache/model/backend"
	"github.com/dlmcache/dlmcache/model/sample"
	"github.com/dlmcache/dlmcache/serve/kvevents"
)

// metrics are the server's Prometheus metrics (prometheus/client_golang),
// on a registry of the server's own with the process and Go collectors.
// Names are those of the hand-written exposition they replaced; adding a
// metric is one field and one promauto line in newMetrics.
type metrics struct {
	reg *prometheus.Registry

	requests     *prometheus.CounterVec   // endpoint, code
	latency      *prometheus.HistogramVec // endpoint
	unrouted     *prometheus.CounterVec   // code: 404 and 405
	unauthorized prometheus.Counter
	inFlight     prometheus.Gauge
	inFlightN    atomic.Int64 // inFlight, readable
	queued       prometheus.Gauge
	queuedN      atomic.Int64 // queued, readable by tests
	running      prometheus.Gauge
	rejected     *prometheus.CounterVec // reason
	cancelled    *prometheus.CounterVec // reason
	queueWait    prometheus.Histogram
	depths       *prometheus.CounterVec // depth
	methods      *prometheus.CounterVec // method
	clamped      prometheus.Counter
	prefixReqs   *prometheus.CounterVec // hit
	genTokens    prometheus.Counter
	complTokens  prometheus.Counter
	promptTok    prometheus.Counter
	genSecs      prometheus.Counter
	nfe          prometheus.Counter
	nfeHist      prometheus.Histogram
	rowsComp     prometheus.Counter
	rowsFull     prometheus.Counter
	flops        prometheus.Counter
	flopsFull    prometheus.Counter
	genLat       prometheus.Histogram
	firstBlock   prometheus.Histogram
	batchSize    prometheus.Histogram

	regimeMismatch prometheus.Counter

	// The guided decoder's (addGuide; nil without a guide).
	guide *guideMetrics

	mu     sync.Mutex
	window []tokenEvent // finished generations in the last tpsWindow
	now    func() time.Time
}

type tokenEvent struct {
	at     time.Time
	tokens int
}

// tpsWindow is the window of the tokens/s gauge.
const tpsWindow = time.Minute

// latencyBuckets are request latency bounds in seconds.
var latencyBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}

// nfeBuckets are forward evaluations per generation.
var nfeBuckets = []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024}

// newMetrics registers every metric; store reads the prefix store's
// counters at scrape time (nil: no store), method labels dlmcache_info.
func newMetrics(method string, be backend.Backend, store func() cache.Stats, now func() time.Time) *metrics {
	m := &metrics{reg: prometheus.NewRegistry(), now: now}
	f := promauto.With(m.reg)
	counter := func(name, help string) prometheus.Counter {
		return f.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	}
	gauge := func(name, help string) prometheus.Gauge {
		return f.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
	}
	// counterVec is a counter by one label; each of values is exported (at
	// 0) from the start.
	counterVec := func(name, help, label string, values ...string) *prometheus.CounterVec {
		v := f.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{label})
		for _, l := range values {
			v.WithLabelValues(l)
		}
		return v
	}
	m.requests = f.NewCounterVec(prometheus.CounterOpts{Name: "dlmcache_requests_total", Help: "HTTP requests by endpoint and status code."}, []string{"endpoint", "code"})
	m.latency = f.NewHistogramVec(prometheus.HistogramOpts{Name: "dlmcache_request_duration_seconds", Help: "HTTP request latency by endpoint, queueing included.", Buckets: latencyBuckets}, []string{"endpoint"})
	m.unrouted = counterVec("dlmcache_requests_unrouted_total", "Requests for no endpoint (404) or with a method the path does not take (405).", "code", "404", "405")
	m.unauthorized = counter("dlmcache_requests_unauthorized_total", "Requests refused for a missing or wrong API key (401).")
	m.inFlight = gauge("dlmcache_requests_in_flight", "Completion requests being handled (queued or generating).")
	m.queued = gauge("dlmcache_requests_queued", "Completion requests waiting for a generation slot.")
	m.running = gauge("dlmcache_generations_running", "Generations running.")
	m.rejected = counterVec("dlmcache_requests_rejected_total", "Requests refused by the admission bounds, by reason.", "reason", "queue_full", "queue_timeout")
	m.cancelled = counterVec("dlmcache_requests_cancelled_total", "Completion requests cancelled before their response was complete, by reason: slow_reader (a stream's unread output passed --stream-buffer-bytes), write_timeout (the client accepted no bytes for --write-timeout), client_closed, timeout (--timeout), shutdown (still running after --grace).", "reason",
		"slow_reader", "write_timeout", "client_closed", "timeout", "shutdown")
	m.queueWait = f.NewHistogram(prometheus.HistogramOpts{Name: "dlmcache_queue_wait_seconds", Help: "Time a generation waited for a slot.", Buckets: latencyBuckets})
	m.depths = counterVec("dlmcache_depth_requests_total", "Generations by the number of leading layers whose prefix K/V came from the store.", "depth")
	m.methods = counterVec("dlmcache_method_requests_total", "Generations by the method that served them (with a calibrated table, its choice for the request: NAME@DECODER).", "method")
	m.clamped = counter("dlmcache_ratio_clamped_total", "Generations whose shared-prefix ratio lay outside the table's profiled bins (depth of the nearest bin used).")
	m.prefixReqs = counterVec("dlmcache_prefix_requests_total", "Generations that used the store, by whether their prefix was already there.", "hit", "true", "false")
	m.genTokens = counter("dlmcache_generated_tokens_total", "Answer slots decoded (gen_length per generation); rate() over dlmcache_generation_seconds_total is tokens/s per generation.")
	m.complTokens = counter("dlmcache_completion_tokens_total", "Completion tokens returned (after max_tokens and stop strings).")
	m.promptTok = counter("dlmcache_prompt_tokens_total", "Prompt tokens of finished generations.")
	m.genSecs = counter("dlmcache_generation_seconds_total", "Generation wall time summed over generations.")
	m.nfe = counter("dlmcache_forward_evaluations_total", "Forward evaluations (NFE).")
	m.nfeHist = f.NewHistogram(prometheus.HistogramOpts{Name: "dlmcache_generation_nfe", Help: "Forward evaluations per generation.", Buckets: nfeBuckets})
	m.rowsComp = counter("dlmcache_rows_computed_total", "Layer-rows computed by the forwards.")
	m.rowsFull = counter("dlmcache_rows_full_total", "Layer-rows a forward computing every row would have cost.")
	m.flops = counter("dlmcache_flops_total", "Matrix-product FLOPs of the forwards, prefix-store fills included.")
	m.flopsFull = counter("dlmcache_flops_full_total", "Matrix-product FLOPs that computing every row would have cost.")
	m.genLat = f.NewHistogram(prometheus.HistogramOpts{Name: "dlmcache_generation_duration_seconds", Help: "Generation wall time (after the queue).", Buckets: latencyBuckets})

	m.firstBlock = f.NewHistogram(prometheus.HistogramOpts{Name: "dlmcache_time_to_first_block_seconds", Help: "Time from a request's admission (queueing included) to its first committed block: when a streaming client sees text.", Buckets: latencyBuckets})
	m.batchSize = f.NewHistogram(prometheus.HistogramOpts{Name: "dlmcache_batch_size", Help: "Generations sharing one batched forward (--max-batch > 1).", Buckets: []float64{1, 2, 4, 8, 16, 32, 64}})
	m.regimeMismatch = counter("dlmcache_regime_mismatch_total", "Generations in another regime (gen length, steps, block length) than the table was profiled in.")
	info := f.NewGaugeVec(prometheus.GaugeOpts{Name: "dlmcache_info", Help: "The serving configuration."}, []string{"method"})
	info.WithLabelValues(method).Set(1)
	bi := f.NewGaugeVec(prometheus.GaugeOpts{Name: "dlmcache_backend_info", Help: "The compute backend and the library its matrix products run on."}, []string{"backend", "gemm"})
	bi.WithLabelValues(backendName(be), backendGEMM(be)).Set(1)
	f.NewGaugeFunc(prometheus.GaugeOpts{Name: "dlmcache_tokens_per_second",
		Help: "Answer slots decoded by generations that finished in the last minute, per second of that minute."}, m.tokensPerSecond)

	storeMetrics(f, "dlmcache_prefix_cache_", "", store)
	m.reg.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), collectors.NewGoCollector())
	return m
}

// storeMetrics registers a prefix store's counters under prefix, their
// help led by lead (store nil: zeros).
func storeMetrics(f promauto.Factory, prefix, lead string, store func() cache.Stats) {
	if store == nil {
		store = func() cache.Stats { return cache.Stats{} }
	}
	statMetrics(f, prefix, lead, store, []statMetric[cache.Stats]{
		{"queries_tokens_total", "Shared-prefix tokens looked up in the prefix store.", false, func(s cache.Stats) float64 { return float64(s.QueryTokens) }},
		{"hits_tokens_total", "Shared-prefix tokens found in the prefix store.", false, func(s cache.Stats) float64 { return float64(s.HitTokens) }},
		{"queries_total", "Prefix store lookups.", false, func(s cache.Stats) float64 { return float64(s.Queries) }},
		{"hits_total", "Prefix store lookups that found the prefix.", false, func(s cache.Stats) float64 { return float64(s.Hits) }},
		{"evictions_total", "Prefixes evicted from the store to stay within its byte budget.", false, func(s cache.Stats) float64 { return float64(s.Evictions) }},
		{"evicted_tokens_total", "Prefix tokens evicted from the store.", false, func(s cache.Stats) float64 { return float64(s.EvictedTokens) }},
		{"uncacheable_total", "Prefixes larger than the whole budget (computed, not stored).", false, func(s cache.Stats) float64 { return float64(s.Uncacheable) }},
		{"collisions_total", "Lookups whose 64-bit key found another prefix's entry (verified and refused: computed for the request, not served).", false, func(s cache.Stats) float64 { return float64(s.Collisions) }},
		{"entries", "Prefixes held in the store.", true, func(s cache.Stats) float64 { return float64(s.Entries) }},
		{"bytes", "Bytes held by the store's prefixes.", true, func(s cache.Stats) float64 { return float64(s.Bytes) }},
		{"budget_bytes", "The store's byte budget.", true, func(s cache.Stats) float64 { return float64(s.BudgetBytes) }},
	})
}

// statMetric is a metric read from a stats snapshot: a counter, or a
// gauge.
type statMetric[S any] struct {
	name, help string
	gauge      bool
	v          func(S) float64
}

// statMetrics registers ms, each read from stats() when scraped, under
// prefix, their help led by lead.
func statMetrics[S any](f promauto.Factory, prefix, lead string, stats func() S, ms []statMetric[S]) {
	for _, m := range ms {
		read := func() float64 { return m.v(stats()) }
		if m.gauge {
			f.NewGaugeFunc(prometheus.GaugeOpts{Name: prefix + m.name, Help: lead + m.help}, read)
		} else {
			f.NewCounterFunc(prometheus.CounterOpts{Name: prefix + m.name, Help: lead + m.help}, read)
		}
	}
}

// guideMetrics count the guided decoder's work: its steps, the tokens
// each committed (acceptance length), the guide's forwards and batches.
type guideMetrics struct {
	steps, committed, accepted, kept, nfe, rows, prefixRows prometheus.Counter
	stepTokens                                              prometheus.Histogram
	batchSize                                               prometheus.Histogram
	generations                                             prometheus.Counter
}

// stepTokenBuckets are the tokens a guided step commits.
var stepTokenBuckets = []float64{1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64, 128}

// addGuide registers the guided decoder's metrics and its guide's prefix
// store's counters (store nil: no guide store, zeros).
func (m *metrics) addGuide(guide string, store func() cache.Stats) {
	f := promauto.With(m.reg)
	counter := func(name, help string) prometheus.Counter {
		return f.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	}
	g := &guideMetrics{
		generations: counter("dlmcache_guided_generations_total", "Generations decoded by the guided decoder (NAME@guided, guided:TAU)."),
		steps:       counter("dlmcache_guided_steps_total", "Guided steps (one diffusion forward each)."),
		committed:   counter("dlmcache_guided_committed_tokens_total", "Answer tokens the guided steps committed; over dlmcache_guided_steps_total, the mean acceptance length."),
		accepted:    counter("dlmcache_guided_accepted_tokens_total", "Diffusion proposals the guide accepted (committed tokens less the guide's own at each first rejection)."),
		kept:        counter("dlmcache_guided_kept_tokens_total", "Of the accepted proposals, those the guide rejected and the diffusion model was at least T confident of (guided+threshold:T)."),
		nfe:         counter("dlmcache_guide_forward_evaluations_total", "The guide's forward evaluations: its prefill and one per verified chunk (dlmcache_forward_evaluations_total counts the diffusion model's)."),
		rows:        counter("dlmcache_guide_rows_computed_total", "The guide's layer-rows computed by its forwards."),
		prefixRows:  counter("dlmcache_guide_prefix_rows_computed_total", "The guide's layer-rows its prefix store computed to fill missing blocks."),
		stepTokens:  f.NewHistogram(prometheus.HistogramOpts{Name: "dlmcache_guided_step_tokens", Help: "Tokens each guided step committed (acceptance length; at least 1: the guide's own token at the first rejection).", Buckets: stepTokenBuckets}),
		batchSize:   f.NewHistogram(prometheus.HistogramOpts{Name: "dlmcache_guide_batch_size", Help: "Generations sharing one batched guide forward (--max-batch > 1).", Buckets: []float64{1, 2, 4, 8, 16, 32, 64}}),
	}
	info := f.NewGaugeVec(prometheus.GaugeOpts{Name: "dlmcache_guide_info", Help: "The guided decoder's guide model."}, []string{"guide"})
	info.WithLabelValues(guide).Set(1)
	storeMetrics(f, "dlmcache_guide_prefix_cache_", "The guide's prefix store (exact at every layer): ", store)
	m.guide = g
}

// guided records a guided generation's guide counters.
func (m *metrics) guided(s sample.GuideStats) {
	g := m.guide
	if g == nil {
		return
	}
	g.generations.Inc()
	g.steps.Add(float64(s.Steps))
	g.committed.Add(float64(s.Committed))
	g.accepted.Add(float64(s.Accepted))
	g.kept.Add(float64(s.Kept))
	g.nfe.Add(float64(s.NFE))
	g.rows.Add(float64(s.RowsComputed))
	g.prefixRows.Add(float64(s.PrefixRows))
}

// addKVEvents registers the ZMQ KV-event publisher's counters.
func (m *metrics) addKVEvents(stats func() kvevents.Stats) {
	statMetrics(promauto.With(m.reg), "", "", stats, []statMetric[kvevents.Stats]{
		{"dlmcache_kv_events_batches_total", "KV-event batches published on the ZMQ socket (--kv-events).", false, func(s kvevents.Stats) float64 { return float64(s.Batches) }},
		{"dlmcache_kv_events_total", "KV events (BlockStored, BlockRemoved, AllBlocksCleared) in the published batches.", false, func(s kvevents.Stats) float64 { return float64(s.Events) }},
		{"dlmcache_kv_events_dropped_total", "KV-event batches dropped for a subscriber too slow to take them (its queue full, or its connection lost); a generation never waits for one.", false, func(s kvevents.Stats) float64 { return float64(s.Dropped) }},
		{"dlmcache_kv_events_lost_total", "Block-store events overwritten in the event log before the publisher read them.", false, func(s kvevents.Stats) float64 { return float64(s.Lost) }},
		{"dlmcache_kv_events_replays_total", "Replay requests answered (--kv-events-replay).", false, func(s kvevents.Stats) float64 { return float64(s.Replays) }},
		{"dlmcache_kv_events_dials_total", "Connections made to the routers of --kv-events-connect (the first and every redial).", false, func(s kvevents.Stats) float64 { return float64(s.Dials) }},
		{"dlmcache_kv_events_subscribers", "Connected KV-event subscribers.", true, func(s kvevents.Stats) float64 { return float64(s.Subscribers) }},
		{"dlmcache_kv_events_sequence", "The next KV-event batch's sequence number.", true, func(s kvevents.Stats) float64 { return float64(s.Seq) }},
	})
}

// handler serves the registry in Prometheus' text format.
func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

func (m *metrics) request(endpoint string, code int, d time.Duration) {
	m.requests.WithLabelValues(endpoint, strconv.Itoa(code)).Inc()
	m.latency.WithLabelValues(endpoint).Observe(d.Seconds())
}

func (m *metrics) reject(reason string) { m.rejected.WithLabelValues(reason).Inc() }

func (m *metrics) cancel(reason string) { m.cancelled.WithLabelValues(reason).Inc() }

func (m *metrics) setQueued(d int64) {
	m.queuedN.Add(d)
	m.queued.Add(float64(d))
}

func (m *metrics) snapshotQueued() int64 { return m.queuedN.Load() }

// generation records one finished generation.
func (m *metrics) generation(st *Stats, promptTokens, completionTokens int, now time.Time) {
	if st.PrefixTokens > 0 && st.Depth > 0 {
		m.prefixReqs.WithLabelValues(strconv.FormatBool(st.PrefixHit)).Inc()
	}
	m.depths.WithLabelValues(strconv.Itoa(st.Depth)).Inc()
	m.methods.WithLabelValues(st.Method).Inc()
	if st.Clamped {
		m.clamped.Inc()
	}
	m.genTokens.Add(float64(st.GenLength))
	m.complTokens.Add(float64(completionTokens))
	m.promptTok.Add(float64(promptTokens))
	m.genSecs.Add(st.Seconds)
	m.nfe.Add(float64(st.NFE))
	m.nfeHist.Observe(float64(st.NFE))
	m.genLat.Observe(st.Seconds)
	m.queueWait.Observe(st.QueueSeconds)
	m.mu.Lock()
	m.window = append(m.window, tokenEvent{at: now, tokens: st.GenLength})
	m.trim(now)
	m.mu.Unlock()
}

func (m *metrics) trim(now time.Time) {
	i := 0
	for i < len(m.window) && now.Sub(m.window[i].at) > tpsWindow {
		i++
	}
	m.window = append(m.window[:0], m.window[i:]...)
}

func (m *metrics) tokensPerSecond() float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.trim(m.now())
	tok := 0
	for _, e := range m.window {
		tok += e.tokens
	}
	return float64(tok) / tpsWindow.Seconds()
}

func (m *metrics) rows(computed, full int, flops, flopsFull float64) {
	m.rowsComp.Add(float64(computed))
	m.rowsFull.Add(float64(full))
	m.flops.Add(flops)
	m.flopsFull.Add(flopsFull)
}

// backendName is be's Name, "" for none.
func backendName(be backend.Backend) string {
	if be == nil {
		return ""
	}
	return be.Name()
}

// backendGEMM describes the library behind be's matrix products, where
// the backend says (the CPU backend: OpenBLAS or oneDNN).
func backendGEMM(be backend.Backend) string {
	if g, ok := be.(interface{ GEMM() string }); ok {
		return g.GEMM()
	}
	return ""
}
