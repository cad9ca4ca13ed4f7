package model_test

import (
	"github.com/dlmcache/dlmcache/model"
	"github.com/dlmcache/dlmcache/model/backend"
	"github.com/dlmcache/dlmcache/model/load"
)

// init hands package model's tests the checkpoint loader and the
// random-checkpoint writer (checkpoint_test.go).
func init() {
	model.LoadCheckpoint = func(dir string, b backend.Backend) (*model.Checkpoint, error) {
		m, err := load.Load(dir, b)
		if err != nil {
			return nil, err
		}
		return &model.Checkpoint{Network: m.Network, Tokenizer: m.Tokenizer, PageIn: m.PageIn, Close: m.Close}, nil
	}
	model.WriteRandomCheckpoint = load.WriteRandom
}
