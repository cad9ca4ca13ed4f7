// Package model is the network: its configuration (config.go), the
// architectures that read a config.json and build into it (arch_*.go), the
// Network type and its batched masked-diffusion forward on a backend
// (network.go, forward.go, fuse.go, arena.go), the Plan that steers it,
// its FLOP counts and an attention probe. Loading checkpoints into it (name
// resolution, safetensors and GGUF, conversion, random checkpoints) is
// package model/load; the sampler and its decoders are model/sample, the
// tokenizer model/tokenizer.
//
// The forward (forward.go: ForwardBatch, of which Forward is a batch of one) is steered per layer from outside through a Plan:
// which rows are computed this step, and where the keys, values and input
// hidden states of every other row come from. Every caching method is a Plan;
// none of them forks the forward.
package model
