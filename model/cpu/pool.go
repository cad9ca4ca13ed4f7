package cpu

import (
	"math/bits"
	"runtime/debug"
	"sync"
	"unsafe"
	"weak"

	"github.com/dlmcache/dlmcache/internal/memlimit"
)

// minPooled is the smallest tensor (in float32s) worth recycling: below it
// the Go allocator is as fast as the pool.
const minPooled = 1 << 10

// The free lists that outlive collections hold keepMost bytes at most,
// and 1/keepShare of the runtime's memory limit where that is less.
const (
	keepMost  = 512 << 20
	keepShare = 8
)

// slackClasses is how many classes above its own a buffer may be taken
// from when its class has none free: two octaves (32 classes), so it is
// at most four times as large as asked for (the smallest free one first).
// A generation's steps ask for fewer logit rows as the canvas unmasks,
// each a size of its own, and the head's normed rows are a fraction of
// the layers' [r, d]; lent the layers' free buffers, they take no memory
// beside them (on l16-d2048's 8-step generation, Q8_0: four classes kept
// one buffer per size, 7 MB more in all; an octave 4.5 MB more than two).
const slackClasses = 32

// bufPool recycles the storage of freed tensors, by size class. A forward
// allocates and frees the same shapes layer after layer and step after
// step; without recycling, each step's tensors are fresh heap memory that
// the Go runtime must zero, often after returning the pages to the kernel
// (madvise) and faulting them in again. On the bundled model that doubled
// the time of a step that computes only a request's suffix rows
// (docs/results.md, "Where the time went").
//
// Size classes are 16 per octave (a buffer is at most 1/16 larger than
// asked for). A class with no buffer free lends one of the next
// slackClasses classes': a server's requests differ in length, and their
// K/V buffers with them, so that a request finds the ones an earlier
// request of a slightly different length gave back instead of fresh
// memory beside them.
//
// Freed buffers are kept, newest first, in free lists that outlive garbage
// collections, up to a cap (keepMost, or the memory limit's 1/keepShare
// under a smaller one), the oldest dropped first past it; the rest go to
// sync.Pools, which a collection empties (a buffer survives one). A busy
// server collects every second or so, and each collection would
// otherwise turn the buffers it recycles into fresh memory, faulted in
// and zeroed again. Once the
// process goes idle the free lists are dropped (memlimit.OnTrim: the
// server's idle trim), so that a quiet server holds no memory it needs
// back.
type bufPool struct {
	mu      sync.Mutex
	classes map[int]*poolClass
	// oldest and newest end the list of every kept buffer in the order
	// they were given back (kept.older, kept.newer).
	oldest, newest *kept
	keptBytes      int64
	// cap is the most keptBytes may be; 0 until the first put (the memory
	// limit is read then, and again after each release).
	cap        int64
	registered bool
}

// poolClass holds one size class's free buffers: those kept, newest last,
// and the rest.
type poolClass struct {
	kept []*kept
	pool sync.Pool
}

// kept is a buffer on a free list: on its class's and on the pool's list
// of every kept buffer.
type kept struct {
	buf          []float32
	class        *poolClass
	older, newer *kept
}

// sizeClass rounds n up to the class capacity: a multiple of 2^(len(n)-5).
func sizeClass(n int) int {
	shift := max(bits.Len(uint(n))-5, 0)
	return ((n + 1<<shift - 1) >> shift) << shift
}

// class returns class c's free buffers (p.mu held).
func (p *bufPool) class(c int) *poolClass {
	pc := p.classes[c]
	if pc == nil {
		if p.classes == nil {
			p.classes = make(map[int]*poolClass)
		}
		pc = &poolClass{}
		p.classes[c] = pc
	}
	return pc
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
	buf := p.reuse(c)
	if buf == nil {
		return make([]float32, n, c)
	}
	buf = buf[:n]
	if zero {
		clear(buf)
	}
	return buf
}

// reuse returns a free buffer of class c or one of the slackClasses above
// it, the kept ones first, or nil.
func (p *bufPool) reuse(c int) []float32 {
	var pools [slackClasses + 1]*sync.Pool
	p.mu.Lock()
	for i, cc := 0, c; i <= slackClasses; i, cc = i+1, sizeClass(cc+1) {
		pc := p.classes[cc]
		if pc == nil {
			continue
		}
		if k := len(pc.kept); k > 0 {
			e := pc.kept[k-1]
			pc.kept[k-1] = nil
			pc.kept = pc.kept[:k-1]
			p.unlink(e)
			p.mu.Unlock()
			return e.buf
		}
		pools[i] = &pc.pool
	}
	p.mu.Unlock()
	for _, sp := range pools {
		if sp == nil {
			continue
		}
		if s, ok := sp.Get().(*[]float32); ok {
			return *s
		}
	}
	return nil
}

