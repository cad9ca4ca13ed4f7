// Package testmodel loads the repository's random-weight model fixtures
// (model/testdata: tiny-f32, tiny-bf16, tiny-block and one of each other
// architecture) for the tests of the packages above model.
package testmodel

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/dlmcache/dlmcache/internal/testutil"
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
	return LoadDir(t, Dir(name))
}

// LoadDir loads the model directory dir on a one-thread CPU backend; it is
// closed when the test ends.
func LoadDir(t testing.TB, dir string) *load.Model {
	t.Helper()
	m, err := load.Load(dir, cpu.New(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// Derive makes a model directory from fixture name in a temporary
// directory of the test: links to those of the fixture's files link that it
// has, and its config.json as edit leaves it. It returns the directory,
// for the caller to add what else the model needs.
func Derive(t testing.TB, name string, link []string, edit func(config map[string]any)) string {
	t.Helper()
	src, dir := Dir(name), t.TempDir()
	for _, f := range link {
		if _, err := os.Stat(filepath.Join(src, f)); err == nil {
			if err := os.Symlink(filepath.Join(src, f), filepath.Join(dir, f)); err != nil {
				t.Fatal(err)
			}
		}
	}
	var c map[string]any
	testutil.ReadJSON(t, filepath.Join(src, "config.json"), &c)
	edit(c)
	raw, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
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
