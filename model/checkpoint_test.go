package model

import (
	"errors"

	"github.com/dlmcache/dlmcache/model/backend"
	"github.com/dlmcache/dlmcache/model/safetensors"
	"github.com/dlmcache/dlmcache/model/tokenizer"
)

// Checkpoint is a checkpoint the package's tests load: its network and
// tokenizer, and its loader's PageIn and Close (model/load's Model, as the
// tests inside package model see it).
type Checkpoint struct {
	*Network
	Tokenizer *tokenizer.Tokenizer
	PageIn    func() error
	Close     func() error
}

// LoadCheckpoint is model/load's Load, set by loader_test.go (package
// model_test): model/load imports model, so the package's own test files
// cannot import it, but the external test package linked into the same
// test binary can, and its init runs before any test.
var LoadCheckpoint func(dir string, b backend.Backend) (*Checkpoint, error)

// WriteRandomCheckpoint is model/load's WriteRandom, set with
// LoadCheckpoint (the benchmarks' random shape).
var WriteRandomCheckpoint func(dir string, c Config, seed uint64, dtype safetensors.DType) error

// loadCheckpoint loads the checkpoint dir (a directory or a GGUF file) on
// b through LoadCheckpoint.
func loadCheckpoint(dir string, b backend.Backend) (*Checkpoint, error) {
	if LoadCheckpoint == nil {
		return nil, errors.New("model tests: LoadCheckpoint is not set (loader_test.go sets it)")
	}
	return LoadCheckpoint(dir, b)
}
