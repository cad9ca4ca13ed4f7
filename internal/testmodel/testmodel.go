// Package testmodel loads the repository's random-weight model fixtures
// (model/testdata: tiny-f32, tiny-bf16, tiny-block) for the tests of the
// packages above model.
package testmodel

import (
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"github.com/dlmcache/dlmcache/model"
	"github.com/dlmcache/dlmcache/model/cpu"
)

// Dir is the directory of fixture name.
func Dir(name string) string {
	_, file, _, _ := runtime.Caller(0) // …/internal/testmodel/testmodel.go
	return filepath.Join(filepath.Dir(file), "..", "..", "model", "testdata", name)
}

// Load loads fixture name on a one-thread CPU backend; it is closed when
// the test ends.
func Load(t testing.TB, name string) *model.Model {
	t.Helper()
	m, err := model.Load(Dir(name), cpu.New(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

var (
	sharedMu sync.Mutex
	shared   = map[string]*model.Model{}
)

// Shared is fixture name loaded once for the whole test binary and never
// closed, for tests that only read the model.
func Shared(t testing.TB, name string) *model.Model {
	t.Helper()
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if m, ok := shared[name]; ok {
		return m
	}
	m, err := model.Load(Dir(name), cpu.New(1))
	if err != nil {
		t.Fatal(err)
	}
	shared[name] = m
	return m
}
