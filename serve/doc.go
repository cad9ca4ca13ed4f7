// Package serve is dlmcache's serving runtime: an OpenAI-compatible HTTP API,
// a bounded request queue, and Prometheus metrics, on top of a model, a
// lookup table and a prefix store.
//
// A Server (New, then use it as an http.Handler or call Serve) answers
//
//	POST /v1/chat/completions  OpenAI chat completions (stream=false)
//	POST /v1/completions       OpenAI text completions; extra field "system"
//	GET  /v1/models            the one model served
//	GET  /metrics              Prometheus text format
//	GET  /healthz              200, or 503 while shutting down
//
// The leading system (and developer) messages of a chat are its shared
// prefix; later turns are templated after it (see encodeConversation).
// Extra request fields: gen_length, steps, block_length (the diffusion
// schedule; max_tokens sets the gen length rounded up to whole blocks) and
// cache_salt (tenant isolation of the prefix store). Every response carries
// OpenAI's fields plus a "dlmcache" object (Stats): depth, ratio, clamp,
// prefix hit, NFE, fraction of layer-rows computed, seconds.
//
// Each request runs on its own goroutine with its own planner from the
// configured cache.Method; all share the method's store. At most
// MaxConcurrency generations run at once; MaxQueue more may wait (429
// beyond, 503 after QueueWait); every request has a Timeout (504) and a
// body limit (413). Errors use OpenAI's {"error": {message, type, param,
// code}} shape. docs/serving.md has the measurements behind the defaults.
package serve
