package model

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/dlmcache/dlmcache/model/backend"
	"github.com/dlmcache/dlmcache/model/cpu"
	"github.com/dlmcache/dlmcache/model/safetensors"
)

// benchSeq is the canvas length of the step benchmarks.
const benchSeq = 512

// benchDirs are the checkpoints to benchmark: every subdirectory and .gguf
// file of $DLMCACHE_BENCH_DIR (make bench writes them with tools/benchckpt
// and dlmcache convert; a GGUF's benchmark is named without .gguf), or a
// random LLaDA-tiny-like shape (8 layers, d 256) written on the fly.
func benchDirs(b *testing.B) []string {
	if root := os.Getenv("DLMCACHE_BENCH_DIR"); root != "" {
		ents, err := os.ReadDir(root)
		if err != nil {
			b.Fatal(err)
		}
		var dirs []string
		for _, e := range ents {
			if e.IsDir() || strings.HasSuffix(e.Name(), ".gguf") {
				dirs = append(dirs, filepath.Join(root, e.Name()))
			}
		}
		sort.Strings(dirs)
		return dirs
	}
	dir := filepath.Join(b.TempDir(), "l8-d256")
	c := Config{DModel: 256, NLayers: 8, NHeads: 4, NKVHeads: 4, MLPHiddenSize: 768, VocabSize: 2048, RopeTheta: 10000, RMSNormEps: 1e-5}
	if err := WriteRandomCheckpoint(dir, c, 1, safetensors.F32); err != nil {
		b.Fatal(err)
	}
	return []string{dir}
}

// kvStore is a plan that computes only rows ≥ from at every layer and takes
// the other rows' K/V from a full forward's capture (a prefix store).
type kvStore struct {
	b    backend.Backend
	rows []int32
	k, v []backend.Tensor // per layer, [n, kv]
	fill bool
}

func (s *kvStore) Rows(int) []int32 { return s.rows }
func (s *kvStore) Hidden(int, []int32, backend.Tensor) error {
	return fmt.Errorf("kvStore: no hidden states")
}
func (s *kvStore) KV(l int, rows []int32, k, v backend.Tensor) error {
	s.b.CopyRows(k, rows, s.k[l], rows)
	s.b.CopyRows(v, rows, s.v[l], rows)
	return nil
}
func (s *kvStore) Observe(l int, _ []int32, _, k, v backend.Tensor) {
	if s.fill {
		kk, vv := s.b.New(k.Rows(), k.Cols()), s.b.New(v.Rows(), v.Cols())
		s.b.CopyRows(kk, nil, k, nil)
		s.b.CopyRows(vv, nil, v, nil)
		s.k, s.v = append(s.k, kk), append(s.v, vv)
	}
}

// BenchmarkStep times one denoising-step forward at sequence 512: "full"
// computes every row (logits for the last 32), "rows10" computes only the
// last 10% of rows with the rest of the K/V taken from a store. GFLOP/s
// counts the matrix products actually done. A shape is loaded only when
// one of its sub-benchmarks runs (-bench 'BenchmarkStep/^llada-8b$/'), and
// every page of its weights is read once before the timing (a server's
// state after its first request); load_s and pagein_s time the two, and
// maxrss_bytes is the process's peak resident set (getrusage) so far: the
// checkpoint's mapped pages count, so it is the shape's own only when the
// process runs that shape alone. The backend is cpu.New(0), so
// $DLMCACHE_CPU_BF16=f32 converts a BF16 checkpoint at load.
func BenchmarkStep(b *testing.B) {
	for _, dir := range benchDirs(b) {
		b.Run(strings.TrimSuffix(filepath.Base(dir), ".gguf"), func(b *testing.B) { benchStep(b, dir) })
	}
}

func benchStep(b *testing.B, dir string) {
	be := cpu.New(0)
	start := time.Now()
	m, err := loadCheckpoint(dir, be)
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	loadS := time.Since(start).Seconds()
	start = time.Now()
	if err := m.PageIn(); err != nil {
		b.Fatal(err)
	}
	pageinS := time.Since(start).Seconds()
	c := m.Config
	rng := rand.New(rand.NewPCG(1, 2))
	ids := make([]int32, benchSeq)
	for i := range ids {
		ids[i] = int32(rng.IntN(c.VocabSize))
	}
	lr := make([]int32, 32)
	for i := range lr {
		lr[i] = int32(benchSeq - 32 + i)
	}
	b.Run("full", func(b *testing.B) {
		for b.Loop() {
			if _, err := m.Forward(Input{Tokens: ids, LogitRows: lr}, nil); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(c.StepFLOPs(benchSeq, benchSeq, len(lr))*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		b.ReportMetric(loadS, "load_s")
		b.ReportMetric(pageinS, "pagein_s")
		b.ReportMetric(maxRSS(), "maxrss_bytes")
	})
	b.Run("rows10", func(b *testing.B) {
		from := benchSeq - benchSeq/10
		st := &kvStore{b: be, fill: true}
		if _, err := m.Forward(Input{Tokens: ids}, st); err != nil {
			b.Fatal(err)
		}
		st.fill = false
		for p := from; p < benchSeq; p++ {
			st.rows = append(st.rows, int32(p))
		}
		for b.Loop() {
			if _, err := m.Forward(Input{Tokens: ids, LogitRows: lr}, st); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(c.StepFLOPs(benchSeq, benchSeq-from, len(lr))*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		b.ReportMetric(maxRSS(), "maxrss_bytes")
	})
}
