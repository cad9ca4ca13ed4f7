package model

import (
	"math"
	"sort"

	"github.com/dlmcache/dlmcache/model/backend"
)

// The row-wise steps other architectures add to LLaDA's layer (arch.go),
// run on the host over the rows a step computes (O(rows·d), beside the
// products' O(rows·d²)): q/k/v biases and per-head q/k norms, and the
// routing of a mixture of experts. The products stay on the backend.

// plainAttn reports a layer whose attention input is LLaDA's (norm,
// products, RoPE): no biases, no q/k norms.
func (blk *Block) plainAttn() bool {
	return blk.QBias == nil && blk.KBias == nil && blk.VBias == nil && blk.QNorm == nil && blk.KNorm == nil
}

// qkvExtras adds the layer's biases to q, k and v and applies its per-head
// RMSNorm to q and k (before RoPE), in place.
func (m *Network) qkvExtras(blk *Block, q, k, v backend.Tensor) {
	eps := float32(m.Config.RMSNormEps)
	hd := m.Config.HeadDim()
	m.hostRows(q, blk.QBias, blk.QNorm, hd, eps)
	m.hostRows(k, blk.KBias, blk.KNorm, hd, eps)
	m.hostRows(v, blk.VBias, nil, hd, eps)
}

// hostRows adds bias (nil: none) to every row of t, then RMS-normalises
// each head of hd columns with weights norm (nil: none).
func (m *Network) hostRows(t backend.Tensor, bias, norm []float32, hd int, eps float32) {
	if bias == nil && norm == nil {
		return
	}
	b := m.Backend
	rows, cols := t.Rows(), t.Cols()
	h := b.ToHost(t, nil)
	for i := 0; i < rows; i++ {
		row := h[i*cols : (i+1)*cols]
		for j, x := range bias {
			row[j] += x
		}
		if norm == nil {
			continue
		}
		for o := 0; o < cols; o += hd {
			head := row[o : o+hd]
			var ss float64
			for _, x := range head {
				ss += float64(x) * float64(x)
			}
			s := float32(1 / math.Sqrt(ss/float64(hd)+float64(eps)))
			for j := range head {
				head[j] = head[j] * s * norm[j]
			}
		}
	}
	m.writeHost(t, h)
}

// partialRoPE rotates the first Config.RotaryDim dimensions of each head
// of t [r, heads·head_dim] at positions pos, in place: rotate-half over
// those dimensions with inv_freq = θ^(−2j/RotaryDim); the rest of the head
// passes through.
func (m *Network) partialRoPE(t backend.Tensor, pos []int32) {
	c := m.Config
	hd, rd := c.HeadDim(), c.RotaryDim
	half := rd / 2
	inv := make([]float64, half)
	for j := range inv {
		inv[j] = math.Pow(c.RopeTheta, -float64(2*j)/float64(rd))
	}
	rows, cols := t.Rows(), t.Cols()
	h := m.Backend.ToHost(t, nil)
	cs, sn := make([]float64, half), make([]float64, half)
	for i := 0; i < rows; i++ {
		for j := range inv {
			cs[j], sn[j] = math.Cos(float64(pos[i])*inv[j]), math.Sin(float64(pos[i])*inv[j])
		}
		row := h[i*cols : (i+1)*cols]
		for o := 0; o < cols; o += hd {
			x := row[o : o+rd]
			for j := 0; j < half; j++ {
				a, b := float64(x[j]), float64(x[j+half])
				x[j], x[j+half] = float32(a*cs[j]-b*sn[j]), float32(b*cs[j]+a*sn[j])
			}
		}
	}
	m.writeHost(t, h)
}

// writeHost overwrites t with the host values h.
func (m *Network) writeHost(t backend.Tensor, h []float32) {
	b := m.Backend
	tmp := b.FromHost(t.Rows(), t.Cols(), h)
	b.CopyRows(t, nil, tmp, nil)
	b.Free(tmp)
}

