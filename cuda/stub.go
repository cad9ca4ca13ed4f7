//go:build !cuda

package cuda

import (
	"errors"

	"github.com/dlmcache/dlmcache/model/backend"
)

// ErrNotBuilt is returned by New in a build without the cuda tag.
var ErrNotBuilt = errors.New("this dlmcache was built without CUDA support: on a machine with an NVIDIA GPU and CUDA ≥ 11.8, rebuild with `go build -tags cuda -o bin/dlmcache ./cmd/dlmcache`")

// New returns the CUDA backend; in this build it always fails.
func New() (backend.Backend, error) { return nil, ErrNotBuilt }
