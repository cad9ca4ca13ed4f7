package cpu

import (
	"math/bits"
	"sync"
)

// minPooled is the smallest tensor (in float32s) worth recycling: below it
// the Go allocator is as fast as the pool.
const minPooled = 1 << 10

// bufPool recycles the storage of freed tensors, by size class. A forward
// allocates and frees the same shapes layer after layer and step after
// step; without recycling, each step's tensors are fresh heap memory that
// the Go runtime must zero, often after returning the pages to the kernel
// (madvise) and faulting them in again. On the bundled model that doubled
// the time of a step that computes only a request's suffix rows
// (docs/results.md, "Where the time went").
//
// Size classes are 16 per octave (a buffer is at most 1/16 larger than
// asked for). Pooled buffers live in sync.Pools, so a garbage collection
// drops the ones nobody took back: the pool holds no memory a quiet server
// needs back.
type bufPool struct {
	mu      sync.RWMutex
	classes map[int]*sync.Pool
}

// sizeClass rounds n up to the class capacity: a multiple of 2^(len(n)-5).
func sizeClass(n int) int {
	shift := max(bits.Len(uint(n))-5, 0)
	return ((n + 1<<shift - 1) >> shift) << shift
}

func (p *bufPool) class(c int) *sync.Pool {
	p.mu.RLock()
	sp := p.classes[c]
	p.mu.RUnlock()
	if sp != nil {
		return sp
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.classes == nil {
		p.classes = make(map[int]*sync.Pool)
	}
	if sp = p.classes[c]; sp == nil {
		sp = &sync.Pool{}
		p.classes[c] = sp
	}
	return sp
}

// scratch returns a slice of length n with arbitrary contents, for a
// buffer its user overwrites before reading.
func (p *bufPool) scratch(n int) []float32 { return p.take(n, false) }

// take returns a slice of length n from the pool (or new), cleared when
// zero.
func (p *bufPool) take(n int, zero bool) []float32 {
	if n < minPooled {
		return make([]float32, n)
	}
	c := sizeClass(n)
	if s, ok := p.class(c).Get().(*[]float32); ok {
		buf := (*s)[:n]
		if zero {
			clear(buf)
		}
		return buf
	}
	return make([]float32, n, c)
}

// put takes back a slice that get returned; nobody may use it afterwards.
func (p *bufPool) put(s []float32) {
	c := cap(s)
	if c < minPooled || sizeClass(c) != c {
		return
	}
	s = s[:c]
	p.class(c).Put(&s)
}
