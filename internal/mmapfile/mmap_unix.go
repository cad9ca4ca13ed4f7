//go:build unix

// Package mmapfile maps whole files read-only, for the weight readers
// (safetensors and GGUF).
package mmapfile

import (
	"fmt"
	"os"
	"syscall"
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
