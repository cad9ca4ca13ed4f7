// Package model loads Hugging Face LLaDA checkpoints (config.json,
// safetensors, tokenizer.json, the chat template) and runs the masked
// diffusion forward on a backend; the sampler and its decoders are package
// model/sample.
//
// The forward (forward.go: ForwardBatch, of which Forward is a batch of one) is steered per layer from outside through a Plan:
// which rows are computed this step, and where the keys, values and input
// hidden states of every other row come from. Every caching method is a Plan;
// none of them forks the forward.
package model
