package cpu

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"testing"
	"time"
	"unsafe"

	"github.com/dlmcache/dlmcache/internal/memlimit"
)

// addr identifies a buffer's storage.
func addr(s []float32) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(s))) }

// TestPoolKeepsAcrossCollections: buffers given back stay on the free
// lists through collections (a sync.Pool would drop them by the second),
// up to the cap, the oldest dropped past it; take hands the kept ones
// back, the newest of a class first.
func TestPoolKeepsAcrossCollections(t *testing.T) {
	const n = 4096 // a class of its own: 16 KiB
	for _, tc := range []struct {
		name    string
		cap     int   // buffers of n that fit
		put     int   // buffers given back
		kept    []int // which (by order given back) come back, in take's order
		keptLen int64 // bytes on the free lists after the puts
	}{
		{"under the cap", 8, 3, []int{2, 1, 0}, 3 * 4 * n},
		{"at the cap", 3, 3, []int{2, 1, 0}, 3 * 4 * n},
		{"past the cap: the oldest dropped", 3, 5, []int{4, 3, 2}, 3 * 4 * n},
		{"below one buffer: none kept", 0, 2, nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &bufPool{cap: max(int64(tc.cap)*4*n, 1)}
			var bufs [][]float32
			for range tc.put {
				bufs = append(bufs, p.take(n, false))
			}
			for _, b := range bufs {
				p.put(b)
			}
			if got := p.keptSize(); got != tc.keptLen {
				t.Fatalf("kept %d bytes, want %d", got, tc.keptLen)
			}
			runtime.GC()
			runtime.GC()
			for _, i := range tc.kept {
				if got := p.take(n, false); addr(got) != addr(bufs[i]) {
					t.Fatalf("take after two collections: not the buffer given back %d-th", i)
				}
			}
			if got := p.keptSize(); got != 0 {
				t.Errorf("%d bytes still kept after taking them all back", got)
			}
		})
	}
}

// TestPoolKeepsTheNewest: past the cap the oldest buffer of any class
// goes, not its own class's.
func TestPoolKeepsTheNewest(t *testing.T) {
	const a, b = 4096, 8192
	p := &bufPool{cap: 4 * (a + b)}
	a1, b1, a2 := p.take(a, false), p.take(b, false), p.take(a, false)
	p.put(a1)
	p.put(b1)
	p.put(a2) // a1 (the oldest) makes room
	if got := p.keptSize(); got != 4*(a+b) {
		t.Fatalf("kept %d bytes, want %d", got, 4*(a+b))
	}
	if got := p.take(a, false); addr(got) != addr(a2) {
		t.Error("class a: not the newest buffer")
	}
	if got := p.take(b, false); addr(got) != addr(b1) {
		t.Error("class b: its buffer was dropped")
	}
	if got := p.keptSize(); got != 0 {
		t.Errorf("%d bytes still kept", got)
	}
}

// TestPoolSlack: a class with no buffer free lends one of the next
// slackClasses classes', with the length asked for; a buffer further up
// is not lent, and a lent buffer goes back to its own class.
func TestPoolSlack(t *testing.T) {
	const n = 40000
	c := sizeClass(n)
	up := func(k int) int {
		cc := c
		for range k {
			cc = sizeClass(cc + 1)
		}
		return cc
	}
	for _, tc := range []struct {
		name  string
		freed int // class of the only free buffer
		lent  bool
	}{
		{"own class", c, true},
		{"next class", up(1), true},
		{"the last class lent", up(slackClasses), true},
		{"one class too far", up(slackClasses + 1), false},
		{"a smaller class", sizeClass(c - 1 - c/17), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &bufPool{cap: 1 << 30}
			freed := p.take(tc.freed, false)
			p.put(freed)
			got := p.take(n, true)
			if len(got) != n {
				t.Fatalf("len %d, want %d", len(got), n)
			}
			if lent := addr(got) == addr(freed); lent != tc.lent {
				t.Fatalf("the free buffer of class %d lent for %d floats (class %d): %v, want %v", tc.freed, n, c, lent, tc.lent)
			}
			for i, v := range got {
				if v != 0 {
					t.Fatalf("element %d is %v: take(zero) did not clear", i, v)
				}
			}
			p.put(got)
			if again := p.take(cap(got), false); addr(again) != addr(got) {
				t.Errorf("the buffer did not go back to its class %d", cap(got))
			}
		})
	}
}

// TestPoolCapFollowsMemoryLimit: the free lists keep 1/keepShare of a
// memory limit lower than keepShare·keepMost.
func TestPoolCapFollowsMemoryLimit(t *testing.T) {
	old := debug.SetMemoryLimit(-1)
	defer debug.SetMemoryLimit(old)
	for _, tc := range []struct{ limit, want int64 }{
		{1 << 30, 1 << 30 / keepShare},
		{keepShare * keepMost * 2, keepMost},
		{old, min(keepMost, old/keepShare)},
	} {
		debug.SetMemoryLimit(tc.limit)
		if got := keepCap(); got != tc.want {
			t.Errorf("limit %d: cap %d, want %d", tc.limit, got, tc.want)
		}
	}
}

