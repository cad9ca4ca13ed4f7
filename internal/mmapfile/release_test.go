package mmapfile

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestRelease releases part of a mapped file, and a slice of memory that
// is not part of it, and reads both back unchanged.
func TestRelease(t *testing.T) {
	page := os.Getpagesize()
	want := make([]byte, 5*page+123)
	for i := range want {
		want[i] = byte(i*7 + i/page)
	}
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, want, 0o644); err != nil {
		t.Fatal(err)
	}
	data, unmap, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer unmap()
	if !bytes.Equal(data, want) {
		t.Fatal("mapped bytes differ from the file")
	}
	heap := bytes.Clone(want)
	for _, part := range [][2]int{{page/2 + 1, 4*page + 17}, {0, len(data)}, {3, 9}, {len(data) - 1, len(data)}} {
		Release(data, data[part[0]:part[1]])
		if !bytes.Equal(data, want) {
			t.Fatalf("after releasing [%d, %d): the mapping reads other bytes", part[0], part[1])
		}
		// Outside data: nothing happens to the process's own memory.
		Release(data, heap[part[0]:part[1]])
		if !bytes.Equal(heap, want) {
			t.Fatalf("releasing [%d, %d) of memory outside the mapping changed it", part[0], part[1])
		}
	}
	Release(data, nil)
	Release(nil, heap)
	if !bytes.Equal(heap, want) {
		t.Fatal("Release with no mapping changed memory")
	}
}
