package mmapfile

import (
	"fmt"
	"os"
	"unsafe"
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

// Release tells the kernel that the process will not read b, a part of
// data (what Map or Open returned), again soon: the whole pages inside b
// leave the process's resident set, and a later read brings them back
// from the file. A weight loader calls it for a tensor the backend copied
// (converted, widened), so that the file's pages and the copy are not
// both counted. It does nothing where b does not lie inside data, or
// where the file was read rather than mapped.
func Release(data, b []byte) {
	if len(b) == 0 || len(data) == 0 {
		return
	}
	lo, hi := uintptr(unsafe.Pointer(unsafe.SliceData(data))), uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	if hi < lo || hi+uintptr(len(b)) > lo+uintptr(len(data)) {
		return
	}
	release(b)
}
