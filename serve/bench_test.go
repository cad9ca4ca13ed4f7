package serve

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlmcache/dlmcache/cache"
	"github.com/dlmcache/dlmcache/lut"
	"github.com/dlmcache/dlmcache/model"
	"github.com/dlmcache/dlmcache/model/cpu"
	"github.com/dlmcache/dlmcache/model/load"
	"github.com/dlmcache/dlmcache/model/safetensors"
	"github.com/dlmcache/dlmcache/model/sample"
	"github.com/dlmcache/dlmcache/regime"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// BenchmarkConcurrency measures whether running generations side by side
// beats running them one after another: each iteration sends 4 chat
// requests (2 shared system messages) through the handler with
// MaxConcurrency 1, 2 and 4, and 16 requests with MaxConcurrency 2 unbatched
// and with MaxBatch 16 (one batched forward per step; one worker, then
// two side by side), and reports answer
// tokens/s and requests/s over the batch, the server's GFLOP/s
// (dlmcache_flops_total over the wall time) and its ratio to raw OpenBLAS
// sgemm measured just before and just after (sgemm-ratio).
// The model is $DLMCACHE_BENCH_MODEL, or a random-weights checkpoint with 8
// layers of width 256. Results are in docs/serving.md.
//
//	go test ./serve -run '^$' -bench Concurrency -benchtime 3x
func BenchmarkConcurrency(b *testing.B) {
	dir := os.Getenv("DLMCACHE_BENCH_MODEL")
	if dir == "" {
		dir = filepath.Join(b.TempDir(), "l8-d256")
		c := model.Config{DModel: 256, NLayers: 8, NHeads: 4, NKVHeads: 4, MLPHiddenSize: 768, VocabSize: 2048,
			RopeTheta: 10000, RMSNormEps: 1e-5, MaxSequenceLength: 4096}
		if err := load.WriteRandom(dir, c, 1, safetensors.F32); err != nil {
			b.Fatal(err)
		}
	}
	m, err := load.Load(dir, cpu.New(0))
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	gen := sample.GenOptions{Regime: regime.Regime{GenLength: 64, Steps: 32, BlockLength: 32}}
	if os.Getenv("DLMCACHE_BENCH_MODEL") != "" {
		// a real model: its own regime (the bundled one's 128 slots, 64 steps)
		gen = sample.GenOptions{Regime: m.Card.Regime}
	}
	systems := []string{strings.Repeat("You answer questions about the weather in short sentences. ", 4),
		strings.Repeat("You translate English into French, one line per answer. ", 4)}
	var reqs []string
	for i := 0; i < 16; i++ {
		reqs = append(reqs, chatBody(systems[i%2], fmt.Sprintf("Question number %d: what now?", i), ""))
	}
	// bicache with the request source: a one-bin table at half depth (with
	// R ≥ steps the depth only splits in-request reuse).
	L := len(m.Blocks)
	half, err := lut.Build(lut.ModelID{Name: "bench", NLayers: L, Fingerprint: m.Fingerprint}, 0.97, []float64{0, 1},
		[]lut.Sample{{Ratio: 0.5, Depth: L / 2}})
	if err != nil {
		b.Fatal(err)
	}
	configs := []struct {
		name                          string
		conc, batch, workers, clients int
	}{
		{"concurrency-1", 1, 0, 1, 4}, {"concurrency-2", 2, 0, 1, 4}, {"concurrency-4", 4, 0, 1, 4},
		// 16 clients: two unbatched generations at a time (the default
		// before batching) against one batched forward for all 16, and
		// two batches side by side (serve's default --workers).
		{"concurrency-2/clients-16", 2, 0, 1, 16}, {"batch-16/clients-16", 16, 16, 1, 16},
		{"batch-16/workers-2/clients-16", 16, 16, 2, 16},
	}
	for _, method := range []string{"none", "prefix-all", "bicache"} {
		for _, cf := range configs {
			reqs := reqs[:cf.clients]
			b.Run(method+"/"+cf.name, func(b *testing.B) {
				o := cache.Options{Fingerprint: m.Fingerprint}
				switch method {
				case "prefix-all":
					o.Store = cache.NewStore(m.Backend, 1<<30, cache.FIFO)
				case "bicache":
					o.Table, o.BiCache.Refresh, o.DeepSource = half, gen.Steps, cache.SourceRequest
				}
				meth, err := cache.New(method, o)
				if err != nil {
					b.Fatal(err)
				}
				s, err := New(Config{Model: m, Method: meth, Gen: gen, MaxConcurrency: cf.conc, MaxBatch: cf.batch, Workers: cf.workers, MaxQueue: len(reqs)})
				if err != nil {
					b.Fatal(err)
				}
				// Warm the store so that every configuration measures hits.
				for _, r := range reqs[:2] {
					post(b, s, "/v1/chat/completions", r)
				}
				sgemm0 := sgemmRaw(b)
				b.ResetTimer()
				flops0 := testutil.ToFloat64(s.met.flops) // dlmcache_flops_total, prefix fills included
				for i := 0; i < b.N; i++ {
					var wg sync.WaitGroup
					for _, r := range reqs {
						wg.Go(func() {
							if rec := post(b, s, "/v1/chat/completions", r); rec.Code != 200 {
								b.Errorf("%d %s", rec.Code, rec.Body)
							}
						})
					}
					wg.Wait()
				}
				b.StopTimer()
				gf := (testutil.ToFloat64(s.met.flops) - flops0) / b.Elapsed().Seconds() / 1e9
				b.ReportMetric(gf, "GFLOP/s")
				// The ratio: the server's GFLOP/s over raw sgemm
				// measured just before and just after, against their mean.
				sgemm := (sgemm0 + sgemmRaw(b)) / 2
				b.ReportMetric(sgemm, "sgemm-GFLOP/s")
				b.ReportMetric(gf/sgemm, "sgemm-ratio")
				b.ReportMetric(float64(b.N*len(reqs)*gen.GenLength)/b.Elapsed().Seconds(), "tokens/s")
				b.ReportMetric(float64(b.N*len(reqs))/b.Elapsed().Seconds(), "requests/s")
			})
		}
	}
}

// sgemmRaw is OpenBLAS's sgemm on every core for about half a second
// (cpu.SgemmRaw), the reference of BenchmarkConcurrency's sgemm-ratio.
func sgemmRaw(b *testing.B) float64 {
	g, err := cpu.SgemmRaw(runtime.NumCPU(), 500*time.Millisecond)
	if err != nil {
		b.Fatal(err)
	}
	return g
}
