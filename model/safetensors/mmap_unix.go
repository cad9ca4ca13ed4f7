//go:build unix

package safetensors

import (
	"fmt"
	"os"
	"syscall"
)

// mapFile maps size bytes of f read-only. The mapping outlives f's
// descriptor. Truncating the file while it is mapped makes reads fault
// (SIGBUS), as with any memory-mapped file.
func mapFile(f *os.File, size int64) ([]byte, func() error, error) {
	if int64(int(size)) != size {
		return nil, nil, fmt.Errorf("file of %d bytes is too large to map", size)
	}
	b, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, nil, fmt.Errorf("mmap: %v", err)
	}
	return b, func() error { return syscall.Munmap(b) }, nil
}
