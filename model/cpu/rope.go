package cpu

import (
	"math"
	"sync"
)

// maxRopePositions bounds the cached cos/sin tables: positions at or above
// it (or negative) are computed on the fly.
const maxRopePositions = 1 << 14

type ropeKey struct {
	headDim int
	theta   float64
}

// ropeTable holds cos θ and sin θ for positions [0, n): position p's
// headDim values are cs[p*headDim:], cos for j < headDim/2 then sin. A
// table is never written after it is published.
type ropeTable struct {
	n  int
	cs []float32
}

// ropeCache maps (headDim, theta) to the largest table built so far.
type ropeCache struct {
	mu     sync.Mutex
	tables map[ropeKey]*ropeTable
}

// table returns a table for headDim and theta covering positions [0, need)
// where need ≤ maxRopePositions, building or growing it if needed.
func (c *ropeCache) table(headDim int, theta float64, need int) *ropeTable {
	k := ropeKey{headDim, theta}
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.tables[k]
	if t != nil && t.n >= need {
		return t
	}
	n := 1024
	for n < need {
		n *= 2
	}
	n = min(n, maxRopePositions)
	nt := &ropeTable{n: n, cs: make([]float32, n*headDim)}
	from := 0
	if t != nil {
		copy(nt.cs, t.cs)
		from = t.n
	}
	invFreq := ropeInvFreq(headDim, theta)
	for p := from; p < n; p++ {
		ropeAngles(nt.cs[p*headDim:(p+1)*headDim], float64(p), invFreq)
	}
	if c.tables == nil {
		c.tables = map[ropeKey]*ropeTable{}
	}
	c.tables[k] = nt
	return nt
}

// ropeInvFreq returns theta^(-2j/headDim) for j < headDim/2.
func ropeInvFreq(headDim int, theta float64) []float64 {
	f := make([]float64, headDim/2)
	for j := range f {
		f[j] = math.Pow(theta, -float64(2*j)/float64(headDim))
	}
	return f
}

// ropeAngles fills cs (len 2·len(invFreq)) with cos(p·f_j) then sin(p·f_j),
// computed in float64.
func ropeAngles(cs []float32, p float64, invFreq []float64) {
	half := len(invFreq)
	for j, f := range invFreq {
		s, c := math.Sincos(p * f)
		cs[j], cs[half+j] = float32(c), float32(s)
	}
}
