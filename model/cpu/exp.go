package cpu

import "math"

// expf returns e^x in float32 with an error of about 1 ulp (Cephes expf:
// x = n·ln2 + r with |r| ≤ ln2/2, e^r by a degree-7 polynomial, then
// scaled by 2ⁿ through the exponent bits). It is several times faster than
// float32(math.Exp(float64(x))), which matters because softmax and SiLU
// evaluate it for every attention score and every FFN activation.
// Results below the smallest normal float32 flush to 0.
func expf(x float32) float32 {
	const (
		log2e = 1.44269504088896341
		c1    = 0.693359375
		c2    = -2.12194440e-4
		hi    = 88.72283905206835 // ln(MaxFloat32)
		lo    = -87.33654475055310898657 // ln(smallest normal float32)
	)
	if !(x < hi) { // also NaN
		if x != x {
			return x
		}
		return float32(math.Inf(1))
	}
	if x < lo {
		return 0
	}
	fx := x*log2e + 0.5
	n := int32(fx)
	if float32(n) > fx { // floor for negative fx
		n--
	}
	fn := float32(n)
	r := x - fn*c1
	r -= fn * c2
	z := r * r
	p := float32(1.9875691500e-4)
	p = p*r + 1.3981999507e-3
	p = p*r + 8.3334519073e-3
	p = p*r + 4.1665795894e-2
	p = p*r + 1.6666665459e-1
	p = p*r + 5.0000001201e-1
	p = p*z + r + 1
	// n ∈ [-126, 128]; 2¹²⁸ is not a float32, so scale in two steps there.
	if n > 127 {
		return p * 2 * math.Float32frombits(uint32(n-1+127)<<23)
	}
	return p * math.Float32frombits(uint32(n+127)<<23)
}
