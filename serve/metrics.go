package serve

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/dlmcache/dlmcache/cache"
)

// Metrics are the server's counters, written in Prometheus' text exposition
// format (version 0.0.4) by hand: a few counters, gauges and histograms
// need no client library.
type metrics struct {
	mu sync.Mutex

	requests  map[[2]string]int64 // (endpoint, code) → count
	latency   map[string]*histogram
	inFlight  int64 // requests being handled (queued or generating)
	queued    int64 // waiting for a generation slot
	running   int64 // generating
	rejected  map[string]int64
	depths    map[int]int64 // served depth → requests
	clamped   int64
	prefixHit int64 // requests whose prefix was in the store
	prefixMis int64 // requests that computed their prefix
	genTokens int64 // answer slots decoded (gen_length per request)
	complTok  int64 // completion tokens returned (up to the first stop token)
	promptTok int64
	genSecs   float64 // generation wall time, summed over requests
	nfe       int64
	rowsComp  int64
	rowsFull  int64
	flops     float64 // matrix-product FLOPs, prefix-store fills included
	flopsFull float64 // what computing every row would have cost
	genLat    *histogram
	window    []tokenEvent // finished generations in the last tpsWindow
}

type tokenEvent struct {
	at     time.Time
	tokens int
}

// tpsWindow is the window of the tokens/s gauge.
const tpsWindow = time.Minute

func newMetrics() *metrics {
	return &metrics{
		requests: map[[2]string]int64{},
		latency:  map[string]*histogram{},
		rejected: map[string]int64{},
		depths:   map[int]int64{},
		genLat:   newHistogram(latencyBuckets),
	}
}

// latencyBuckets are request latency bounds in seconds.
var latencyBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}

type histogram struct {
	bounds []float64
	counts []int64 // per bucket (not cumulative); last is +Inf
	sum    float64
	n      int64
}

func newHistogram(b []float64) *histogram {
	return &histogram{bounds: b, counts: make([]int64, len(b)+1)}
}

func (h *histogram) observe(v float64) {
	i := sort.SearchFloat64s(h.bounds, v) // first bound ≥ v
	h.counts[i]++
	h.sum += v
	h.n++
}

func (h *histogram) write(w io.Writer, name, labels string) {
	var cum int64
	sep := ""
	if labels != "" {
		sep = ","
	}
	for i, b := range h.bounds {
		cum += h.counts[i]
		fmt.Fprintf(w, "%s_bucket{%s%sle=\"%s\"} %d\n", name, labels, sep, fmtFloat(b), cum)
	}
	cum += h.counts[len(h.bounds)]
	fmt.Fprintf(w, "%s_bucket{%s%sle=\"+Inf\"} %d\n", name, labels, sep, cum)
	if labels != "" {
		labels = "{" + labels + "}"
	}
	fmt.Fprintf(w, "%s_sum%s %s\n%s_count%s %d\n", name, labels, fmtFloat(h.sum), name, labels, h.n)
}

