package sample

import (
	"path/filepath"
	"testing"

	"github.com/dlmcache/dlmcache/internal/testutil"
	"github.com/dlmcache/dlmcache/internal/testutil/goldencpu"
	"github.com/dlmcache/dlmcache/model"
	"github.com/dlmcache/dlmcache/model/cpu"
	"github.com/dlmcache/dlmcache/model/load"
	"github.com/dlmcache/dlmcache/model/safetensors"
)

// The sampler's golden tests read the network's fixtures (model/testdata):
// checkpoints and golden.json files written by tools/golden from an
// independent PyTorch implementation (tools/pyllada) run in float64.
const testdata = "../testdata"

type goldenCase struct {
	InputIDs []int32               `json:"input_ids"`
	Generate []testutil.Generation `json:"generate"`
}

var fixtures = []string{"tiny-f32", "tiny-bf16"}

// archFixtures are the architectures' fixtures (model's arch_test.go).
var archFixtures = []struct{ dir, arch string }{
	{"tiny-dream", "dream"},
	{"tiny-llada-moe", "llada-moe"},
	{"tiny-llada2", "llada2"},
	{"tiny-qwen2", "qwen2"},
	{"tiny-llama", "llama"},
}

// goldenBackends are the CPU backends the golden tests run on.
func goldenBackends(t testing.TB) map[string]*cpu.Backend { return goldencpu.Backends(t) }

func fixtureBackend() *cpu.Backend { return goldencpu.OpenBLAS() }

func loadFixture(t testing.TB, name string) (*load.Model, *goldenCase, *safetensors.Set) {
	return loadFixtureOn(t, name, fixtureBackend())
}

func loadFixtureOn(t testing.TB, name string, be *cpu.Backend) (*load.Model, *goldenCase, *safetensors.Set) {
	t.Helper()
	return loadGolden[goldenCase](t, name, be)
}

// loadGolden loads testdata/name on be with its golden.json (decoded into a
// G) and golden.safetensors; all are closed when the test ends.
func loadGolden[G any](t testing.TB, name string, be *cpu.Backend) (*load.Model, *G, *safetensors.Set) {
	t.Helper()
	open := func(dir string) (*load.Model, error) { return load.Load(dir, be) }
	return testutil.LoadGolden[G](t, filepath.Join(testdata, name), open, func(m *load.Model) { m.Close() }, safetensors.OpenFile)
}

type blockGolden struct {
	InputIDs []int32           `json:"input_ids"`
	Generate []blockGeneration `json:"generate"`
}

type blockGeneration = testutil.BlockGeneration

func loadBlockGolden(t *testing.T, be *cpu.Backend) (*load.Model, *blockGolden, *safetensors.Set) {
	t.Helper()
	return loadGolden[blockGolden](t, "tiny-block", be)
}

// blockCausal returns m with its config made block-causal with blocks of
// B (and the token shift where shift), sharing m's weights.
func blockCausal(m *model.Network, B int, shift bool) *model.Network {
	c := *m.Config
	c.BlockCausal, c.BlockSize, c.ShiftLogits = true, B, shift
	bc := *m
	bc.Config = &c
	return &bc
}

// TestArchGenerateGolden: each architecture's greedy generations token for
// token against the reference's, and a block-causal fixture's block
// decodings step by step, on every golden backend.
func TestArchGenerateGolden(t *testing.T) {
	for _, fx := range archFixtures {
		for lib, be := range goldenBackends(t) {
			t.Run(fx.dir+"/"+lib, func(t *testing.T) {
				testGenerateGolden(t, fx.dir, be)
				testArchBlockGenerate(t, fx.dir, be)
			})
		}
	}
}