// moe is a mixture of experts over the rows of mm [r, d]: the router's
// scores pick each row's experts (route), then each expert runs its MLP
// over the rows routed to it, gathered into one matrix (one product per
// weight and expert, never one per row), and the outputs are summed into
// their rows weighted by the routing weights. Returns [r, d].
func (m *Network) moe(moe *MoE, mm backend.Tensor, alloc func(int, int) backend.Tensor) backend.Tensor {
	b, c := m.Backend, m.Config
	r, d, E := mm.Rows(), c.DModel, len(moe.Experts)
	lg := alloc(r, E)
	b.MatMul(lg, mm, moe.Router)
	rows, wts := route(b.ToHost(lg, nil), r, E, c.MoE, moe.Bias)
	acc := make([]float32, r*d)
	var host []float32
	for e, er := range rows {
		n := len(er)
		if n == 0 {
			continue
		}
		ex := &moe.Experts[e]
		xe := alloc(n, d)
		b.CopyRows(xe, nil, mm, er)
		ye := m.expertMLP(ex, xe, alloc)
		if cap(host) < n*d {
			host = make([]float32, n*d)
		}
		host = b.ToHost(ye, host[:n*d])
		for i, row := range er {
			w := wts[e][i]
			dst, src := acc[int(row)*d:int(row+1)*d], host[i*d:(i+1)*d]
			for j, x := range src {
				dst[j] += w * x
			}
		}
	}
	y := alloc(r, d)
	m.writeHost(y, acc)
	if sh := moe.Shared; sh != nil {
		b.Add(y, m.expertMLP(sh, mm, alloc))
	}
	return y
}

// expertMLP is an expert's MLP over the rows of x [n, d]:
// down(silu(gate·x) ⊙ up·x), [n, d].
func (m *Network) expertMLP(ex *Expert, x backend.Tensor, alloc func(int, int) backend.Tensor) backend.Tensor {
	b, n := m.Backend, x.Rows()
	h := ex.Gate.Rows()
	g, u := alloc(n, h), alloc(n, h)
	b.MatMul(g, x, ex.Gate)
	b.MatMul(u, x, ex.Up)
	b.SiLUMul(g, g, u)
	y := alloc(n, m.Config.DModel)
	b.MatMul(y, g, ex.Down)
	return y
}

// route picks each of r rows' experts from its router logits [r, E] and
// returns, per expert, the rows routed to it (ascending) and their
// weights. Softmax routing: probabilities over all experts, the TopK
// most probable, weighted by their probabilities (renormalised to sum to
// 1 with NormTopK). Sigmoid routing: scores sigmoid(logit), chosen by
// score + bias (nil: none) among the TopKGroups groups whose two best
// biased scores sum highest (Groups > 1), weighted by their scores
// normalised to sum to 1 (TopK > 1) times RoutedScaling. Ties go to the
// lower index.
func route(logits []float32, r, E int, mc *MoEConfig, bias []float32) (rows [][]int32, wts [][]float32) {
	rows, wts = make([][]int32, E), make([][]float32, E)
	p := make([]float64, E)   // the weights' scores
	sel := make([]float64, E) // the choice's scores
	idx := make([]int, 0, E)
	var gs []float64
	var gi []int
	if mc.Groups > 1 {
		gs, gi = make([]float64, mc.Groups), make([]int, mc.Groups)
	}
	for i := 0; i < r; i++ {
		lg := logits[i*E : (i+1)*E]
		if mc.Sigmoid {
			for j, x := range lg {
				p[j] = 1 / (1 + math.Exp(-float64(x)))
				sel[j] = p[j]
				if bias != nil {
					sel[j] += float64(bias[j])
				}
			}
		} else {
			mx := math.Inf(-1)
			for _, x := range lg {
				mx = max(mx, float64(x))
			}
			var sum float64
			for j, x := range lg {
				p[j] = math.Exp(float64(x) - mx)
				sum += p[j]
			}
			for j := range p {
				p[j] /= sum
				sel[j] = p[j]
			}
		}
		idx = idx[:0]
		if mc.Groups > 1 {
			size := E / mc.Groups
			for g := range gs {
				b1, b2 := math.Inf(-1), math.Inf(-1)
				for _, x := range sel[g*size : (g+1)*size] {
					if x > b1 {
						b1, b2 = x, b1
					} else if x > b2 {
						b2 = x
					}
				}
				gs[g], gi[g] = b1+b2, g
			}
			sort.SliceStable(gi, func(a, b int) bool { return gs[gi[a]] > gs[gi[b]] })
			for _, g := range gi[:mc.TopKGroups] {
				for j := g * size; j < (g+1)*size; j++ {
					idx = append(idx, j)
				}
			}
			sort.Ints(idx)
		} else {
			for j := 0; j < E; j++ {
				idx = append(idx, j)
			}
		}
		sort.SliceStable(idx, func(a, b int) bool { return sel[idx[a]] > sel[idx[b]] })
		top := idx[:mc.TopK]
		norm, scale := 1.0, 1.0
		switch {
		case mc.Sigmoid:
			if mc.TopK > 1 {
				norm = 1e-20
				for _, j := range top {
					norm += p[j]
				}
			}
			scale = mc.RoutedScaling
		case mc.NormTopK:
			norm = 0
			for _, j := range top {
				norm += p[j]
			}
		}
		for _, j := range top {
			rows[j] = append(rows[j], int32(i))
			wts[j] = append(wts[j], float32(p[j]/norm*scale))
		}
	}
	return rows, wts
}
