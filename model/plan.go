package model

import "github.com/dlmcache/dlmcache/model/backend"

// Plan steers one forward pass layer by layer. Layers are numbered 0..L-1
// here (the design's layer l is index l-1). A nil Plan computes every row at
// every layer.
//
// Within one call, the forward asks, for each layer in order: Rows, then
// Hidden for rows that are computed at this layer but were not at the layer
// before, then KV for rows not computed, then Observe.
type Plan interface {
	// Rows returns the sorted input positions (indices into Input.Tokens)
	// whose rows are computed at layer l; nil means all of them.
	Rows(l int) []int32
	// Hidden fills dst [len(rows), d_model] with the hidden state entering
	// layer l for rows that are computed at l but not at l-1.
	Hidden(l int, rows []int32, dst backend.Tensor) error
	// KV fills k and v (both [n, kv_dim], RoPE applied to k) at the rows in
	// rows, which are not computed at layer l.
	KV(l int, rows []int32, k, v backend.Tensor) error
	// Observe sees layer l after its K/V are complete: k and v [n, kv_dim]
	// for all n positions, and hidden [len(computed), d_model], the hidden
	// state entering layer l of the computed rows. The tensors are reused
	// by the forward after Observe returns: copy what you keep.
	Observe(l int, computed []int32, hidden, k, v backend.Tensor)
}
