package sample

import "github.com/dlmcache/dlmcache/model"

// sampler runs the decoders over one network: its methods are the
// sampler's steps, the network's fields and forward are reached through it.
// One generation's; logits and uncond are the storage its steps' forwards
// write their logits into (model.Input.LogitsTo), the conditional and the
// unconditional (CFG) run's, reused step after step.
type sampler struct {
	*model.Network
	logits, uncond []float32
}
