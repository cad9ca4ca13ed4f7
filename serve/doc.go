// Package serve is dlmcache's serving runtime: an OpenAI-compatible HTTP API,
// a bounded request queue, and Prometheus metrics, on top of a model, a
// lookup table and a prefix store.
package serve
