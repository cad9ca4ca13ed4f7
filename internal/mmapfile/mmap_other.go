//go:build !unix

// Package mmapfile maps whole files read-only, for the weight readers
// (safetensors and GGUF).
package mmapfile

import (
	"io"
	"os"
)

const mapVerb = "read"

// mapFile reads the whole file where memory mapping is not available.
func mapFile(f *os.File, size int) (data []byte, unmap func() error, err error) {
	b := make([]byte, size)
	if _, err := io.ReadFull(f, b); err != nil {
		return nil, nil, err
	}
	return b, func() error { return nil }, nil
}

// release does nothing: mapFile read the file into memory of the process's
// own, which must stay.
func release([]byte) {}