// scratchOf returns n values of T with arbitrary contents from p's
// float32 buffers (a buffer its user overwrites before reading): the
// activations rounded to BF16 or quantized that products take, in the
// same size classes and free lists as the tensors'. Give it back with
// putOf.
func scratchOf[T uint8 | uint16](p *bufPool, n int) []T {
	size := int(unsafe.Sizeof(T(0)))
	f := p.take((n*size+3)/4, false)
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(f))), cap(f)*4/size)[:n]
}

// putOf takes back a slice that scratchOf returned.
func putOf[T uint8 | uint16](p *bufPool, s []T) {
	size := int(unsafe.Sizeof(T(0)))
	p.put(unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(s))), cap(s)*size/4))
}

// Lend implements backend.Lender from the tensors' pool.
func (b *Backend) Lend(n int) []float32 { return b.bufs.scratch(n) }

// Return implements backend.Lender.
func (b *Backend) Return(s []float32) { b.bufs.put(s) }

// put takes back a slice that take returned; nobody may use it afterwards.
func (p *bufPool) put(s []float32) {
	c := cap(s)
	if c < minPooled || sizeClass(c) != c {
		return
	}
	s = s[:c]
	size := int64(c) * 4
	p.mu.Lock()
	if p.cap == 0 {
		p.cap = keepCap()
	}
	if !p.registered {
		p.registered = true
		register(p)
	}
	pc := p.class(c)
	if size > p.cap {
		p.mu.Unlock()
		pc.pool.Put(&s)
		return
	}
	for p.keptBytes+size > p.cap {
		p.drop(p.oldest)
	}
	e := &kept{buf: s, class: pc, older: p.newest}
	if p.newest != nil {
		p.newest.newer = e
	} else {
		p.oldest = e
	}
	p.newest = e
	p.keptBytes += size
	pc.kept = append(pc.kept, e)
	p.mu.Unlock()
}

// unlink takes kept buffer e off the list of every kept buffer (p.mu
// held); its class has let go of it.
func (p *bufPool) unlink(e *kept) {
	if e.older != nil {
		e.older.newer = e.newer
	} else {
		p.oldest = e.newer
	}
	if e.newer != nil {
		e.newer.older = e.older
	} else {
		p.newest = e.older
	}
	e.older, e.newer = nil, nil
	p.keptBytes -= int64(cap(e.buf)) * 4
}

// drop lets go of the oldest kept buffer e, the first of its class's (p.mu
// held): a collection frees it.
func (p *bufPool) drop(e *kept) {
	pc := e.class
	copy(pc.kept, pc.kept[1:])
	pc.kept[len(pc.kept)-1] = nil
	pc.kept = pc.kept[:len(pc.kept)-1]
	p.unlink(e)
}

// release drops every kept buffer: the next collection frees them.
func (p *bufPool) release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.oldest != nil {
		p.drop(p.oldest)
	}
	p.cap = 0
}

// keptSize is how many bytes the free lists hold.
func (p *bufPool) keptSize() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.keptBytes
}

// keepCap is the most bytes a pool keeps: keepMost, or 1/keepShare of
// the runtime's memory limit when that is less.
func keepCap() int64 {
	return min(keepMost, debug.SetMemoryLimit(-1)/keepShare)
}

// pools are the bufPools that keep buffers, for the idle trim to drop
// (weakly: a pool whose backend is gone leaves the list).
var pools struct {
	sync.Mutex
	list []weak.Pointer[bufPool]
}

func register(p *bufPool) {
	pools.Lock()
	defer pools.Unlock()
	pools.list = append(live(pools.list), weak.Make(p))
}

// live is the pools of list still reachable.
func live(list []weak.Pointer[bufPool]) []weak.Pointer[bufPool] {
	out := list[:0]
	for _, w := range list {
		if w.Value() != nil {
			out = append(out, w)
		}
	}
	clear(list[len(out):])
	return out
}

// releasePools drops every pool's kept buffers.
func releasePools() {
	pools.Lock()
	pools.list = live(pools.list)
	list := append([]weak.Pointer[bufPool](nil), pools.list...)
	pools.Unlock()
	for _, w := range list {
		if p := w.Value(); p != nil {
			p.release()
		}
	}
}

func init() { memlimit.OnTrim(releasePools) }
