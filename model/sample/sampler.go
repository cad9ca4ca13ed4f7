package sample

import "github.com/dlmcache/dlmcache/model"

// sampler runs the decoders over one network: its methods are the
// sampler's steps, the network's fields and forward are reached through it.
type sampler struct {
	*model.Network
}
