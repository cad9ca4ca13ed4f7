package cuda

// Host-side helpers of the cuda backend. They carry no build tag so that
// their tests run in the default build, on machines without a GPU.

import (
	"math"
	"math/bits"
)

// bucket rounds a request up to a cached block size: 256 bytes at least,
// then steps of a quarter of the enclosing power of two (≤ 25 % waste).
func bucket(n int64) int64 {
	if n <= 256 {
		return 256
	}
	p := int64(1) << (63 - bits.LeadingZeros64(uint64(n-1)))
	step := p / 4
	return (n + step - 1) / step * step
}

// lastCopies drops every one of the n copies whose destination row a later
// copy overwrites, and returns the lists and their length. It returns them
// unchanged when dstRows has no repeat; a nil srcRows is made explicit when
// copies are dropped.
func lastCopies(dstRows, srcRows []int32, n int) ([]int32, []int32, int) {
	if len(dstRows) < 2 {
		return dstRows, srcRows, n
	}
	seen := make(map[int32]bool, len(dstRows))
	dup := false
	for _, r := range dstRows {
		if seen[r] {
			dup = true
			break
		}
		seen[r] = true
	}
	if !dup {
		return dstRows, srcRows, n
	}
	clear(seen)
	var nd, ns []int32
	for i := n - 1; i >= 0; i-- {
		r := dstRows[i]
		if seen[r] {
			continue
		}
		seen[r] = true
		nd = append(nd, r)
		if srcRows != nil {
			ns = append(ns, srcRows[i])
		} else {
			ns = append(ns, int32(i))
		}
	}
	return nd, ns, len(nd)
}

// f16ToF32 widens an IEEE half.
func f16ToF32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	man := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	case exp == 0 && man == 0:
		return math.Float32frombits(sign)
	case exp == 0:
		e := uint32(127 - 15 + 1)
		for man&0x400 == 0 {
			man <<= 1
			e--
		}
		return math.Float32frombits(sign | e<<23 | (man&0x3ff)<<13)
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | man<<13)
}
