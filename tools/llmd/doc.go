// Package llmd holds what checks dlmcache's KV events against a router
// that is not dlmcache's: llm-d-kv-cache (llm-d's precise prefix-cache
// indexer, Go) as a module dependency, kept in a module of its own so the
// main module does not carry llm-d's Kubernetes and telemetry
// dependencies. Its tests decode dlmcache's published messages with
// llm-d's own vLLM adapter and build llm-d's index from a live publisher;
// cmd/kvroute routes traffic to dlmcache replicas on llm-d's scores.
//
//	cd tools/llmd && go test ./...
package llmd
