//go:build !unix

// Package mmapfile maps whole files read-only, for the weight readers
// (safetensors and GGUF).
package mmapfile

import (
	"fmt"
	"io"
	"os"
)

// Map reads the whole file where memory mapping is not available.
func Map(f *os.File, size int64) (data []byte, unmap func() error, err error) {
	if int64(int(size)) != size {
		return nil, nil, fmt.Errorf("file of %d bytes is too large to read", size)
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(f, b); err != nil {
		return nil, nil, err
	}
	return b, func() error { return nil }, nil
}
