// Package atomicfile writes files so that readers see either the old
// content or the new, never a torn one: a temporary file in the same
// directory, written, synced, given its permissions, then renamed over the
// target. Every file dlmcache writes goes through it.
//
// Permissions are perm less the process's umask, as os.WriteFile would
// create them (os.CreateTemp alone makes 0600), so the usual 0644 gives
// -rw-r--r-- under the default umask 022.
package atomicfile

import (
	"bufio"
	"errors"
	"io"
	"os"
	"path/filepath"
)

// Write streams a file to path atomically: write gets a buffered writer
// over the temporary file. On any error the target is untouched and no
// temporary file is left behind.
func Write(path string, perm os.FileMode, write func(w io.Writer) error) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	werr := write(bw)
	if werr == nil {
		werr = bw.Flush()
	}
	if werr == nil {
		werr = f.Sync()
	}
	if werr == nil {
		werr = f.Chmod(perm &^ umask)
	}
	if err := errors.Join(werr, f.Close()); err != nil {
		os.Remove(f.Name())
		return err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		os.Remove(f.Name())
		return err
	}
	return nil
}

// WriteFile writes data to path atomically with permissions perm (less the
// umask).
func WriteFile(path string, data []byte, perm os.FileMode) error {
	return Write(path, perm, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}
