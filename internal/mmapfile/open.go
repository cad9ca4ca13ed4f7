package mmapfile

import (
	"fmt"
	"os"
)

// Open maps the whole regular file at path read-only with Map; the
// descriptor is closed before Open returns. Errors from opening the file
// are the os package's (they name the path); the others begin with path.
func Open(path string) (data []byte, unmap func() error, err error) {
	fd, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer fd.Close()
	st, err := fd.Stat()
	if err != nil {
		return nil, nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, nil, fmt.Errorf("%s: not a regular file", path)
	}
	data, unmap, err = Map(fd, st.Size())
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %v", path, err)
	}
	return data, unmap, nil
}

// Map maps size bytes of f read-only (mmap_unix.go), or reads them where
// memory mapping is not available (mmap_other.go). unmap releases them.
func Map(f *os.File, size int64) (data []byte, unmap func() error, err error) {
	if int64(int(size)) != size {
		return nil, nil, fmt.Errorf("file of %d bytes is too large to %s", size, mapVerb)
	}
	return mapFile(f, int(size))
}
