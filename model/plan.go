package model

import (
	"fmt"

	"github.com/dlmcache/dlmcache/model/backend"
)

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

// EveryRow is embedded by a Plan that computes every row at every layer
// and watches the forward through its own Observe (a capture of K/V or
// hidden states): Rows is nil at every layer, so the forward never asks
// such a plan for Hidden or KV, which fail.
type EveryRow struct{}

func (EveryRow) Rows(int) []int32 { return nil }

func (EveryRow) Hidden(l int, _ []int32, _ backend.Tensor) error {
	return fmt.Errorf("model: layer %d: hidden states asked of a plan that computes every row", l)
}

func (EveryRow) KV(l int, _ []int32, _, _ backend.Tensor) error {
	return fmt.Errorf("model: layer %d: K/V asked of a plan that computes every row", l)
}

// KVHolder is an optional Plan method for a plan that keeps every layer's
// K/V of the whole input in buffers of its own (an exact cache): KVBuffers
// returns layer l's ([N, kv_dim], N ≥ the input's rows, RoPE applied to
// k), holding the K/V of every row not computed at l. The forward writes
// the computed rows' K/V into them at their rows, so the plan need not
// keep them in Observe, and attends over them in place where the backend
// can (a view of the leading rows, or N equal to the input's rows), so
// the rows kept need no copy each step; elsewhere it completes its own
// copy through KV as for any plan. Observe sees the K/V attended.
type KVHolder interface {
	KVBuffers(l int) (k, v backend.Tensor)
}

// Carrier is an optional Plan method for a plan that carries some of a
// layer's rows through it on outputs it keeps instead of computing them
// (dLLM-Cache: the rows whose value vectors changed least move on with
// the layer's cached attention and MLP outputs). At every layer where
// Carries is true the forward asks, after Rows and the hidden states,
// Carry, with the value vectors of the rows Rows named; then the layer
// runs on the rows not carried, and the carried rows leave it with their
// hidden state plus Outputs' attention output, then plus its MLP output
// (as a computed row adds its own). At every layer ObserveOutputs sees
// the computed rows' outputs. The rows entering the next layer are the
// computed and the carried ones together.
type Carrier interface {
	// Carries reports whether the forward asks Carry at layer l (and
	// computes the value vectors it is shown); where it does not, the
	// layer computes every row Rows names.
	Carries(l int) bool
	// Carry returns the sorted rows of rows (Rows(l); every position
	// where Rows is nil) that layer l carries, nil for none, and never all
	// of them. v [len(rows), kv_dim] holds rows' value vectors (the
	// layer's attention norm and value product of the hidden states they
	// enter with), the plan's to read before it returns. A carried row's
	// K and V come from KV like those of any row not computed.
	Carry(l int, rows []int32, v backend.Tensor) []int32
	// Outputs fills att and mlp [len(carried), d_model] with the attention
	// output (after its output projection) and the MLP output that carry
	// the rows carried at layer l.
	Outputs(l int, carried []int32, att, mlp backend.Tensor) error
	// ObserveOutputs sees the attention and MLP outputs att and mlp
	// [len(computed), d_model] of the rows computed at layer l; they are
	// reused after it returns: copy what you keep.
	ObserveOutputs(l int, computed []int32, att, mlp backend.Tensor)
}
