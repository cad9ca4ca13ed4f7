// Package testmodel loads the repository's random-weight model fixtures
// (model/testdata: tiny-f32, tiny-bf16, tiny-block and one of each other
// architecture) for the tests of the packages above model.
package testmodel

import (
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/dlmcache/dlmcache/model/cpu"
	"github.com/dlmcache/dlmcache/model/load"
)

// Arch is the fixture of one architecture the model package runs.
type Arch struct {
	Name    string // the architecture (model.Config.ArchName)
	Fixture string // its fixture in model/testdata
}

// Archs are a fixture of each architecture: the tests of the packages
// above model (the caches, the profiler) run on each.
var Archs = []Arch{
	{"llada", "tiny-f32"},
	{"dream", "tiny-dream"},
	{"llada-moe", "tiny-llada-moe"},
	{"llada2", "tiny-llada2"},
}

// Dir is the directory of fixture name: model/testdata/name in the module
// holding the working directory (a test runs in its package's directory).
func Dir(name string) string {
	root, _ := os.Getwd()
	for d := root; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			root = d
			break
		}
		if filepath.Dir(d) == d {
			break // no go.mod above: Load's error names the path tried
		}
	}
	return filepath.Join(root, "model", "testdata", name)
}

// Load loads fixture name on a one-thread CPU backend; it is closed when
// the test ends.
func Load(t testing.TB, name string) *load.Model {
	t.Helper()
	m, err := load.Load(Dir(name), cpu.New(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

var (
	sharedMu sync.Mutex
	shared   = map[string]*load.Model{}
)

// Shared is fixture name loaded once for the whole test binary and never
// closed, for tests that only read the model.
func Shared(t testing.TB, name string) *load.Model {
	t.Helper()
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if m, ok := shared[name]; ok {
		return m
	}
	m, err := load.Load(Dir(name), cpu.New(1))
	if err != nil {
		t.Fatal(err)
	}
	shared[name] = m
	return m
}
