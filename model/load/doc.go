// Package load turns checkpoints into networks: it finds a model by name
// or path (Resolve: a directory, a $DLMCACHE_MODELS entry, the Hugging
// Face hub cache, a GGUF file), reads a Hugging Face directory
// (config.json, model.safetensors or shards, tokenizer.json, the
// dlmcache.json card of generation defaults) or a GGUF file onto a
// backend (Load, LoadGGUF), and returns a Model: the model.Network every
// architecture builds into, its tokenizer, its identity and its Card.
//
// It also writes checkpoints: ToGGUF and FromGGUF convert between the two
// formats (with llama.cpp's tensor names, metadata keys and q/k row
// permutation for LLaDA: gguf_llada.go), and WriteRandom writes a
// random-weights checkpoint of any shape for benchmarks and backend checks.
//
// The formats themselves are read by model/safetensors and model/gguf; the
// network, its architectures and its forward are package model, which this
// package builds through model.Build (and model.BuildLLaDA for GGUF).
package load
