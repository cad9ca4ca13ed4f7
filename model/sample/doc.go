// Package sample is the sampler of a diffusion LM and its decoders: the
// semi-autoregressive schedule (LLaDA's low-confidence remasking), threshold
// decoding (Fast-dLLM), guided decoding with an autoregressive guide
// (FlashDLM, guided.go), and autoregressive decoding of a causal LM with an
// exact K/V cache (autoregressive.go).
//
// Generate runs one generation on a model.Network: each step it asks
// the Planner (a caching method, package cache; nil for none) for the
// step's Plan, runs the network's forward under it, and lets the Decoder
// choose which proposals to commit. The network itself knows nothing of
// steps, masks or decoders.
package sample
