package memlimit

import (
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"
)

func TestCgroupLimit(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(s), 0o644)
		return p
	}
	for _, tc := range []struct {
		files []string
		want  int64
	}{
		{[]string{write("v2", "2147483648\n")}, 2 << 30},
		{[]string{write("v2max", "max\n"), write("v1", "1073741824\n")}, 0},
		{[]string{filepath.Join(dir, "missing"), write("v1b", "1073741824\n")}, 1 << 30},
		{[]string{write("v1none", "9223372036854771712\n")}, 0},
		{nil, 0},
	} {
		if got, _ := cgroupLimit(tc.files); got != tc.want {
			t.Errorf("%v: %d, want %d", tc.files, got, tc.want)
		}
	}
}

// TestTrimmerReturnsPooledMemory: after a burst that filled a sync.Pool,
// going idle trims: the heap the process holds falls back near where it
// was before the burst.
func TestTrimmerReturnsPooledMemory(t *testing.T) {
	var pool sync.Pool
	runtime.GC()
	start := heapSys()
	done := make(chan [2]uint64, 1)
	tr := &Trimmer{After: 10 * time.Millisecond, Trimmed: func(b, a uint64) { done <- [2]uint64{b, a} }}
	tr.Busy()
	var bufs [][]byte
	for range 64 {
		bufs = append(bufs, make([]byte, 1<<20))
	}
	for _, b := range bufs {
		pool.Put(&b)
	}
	bufs = nil
	tr.Idle()
	got := <-done
	t.Logf("heap held: %d MiB at start, %d MiB before the trim, %d MiB after", start>>20, got[0]>>20, got[1]>>20)
	if got[0] < start+48<<20 {
		t.Fatalf("the burst did not grow the heap (%d → %d MiB): the test measures nothing", start>>20, got[0]>>20)
	}
	if got[1] > start+16<<20 {
		t.Errorf("after the trim the heap holds %d MiB, %d MiB at start", got[1]>>20, start>>20)
	}
}

// TestTrimRunsHooks: a trim runs what OnTrim registered, before its
// collections, and only once the process has gone idle.
func TestTrimRunsHooks(t *testing.T) {
	var mu sync.Mutex
	var calls []string
	OnTrim(func() {
		mu.Lock()
		calls = append(calls, "hook")
		mu.Unlock()
	})
	done := make(chan struct{})
	tr := &Trimmer{After: 10 * time.Millisecond, Trimmed: func(uint64, uint64) {
		mu.Lock()
		calls = append(calls, "trimmed")
		mu.Unlock()
		close(done)
	}}
	tr.Busy()
	time.Sleep(30 * time.Millisecond)
	mu.Lock()
	busy := len(calls)
	mu.Unlock()
	if busy != 0 {
		t.Fatalf("hooks ran while busy: %v", calls)
	}
	tr.Idle()
	<-done
	mu.Lock()
	defer mu.Unlock()
	if len(calls) != 2 || calls[0] != "hook" {
		t.Errorf("calls %v, want [hook trimmed]", calls)
	}
}
