// Package sumexp computes Σ e^(x_i − m) over float32 values in float64:
// the softmax denominator the sampler needs for every logit row, 2,048
// terms a row, a row per masked slot of every request at every step.
// With AVX2 the terms go four at a time through a float64 e^x of about
// 1 ulp (Cephes' rational form); elsewhere through math.Exp. The two sums
// agree to about 1e-15 relative.
package sumexp
