package safetensors

import (
	"os"

	"github.com/dlmcache/dlmcache/internal/mmapfile"
)

// mapFile maps size bytes of f read-only (internal/mmapfile).
func mapFile(f *os.File, size int64) ([]byte, func() error, error) {
	return mmapfile.Map(f, size)
}
