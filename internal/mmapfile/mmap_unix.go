//go:build unix

// Package mmapfile maps whole files read-only, for the weight readers
// (safetensors and GGUF).
package mmapfile

import (
	"fmt"
	"os"
	"syscall"
	"unsafe"
)

const mapVerb = "map"

// mapFile maps size bytes of f read-only. The mapping outlives f's
// descriptor. Truncating the file while it is mapped makes reads fault
// (SIGBUS), as with any memory-mapped file. unmap releases it.
func mapFile(f *os.File, size int) (data []byte, unmap func() error, err error) {
	if size == 0 {
		return []byte{}, func() error { return nil }, nil
	}
	b, err := syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, nil, fmt.Errorf("mmap: %v", err)
	}
	return b, func() error { return syscall.Munmap(b) }, nil
}

// release drops the whole pages of b, which lies in a mapping of mapFile,
// from the process's resident set.
func release(b []byte) {
	page := uintptr(os.Getpagesize())
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	start, end := (lo+page-1)&^(page-1), (lo+uintptr(len(b)))&^(page-1)
	if end <= start {
		return
	}
	// The pages are the file's, mapped shared and read-only: dropping them
	// loses nothing, and a later read faults them in again.
	_ = syscall.Madvise(b[start-lo:end-lo], syscall.MADV_DONTNEED)
}
