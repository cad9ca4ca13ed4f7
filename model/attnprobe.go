package model

import (
	"math"

	"github.com/dlmcache/dlmcache/model/backend"
)

// AttentionObserver is a Plan that wants the attention weights of some
// layers (d2Cache's attention rollout, Elastic-Cache's drift trigger). The
// forward computes them only for layers where WantsAttention is true, so a
// plan that does not implement the interface costs nothing.
type AttentionObserver interface {
	// WantsAttention reports whether ObserveAttention should be called for
	// layer l in this forward.
	WantsAttention(l int) bool
	// ObserveAttention receives layer l's softmax attention weights
	// averaged over heads: probs is [len(computed), n] row-major, row i the
	// weights query row computed[i] puts on each of the n positions. probs
	// is the observer's to keep.
	ObserveAttention(l int, computed []int32, probs []float32)
}

// observe shows layer l to the plan once its K/V are complete: Observe,
// then the attention weights if the plan asks for them, computed from the
// attentions calls of the computed rows (in row order; one per attention
// block on a block-causal model, where the weights on the keys a row does
// not attend are 0).
func (m *Network) observe(plan Plan, l int, computed []int32, hidden, k, v backend.Tensor, calls []attnCall) {
	if plan == nil {
		return
	}
	plan.Observe(l, computed, hidden, k, v)
	ao, ok := plan.(AttentionObserver)
	if !ok || !ao.WantsAttention(l) {
		return
	}
	c := m.Config
	n := k.Rows()
	if len(calls) == 1 && calls[0].k.Rows() == n {
		ao.ObserveAttention(l, computed, attentionProbs(m.Backend, calls[0].q, k, c.NHeads, c.NKVHeads, c.HeadDim()))
		return
	}
	probs := make([]float32, len(computed)*n)
	at := 0
	for _, cl := range calls {
		r, keys := cl.q.Rows(), cl.k.Rows()
		p := attentionProbs(m.Backend, cl.q, cl.k, c.NHeads, c.NKVHeads, c.HeadDim())
		for i := range r {
			copy(probs[(at+i)*n:(at+i)*n+keys], p[i*keys:(i+1)*keys])
		}
		at += r
	}
	ao.ObserveAttention(l, computed, probs)
}

// attentionProbs computes layer attention weights from q [r, nHeads·hd]
// (RoPE applied) and k [n, nKV·hd]: the head-mean of softmax(q·kᵀ/√hd),
// [r, n]. A backend with AttentionWeights computes them; on others the
// scores go through the backend's matrix product, one head at a time, and
// the softmax runs on the host. It is independent of the backend's
// fused Attention kernel, which never materialises the weights.
func attentionProbs(b backend.Backend, q, k backend.Tensor, nHeads, nKV, hd int) []float32 {
	if aw, ok := b.(backend.AttentionWeigher); ok {
		out := make([]float32, q.Rows()*k.Rows())
		aw.AttentionWeights(out, q, k, nHeads, nKV)
		return out
	}
	qh, kh := b.ToHost(q, nil), b.ToHost(k, nil)
	r, n := len(qh)/(nHeads*hd), len(kh)/(nKV*hd)
	out := make([]float32, r*n)
	scores := make([]float32, r*n)
	kCache := make(map[int]backend.Tensor)
	defer func() {
		for _, t := range kCache {
			b.Free(t)
		}
	}()
	for h := 0; h < nHeads; h++ {
		g := h / (nHeads / nKV)
		kt, ok := kCache[g]
		if !ok {
			kt = b.FromHost(n, hd, columns(kh, n, nKV*hd, g*hd, hd))
			kCache[g] = kt
		}
		qt := b.FromHost(r, hd, columns(qh, r, nHeads*hd, h*hd, hd))
		st := b.New(r, n)
		b.MatMul(st, qt, kt)
		b.ToHost(st, scores)
		b.Free(qt)
		b.Free(st)
		softmaxMean(out, scores, r, n, 1/math.Sqrt(float64(hd)), nHeads)
	}
	return out
}

// columns copies columns [c0, c0+w) of a row-major [rows, cols] matrix.
func columns(x []float32, rows, cols, c0, w int) []float32 {
	r := make([]float32, rows*w)
	for i := 0; i < rows; i++ {
		copy(r[i*w:(i+1)*w], x[i*cols+c0:i*cols+c0+w])
	}
	return r
}

// softmaxMean adds softmax(scale·scores) row by row, divided by heads, to
// out.
func softmaxMean(out, scores []float32, r, n int, scale float64, heads int) {
	for i := 0; i < r; i++ {
		row := scores[i*n : (i+1)*n]
		mx := math.Inf(-1)
		for _, v := range row {
			mx = max(mx, float64(v)*scale)
		}
		var sum float64
		for _, v := range row {
			sum += math.Exp(float64(v)*scale - mx)
		}
		o := out[i*n : (i+1)*n]
		for j, v := range row {
			o[j] += float32(math.Exp(float64(v)*scale-mx) / sum / float64(heads))
		}
	}
}

// AttentionWeights is the head-mean of softmax(q·kᵀ/√hd) for row-major q
// [r, nHeads·hd] and k [n, nKV·hd] (grouped-query heads as in
// backend.Attention), returned as [r, n].
func AttentionWeights(q, k []float32, r, n, nHeads, nKV, hd int) []float32 {
	out := make([]float32, r*n)
	s := make([]float64, n)
	scale := 1 / math.Sqrt(float64(hd))
	group := nHeads / nKV
	qw, kw := nHeads*hd, nKV*hd
	for i := 0; i < r; i++ {
		for h := 0; h < nHeads; h++ {
			qi := q[i*qw+h*hd : i*qw+(h+1)*hd]
			kh := (h / group) * hd
			mx := math.Inf(-1)
			for j := 0; j < n; j++ {
				kj := k[j*kw+kh : j*kw+kh+hd]
				var dot float64
				for c, x := range qi {
					dot += float64(x) * float64(kj[c])
				}
				s[j] = dot * scale
				mx = max(mx, s[j])
			}
			var sum float64
			for j := range s {
				s[j] = math.Exp(s[j] - mx)
				sum += s[j]
			}
			row := out[i*n : (i+1)*n]
			for j := range s {
				row[j] += float32(s[j] / sum / float64(nHeads))
			}
		}
	}
	return out
}
