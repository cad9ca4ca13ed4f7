//go:build !unix

package atomicfile

import "os"

// umask is zero where the system has none.
var umask os.FileMode
