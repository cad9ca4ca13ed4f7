package model

import (
	"fmt"

	"github.com/dlmcache/dlmcache/model/backend"
)

// Network is the network every architecture loads into (arch.go): a masked
// diffusion transformer (or a causal LM: Config.Causal), a Llama-shaped stack of pre-norm blocks with
// bidirectional attention (no causal mask; block-causal for a
// block-diffusion config, Config.BlockCausal), RoPE, RMSNorm and a
// SiLU-gated MLP, and an output head (LLaDA's own: no biases, a head
// separate from the embedding). Other architectures add q/k/v biases,
// per-head q/k norms or a mixture of experts (Block's optional weights).
//
//	x⁰ = wte[tokens]
//	for each block l:
//	    n = attn_norm(xˡ)
//	    h = xˡ + attn_out( attention( rope(q(n)), rope(k(n)), v(n) ) )
//	    m = ff_norm(h)
//	    xˡ⁺¹ = h + ff_out( silu(ff_proj(m)) · up_proj(m) )
//	logits = ff_out_head( ln_f(xᴸ) )
type Network struct {
	Config  *Config
	Backend backend.Backend

	Embed  backend.Tensor // wte      [E, d]
	Blocks []Block        //          L blocks
	Norm   backend.Tensor // ln_f     [1, d]
	Head   backend.Tensor // ff_out   [E, d]
}

// Block holds one transformer layer's weights. Linear weights are [out, in].
type Block struct {
	AttnNorm backend.Tensor // [1, d]
	Q        backend.Tensor // [d, d]
	K        backend.Tensor // [kv, d]
	V        backend.Tensor // [kv, d]
	AttnOut  backend.Tensor // [d, d]
	FFNorm   backend.Tensor // [1, d]
	Gate     backend.Tensor // ff_proj [hidden, d]
	Up       backend.Tensor // up_proj [hidden, d]
	Down     backend.Tensor // ff_out  [d, hidden]

	// An architecture's variants (arch.go), nil where it has none: the
	// biases of q, k and v, the per-head RMSNorm weights of q and k
	// [head_dim] (applied after the biases, before RoPE), and a mixture of
	// experts in place of Gate, Up and Down. A checkpoint whose q/k/v
	// weight is one fused tensor sets QKV itself (Q, K, V its row views).
	QBias, KBias, VBias []float32
	QNorm, KNorm        []float32
	MoE                 *MoE
	OBias               []float32 // the attention output projection's bias

	// QKV and GateUp are the fused [Q; K; V] and [Gate; Up] weights on a
	// backend with views (fuse.go); Q, K, V, Gate and Up are then row
	// views of them. Nil: the products run separately.
	QKV, GateUp backend.Tensor
}

// Input is one forward's worth of tokens.
type Input struct {
	Tokens    []int32 // [n] token ids of the whole canvas
	Positions []int32 // [n] RoPE position ids; nil means 0..n-1
	// LogitRows are the positions whose logits are wanted. They must be
	// computed at the last layer; with Config.ShiftLogits position p's
	// logits come from row p-1 (row 0's from itself), which must be.
	LogitRows []int32
}

// Output is what a forward returns.
type Output struct {
	// Logits is [len(LogitRows), E], row-major.
	Logits []float32
	// RowsComputed is the number of (layer, row) pairs computed; a full
	// forward computes L·n.
	RowsComputed int
	// FLOPs counts the matrix products' floating-point operations
	// (Config.LayerFLOPs per layer plus the head).
	FLOPs float64
	// release gives Logits' storage back to the backend (Release).
	release func()
}

// Release gives the logits' storage back to the backend where it lent it
// (a backend.Lender, a forward alone), for a later forward's temporaries:
// a sampler's logits then take the memory the layers left free, step
// after step, instead of fresh memory beside it. Logits must not be read
// after; Release is optional (unreleased, the storage is collected) and
// may be called more than once.
func (o *Output) Release() {
	if o.release != nil {
		o.release()
		o.release = nil
	}
	o.Logits = nil
}

// fillHidden builds dst [len(cur), d], the hidden state entering layer l for
// rows cur: rows also computed at the previous layer come from prev (their
// hidden states [len(prevRows), d]); the others from the plan.
func (m *Network) fillHidden(plan Plan, l int, prevRows []int32, prev backend.Tensor, cur []int32, dst backend.Tensor, alloc func(int, int) backend.Tensor) error {
	b := m.Backend
	var keepDst, keepSrc, missDst, miss []int32
	j := 0
	for i, p := range cur {
		for j < len(prevRows) && prevRows[j] < p {
			j++
		}
		if j < len(prevRows) && prevRows[j] == p {
			keepDst = append(keepDst, int32(i))
			keepSrc = append(keepSrc, int32(j))
		} else {
			missDst = append(missDst, int32(i))
			miss = append(miss, p)
		}
	}
	if len(keepDst) > 0 {
		b.CopyRows(dst, keepDst, prev, keepSrc)
	}
	if len(miss) == 0 {
		return nil
	}
	if plan == nil {
		return fmt.Errorf("forward: layer %d computes rows the layer before did not, and there is no plan", l)
	}
	tmp := alloc(len(miss), m.Config.DModel)
	if err := plan.Hidden(l, miss, tmp); err != nil {
		return fmt.Errorf("forward: layer %d: hidden state for rows not computed before: %w", l, err)
	}
	b.CopyRows(dst, missDst, tmp, nil)
	return nil
}

// iota32 is 0, 1, …, n-1.
func iota32(n int) []int32 { return iotaFrom(0, n) }

// allRows is 0..n-1; callers must not modify it.
func allRows(n int) []int32 { return iota32(n) }

func gather32(src, idx []int32) []int32 {
	r := make([]int32, len(idx))
	for i, j := range idx {
		r[i] = src[j]
	}
	return r
}

// complement returns the sorted positions of 0..n-1 not in sorted rows.
func complement(rows []int32, n int) []int32 {
	r := make([]int32, 0, n-len(rows))
	j := 0
	for p := int32(0); p < int32(n); p++ {
		if j < len(rows) && rows[j] == p {
			j++
			continue
		}
		r = append(r, p)
	}
	return r
}

// indexIn maps each wanted position to its index in sorted rows.
func indexIn(rows, want []int32) ([]int32, error) {
	at := make(map[int32]int32, len(rows))
	for i, p := range rows {
		at[p] = int32(i)
	}
	idx := make([]int32, len(want))
	for i, p := range want {
		j, ok := at[p]
		if !ok {
			return nil, fmt.Errorf("row %d is not computed at the last layer", p)
		}
		idx[i] = j
	}
	return idx, nil
}
