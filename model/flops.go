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
func (c *Config) LayerFLOPs(n, r int) float64 {
	d, kv, hid := float64(c.DModel), float64(c.KVDim()), float64(c.MLPHiddenSize)
	R, N := float64(r), float64(n)
	return 2*R*(2*d*d+2*d*kv) + // q, attn_out, k, v
		2*R*3*d*hid + // gate, up, down
		4*R*N*d // scores and weighted values
}

// HeadFLOPs counts the output head's FLOPs for lr logit rows.
func (c *Config) HeadFLOPs(lr int) float64 {
	return 2 * float64(lr) * float64(c.DModel) * float64(c.Embeddings())
}