// TestIdleTrimDropsKeptBuffers: the server's idle trim (memlimit.Trimmer)
// drops a backend's free lists and returns their memory: the heap the
// process holds falls back near where it was before the burst.
func TestIdleTrimDropsKeptBuffers(t *testing.T) {
	b := New(1)
	runtime.GC()
	start := heapHeld()
	done := make(chan [2]uint64, 1)
	tr := &memlimit.Trimmer{After: 10 * time.Millisecond, Trimmed: func(before, after uint64) { done <- [2]uint64{before, after} }}
	tr.Busy()
	var ts []*Tensor
	for range 64 {
		ts = append(ts, b.New(1024, 256).(*Tensor)) // 1 MiB each
	}
	for _, x := range ts {
		b.Free(x)
	}
	runtime.GC()
	runtime.GC()
	if got := b.bufs.keptSize(); got < 48<<20 {
		t.Fatalf("%d MiB kept after two collections, want the burst's 64", got>>20)
	}
	tr.Idle()
	got := <-done
	t.Logf("heap held: %d MiB at start, %d MiB before the trim, %d MiB after", start>>20, got[0]>>20, got[1]>>20)
	if kept := b.bufs.keptSize(); kept != 0 {
		t.Errorf("%d bytes kept after the trim", kept)
	}
	if got[1] > start+16<<20 {
		t.Errorf("after the trim the heap holds %d MiB, %d MiB at start", got[1]>>20, start>>20)
	}
	runtime.KeepAlive(b)
}

func heapHeld() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapSys - m.HeapReleased
}

// TestPoolConcurrent: goroutines taking and giving back buffers of nearby
// classes (lent across classes, kept and dropped past a small cap, the
// lists released meanwhile) never get the same storage at once.
func TestPoolConcurrent(t *testing.T) {
	p := &bufPool{cap: 6 * 4 * 5000}
	done := make(chan error)
	for g := range 4 {
		go func() {
			for i := range 300 {
				n := 4000 + 300*((g+i)%5)
				buf := p.take(n, i%2 == 0)
				for j := range buf {
					buf[j] = float32(g)
				}
				runtime.Gosched()
				for j, v := range buf {
					if v != float32(g) {
						done <- fmt.Errorf("goroutine %d: element %d of its buffer is %v: shared", g, j, v)
						return
					}
				}
				p.put(buf)
				if g == 0 && i%50 == 0 {
					p.release()
				}
			}
			done <- nil
		}()
	}
	for range 4 {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}

// TestWithThreadsSharesThePool: storage freed on a backend WithThreads
// made comes back from the backend it was made from, and the other way.
func TestWithThreadsSharesThePool(t *testing.T) {
	b := New(2)
	o := b.WithThreads(1).(*Backend)
	if o == b {
		t.Skip("this backend does not divide its threads")
	}
	for _, tc := range []struct {
		name       string
		free, make *Backend
	}{{"freed on the share", o, b}, {"freed on the backend", b, o}} {
		t.Run(tc.name, func(t *testing.T) {
			x := tc.free.New(64, 128).(*Tensor)
			storage := addr(x.data)
			tc.free.Free(x)
			if y := tc.make.NewUninit(64, 128).(*Tensor); addr(y.data) != storage {
				t.Error("not the storage freed")
			}
		})
	}
}

// TestScratchOf: byte and uint16 scratch come from the float32 free
// lists, at the length asked for, and go back to them.
func TestScratchOf(t *testing.T) {
	p := &bufPool{cap: 1 << 30}
	b := scratchOf[byte](p, 100003)
	if len(b) != 100003 || cap(b)%4 != 0 {
		t.Fatalf("bytes: len %d cap %d", len(b), cap(b))
	}
	putOf(p, b)
	if f := p.take((100003+3)/4, false); uintptr(unsafe.Pointer(unsafe.SliceData(b))) != addr(f) {
		t.Error("the byte scratch did not go back to the float32 free lists")
	} else {
		p.put(f)
	}
	h := scratchOf[uint16](p, 50001)
	if len(h) != 50001 || uintptr(unsafe.Pointer(unsafe.SliceData(h))) != uintptr(unsafe.Pointer(unsafe.SliceData(b))) {
		t.Errorf("uint16 scratch: len %d, not lent the free buffer", len(h))
	}
	putOf(p, h)
	if p.keptSize() == 0 {
		t.Error("nothing kept after putOf")
	}
}
