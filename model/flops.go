package model

// StepFLOPs counts the floating-point operations of the matrix products of
// one forward over n positions in which r rows are computed at every layer
// and logits are produced for lr rows (norms, RoPE and softmax are ignored:
// they are O(n·d)).
func (c *Config) StepFLOPs(n, r, lr int) float64 {
	return float64(c.NLayers)*c.LayerFLOPs(n, r) + c.HeadFLOPs(lr)
}

// LayerFLOPs counts the matrix-product FLOPs of one layer that computes r
// of n rows (its r queries attend over all n keys).
func (c *Config) LayerFLOPs(n, r int) float64 { return c.layerFLOPs(r, r*n) }

// layerFLOPs counts the matrix-product FLOPs of one layer that computes r
// rows whose queries attend keys (query, key) pairs in all.
func (c *Config) layerFLOPs(r, keys int) float64 {
	d, kv, hid := float64(c.DModel), float64(c.KVDim()), float64(c.MLPHiddenSize)
	R := float64(r)
	mlp := 2 * R * 3 * d * hid // gate, up, down
	if mc := c.MoE; mc != nil {
		// the router, the active and shared experts only; with leading
		// dense layers the mean over the layers (the sum over them exact)
		moe := 2*R*d*float64(mc.Experts) + 2*R*3*d*float64(mc.Hidden*mc.TopK+mc.SharedHidden)
		L, dense := float64(c.NLayers), float64(mc.FirstDense)
		mlp = ((L-dense)*moe + dense*mlp) / L
	}
	return 2*R*(2*d*d+2*d*kv) + // q, attn_out, k, v
		mlp +
		4*float64(keys)*d // scores and weighted values
}

// attendedKeys is the number of (query, key) pairs the computed rows
// (indices into pos, the position ids) attend: every key each on a
// bidirectional model, the keys of their block and the blocks before on
// a block-causal one.
func attendedKeys(c *Config, pos, rows []int32) int {
	B := int32(c.attnBlock())
	if B == 0 {
		return len(rows) * len(pos)
	}
	keys := 0
	for _, p := range rows {
		keys += keysThrough(pos, pos[p]/B, B)
	}
	return keys
}

// HeadFLOPs counts the output head's FLOPs for lr logit rows.
func (c *Config) HeadFLOPs(lr int) float64 {
	return 2 * float64(lr) * float64(c.DModel) * float64(c.Embeddings())
}

// FullFLOPs is what a forward over the first n canvas positions (ids pos,
// nil: 0..n-1) computing every row costs, with lr logit rows.
func (c *Config) FullFLOPs(pos []int32, n, lr int) float64 {
	if c.attnBlock() == 0 {
		return c.StepFLOPs(n, n, lr)
	}
	if pos == nil {
		pos = iota32(n)
	}
	return float64(c.NLayers)*c.layerFLOPs(n, attendedKeys(c, pos, iota32(n))) + c.HeadFLOPs(lr)
}