func fmtFloat(v float64) string {
	if math.IsInf(v, 1) {
		return "+Inf"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

func (m *metrics) request(endpoint string, code int, d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.requests[[2]string{endpoint, strconv.Itoa(code)}]++
	h := m.latency[endpoint]
	if h == nil {
		h = newHistogram(latencyBuckets)
		m.latency[endpoint] = h
	}
	h.observe(d.Seconds())
}

func (m *metrics) add(p *int64, d int64) {
	m.mu.Lock()
	*p += d
	m.mu.Unlock()
}

func (m *metrics) reject(reason string) {
	m.mu.Lock()
	m.rejected[reason]++
	m.mu.Unlock()
}

// generation records one finished generation.
func (m *metrics) generation(st *Stats, promptTokens, completionTokens int, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if st.PrefixTokens > 0 && st.Depth > 0 {
		if st.PrefixHit {
			m.prefixHit++
		} else {
			m.prefixMis++
		}
	}
	m.depths[st.Depth]++
	if st.Clamped {
		m.clamped++
	}
	m.genTokens += int64(st.GenLength)
	m.complTok += int64(completionTokens)
	m.promptTok += int64(promptTokens)
	m.genSecs += st.Seconds
	m.nfe += int64(st.NFE)
	m.genLat.observe(st.Seconds)
	m.window = append(m.window, tokenEvent{at: now, tokens: st.GenLength})
	m.trim(now)
}

func (m *metrics) trim(now time.Time) {
	i := 0
	for i < len(m.window) && now.Sub(m.window[i].at) > tpsWindow {
		i++
	}
	m.window = append(m.window[:0], m.window[i:]...)
}

func (m *metrics) rows(computed, full int, flops, flopsFull float64) {
	m.mu.Lock()
	m.rowsComp += int64(computed)
	m.rowsFull += int64(full)
	m.flops += flops
	m.flopsFull += flopsFull
	m.mu.Unlock()
}

// write prints every metric, the store's counters included.
func (m *metrics) write(w io.Writer, st cache.Stats, method string, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.trim(now)
	metric := func(name, typ, help string) {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
	}
	one := func(name, typ, help string, v any) {
		metric(name, typ, help)
		fmt.Fprintf(w, "%s %v\n", name, v)
	}

	one("dlmcache_prefix_cache_queries_tokens_total", "counter", "Shared-prefix tokens looked up in the prefix store.", st.QueryTokens)
	one("dlmcache_prefix_cache_hits_tokens_total", "counter", "Shared-prefix tokens found in the prefix store.", st.HitTokens)
	one("dlmcache_prefix_cache_queries_total", "counter", "Prefix store lookups.", st.Queries)
	one("dlmcache_prefix_cache_hits_total", "counter", "Prefix store lookups that found the prefix.", st.Hits)
	one("dlmcache_prefix_cache_evictions_total", "counter", "Prefixes evicted from the store to stay within its byte budget.", st.Evictions)
	one("dlmcache_prefix_cache_evicted_tokens_total", "counter", "Prefix tokens evicted from the store.", st.EvictedTokens)
	one("dlmcache_prefix_cache_uncacheable_total", "counter", "Prefixes larger than the whole budget (computed, not stored).", st.Uncacheable)
	one("dlmcache_prefix_cache_entries", "gauge", "Prefixes held in the store.", st.Entries)
	one("dlmcache_prefix_cache_bytes", "gauge", "Bytes held by the store's prefixes.", st.Bytes)
	one("dlmcache_prefix_cache_budget_bytes", "gauge", "The store's byte budget.", st.BudgetBytes)

	metric("dlmcache_info", "gauge", "The serving configuration.")
	fmt.Fprintf(w, "dlmcache_info{method=%q} 1\n", method)

	metric("dlmcache_depth_requests_total", "counter", "Generations by the number of leading layers whose prefix K/V came from the store.")
	ds := make([]int, 0, len(m.depths))
	for d := range m.depths {
		ds = append(ds, d)
	}
	sort.Ints(ds)
	for _, d := range ds {
		fmt.Fprintf(w, "dlmcache_depth_requests_total{depth=\"%d\"} %d\n", d, m.depths[d])
	}
	one("dlmcache_ratio_clamped_total", "counter", "Generations whose shared-prefix ratio lay outside the table's profiled bins (depth of the nearest bin used).", m.clamped)
	metric("dlmcache_prefix_requests_total", "counter", "Generations that used the store, by whether their prefix was already there.")
	fmt.Fprintf(w, "dlmcache_prefix_requests_total{hit=\"true\"} %d\ndlmcache_prefix_requests_total{hit=\"false\"} %d\n", m.prefixHit, m.prefixMis)

	one("dlmcache_generated_tokens_total", "counter", "Answer slots decoded (gen_length per generation); rate() over dlmcache_generation_seconds_total is tokens/s per generation.", m.genTokens)
	one("dlmcache_completion_tokens_total", "counter", "Completion tokens returned (up to the first end-of-text).", m.complTok)
	one("dlmcache_prompt_tokens_total", "counter", "Prompt tokens of finished generations.", m.promptTok)
	one("dlmcache_generation_seconds_total", "counter", "Generation wall time summed over generations.", fmtFloat(m.genSecs))
	var tok int
	for _, e := range m.window {
		tok += e.tokens
	}
	one("dlmcache_tokens_per_second", "gauge", "Answer slots decoded by generations that finished in the last minute, per second of that minute.", fmtFloat(float64(tok)/tpsWindow.Seconds()))
	one("dlmcache_forward_evaluations_total", "counter", "Forward evaluations (NFE).", m.nfe)
	one("dlmcache_rows_computed_total", "counter", "Layer-rows computed by the forwards.", m.rowsComp)
	one("dlmcache_rows_full_total", "counter", "Layer-rows a forward computing every row would have cost.", m.rowsFull)
	one("dlmcache_flops_total", "counter", "Matrix-product FLOPs of the forwards, prefix-store fills included.", fmtFloat(m.flops))
	one("dlmcache_flops_full_total", "counter", "Matrix-product FLOPs that computing every row would have cost.", fmtFloat(m.flopsFull))
	metric("dlmcache_generation_duration_seconds", "histogram", "Generation wall time (after the queue).")
	m.genLat.write(w, "dlmcache_generation_duration_seconds", "")

	metric("dlmcache_requests_total", "counter", "HTTP requests by endpoint and status code.")
	keys := make([][2]string, 0, len(m.requests))
	for k := range m.requests {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return keys[i][0] < keys[j][0] || keys[i][0] == keys[j][0] && keys[i][1] < keys[j][1]
	})
	for _, k := range keys {
		fmt.Fprintf(w, "dlmcache_requests_total{endpoint=%q,code=%q} %d\n", k[0], k[1], m.requests[k])
	}
	metric("dlmcache_request_duration_seconds", "histogram", "HTTP request latency by endpoint, queueing included.")
	eps := make([]string, 0, len(m.latency))
	for e := range m.latency {
		eps = append(eps, e)
	}
	sort.Strings(eps)
	for _, e := range eps {
		m.latency[e].write(w, "dlmcache_request_duration_seconds", "endpoint="+strconv.Quote(e))
	}
	metric("dlmcache_requests_rejected_total", "counter", "Requests refused by the admission bounds, by reason.")
	rs := make([]string, 0, len(m.rejected))
	for r := range m.rejected {
		rs = append(rs, r)
	}
	sort.Strings(rs)
	if len(rs) == 0 {
		fmt.Fprintf(w, "dlmcache_requests_rejected_total{reason=\"queue_full\"} 0\n")
	}
	for _, r := range rs {
		fmt.Fprintf(w, "dlmcache_requests_rejected_total{reason=%q} %d\n", r, m.rejected[r])
	}
	one("dlmcache_requests_in_flight", "gauge", "Completion requests being handled (queued or generating).", m.inFlight)
	one("dlmcache_requests_queued", "gauge", "Completion requests waiting for a generation slot.", m.queued)
	one("dlmcache_generations_running", "gauge", "Generations running.", m.running)
}

func (m *metrics) snapshotQueued() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.queued
}
