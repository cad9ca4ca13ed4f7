package main

import (
	"os"
	"testing"
)

// TestSample: a sample of this process sums to its resident memory and
// names its own binary and anonymous memory.
func TestSample(t *testing.T) {
	if _, err := os.Stat("/proc/self/smaps"); err != nil {
		t.Skip("no /proc/self/smaps here")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ms, total := sample(os.Getpid())
	var sum int64
	var self, anon bool
	for _, m := range ms {
		sum += m.rss
		self = self || m.name == exe && m.rss > 0
		anon = anon || m.name == "[anon]" && m.anon > 0
	}
	if total <= 0 || sum != total || !self || !anon {
		t.Errorf("sample: total %d KiB, mappings sum %d, own binary %v, anonymous %v", total, sum, self, anon)
	}
	if ms, total := sample(-1); ms != nil || total != 0 {
		t.Errorf("sample of no process: %d mappings, %d KiB", len(ms), total)
	}
}
