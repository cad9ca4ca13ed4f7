//go:build unix

package atomicfile

import (
	"os"
	"syscall"
)

// umask is the process's file-mode creation mask, read once at start-up
// (before any goroutine of the program can create files).
var umask = func() os.FileMode {
	m := syscall.Umask(0)
	syscall.Umask(m)
	return os.FileMode(m)
}()
