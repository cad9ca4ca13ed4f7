// Package memlimit bounds a long-running process's memory: a soft limit
// for the Go runtime (debug.SetMemoryLimit) that respects GOMEMLIMIT and
// the container's cgroup limit, and a trimmer that, once the process goes
// idle, lets go of what the caches registered with OnTrim keep across
// collections, collects twice (a sync.Pool keeps its buffers through one
// collection) and returns the freed pages to the kernel, so that the
// resident memory a burst of load left behind does not stay.
package memlimit

import (
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Fraction is the share of the cgroup limit the runtime's soft limit is
// set to: the rest is headroom for memory the runtime does not manage
// (cgo: OpenBLAS, oneDNN, the C kernels' scratch) and for the limit's
// being soft.
const Fraction = 0.9

// cgroupFiles are where cgroup v2 and v1 keep a container's memory limit.
var cgroupFiles = []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}

// Apply sets the Go runtime's soft memory limit and says what it chose:
// GOMEMLIMIT when set (the runtime already applies it), else Fraction of
// the cgroup's limit when there is one, else none.
func Apply() string {
	if v := os.Getenv("GOMEMLIMIT"); v != "" {
		return fmt.Sprintf("memory limit %s (GOMEMLIMIT)", formatBytes(debug.SetMemoryLimit(-1)))
	}
	limit, file := cgroupLimit(cgroupFiles)
	if limit <= 0 {
		return "no memory limit (neither GOMEMLIMIT nor a cgroup limit)"
	}
	soft := int64(float64(limit) * Fraction)
	debug.SetMemoryLimit(soft)
	return fmt.Sprintf("memory limit %s (%.0f%% of the cgroup's %s, %s)", formatBytes(soft), Fraction*100, formatBytes(limit), file)
}

// cgroupLimit reads the first limit files hold: bytes, or 0 for none
// ("max", v1's page-rounded near-MaxInt64, or no file).
func cgroupLimit(files []string) (int64, string) {
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		s := strings.TrimSpace(string(raw))
		if s == "max" {
			return 0, f
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n <= 0 || n >= 1<<60 {
			return 0, f
		}
		return n, f
	}
	return 0, ""
}

func formatBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%d B", n)
}

// Trimmer returns the memory of a burst to the kernel once the process has
// been idle for After: Busy and Idle bracket each unit of work.
type Trimmer struct {
	After time.Duration
	// Trimmed, if not nil, is told how much the heap held before and after
	// each trim.
	Trimmed func(before, after uint64)

	mu      sync.Mutex
	busy    int
	timer   *time.Timer
	pending bool // work happened since the last trim
}

// Busy marks the start of a unit of work.
func (t *Trimmer) Busy() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.busy++
	t.pending = true
	if t.timer != nil {
		t.timer.Stop()
	}
}

// Idle marks its end; the last one to end arms the trim.
func (t *Trimmer) Idle() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.busy--
	if t.busy > 0 || !t.pending {
		return
	}
	if t.timer == nil {
		t.timer = time.AfterFunc(t.After, t.fire)
	} else {
		t.timer.Reset(t.After)
	}
}

func (t *Trimmer) fire() {
	t.mu.Lock()
	if t.busy > 0 || !t.pending {
		t.mu.Unlock()
		return
	}
	t.pending = false
	t.mu.Unlock()
	before := heapSys()
	runTrims()
	runtime.GC()         // the pools' buffers move to their victim caches…
	debug.FreeOSMemory() // …and go here, with the pages returned
	if t.Trimmed != nil {
		t.Trimmed(before, heapSys())
	}
}

// heapSys is the heap memory the runtime holds from the kernel and has
// not returned.
func heapSys() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapSys - m.HeapReleased
}

// trims are the functions OnTrim registered.
var trims struct {
	sync.Mutex
	fs []func()
}

// OnTrim registers f to run at every idle trim, before its collections:
// a cache that keeps memory across collections (a free list of buffers)
// lets go of it there, so that a quiet process returns it too.
func OnTrim(f func()) {
	trims.Lock()
	defer trims.Unlock()
	trims.fs = append(trims.fs, f)
}

func runTrims() {
	trims.Lock()
	fs := trims.fs
	trims.Unlock()
	for _, f := range fs {
		f()
	}
}
