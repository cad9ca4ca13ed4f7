package cache

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/dlmcache/dlmcache/datasets"
	"github.com/dlmcache/dlmcache/model/cpu"
	"github.com/dlmcache/dlmcache/model/load"
	"github.com/dlmcache/dlmcache/model/sample"
	"github.com/dlmcache/dlmcache/regime"
)

// BenchmarkMethods times one held-out lookup request on the bundled model
// per method and deep source (a fresh system message each time the store is
// cold: the store is reset per iteration). Compare the ns/op of the rows,
// not absolute times: docs/results.md has the measured ratios.
func BenchmarkMethods(b *testing.B) { benchBundled(b, "llada-tiny", benchMethods) }

// benchBundled runs fn on the bundled model models/<name> on the CPU
// backend with 1 and 2 threads, a sub-benchmark each; it skips where the
// model is absent.
func benchBundled(b *testing.B, name string, fn func(*testing.B, *load.Model)) {
	for _, threads := range []int{1, 2} {
		b.Run(fmt.Sprintf("threads=%d", threads), func(b *testing.B) {
			m, err := load.Load(filepath.Join("..", "models", name), cpu.New(threads))
			if err != nil {
				b.Skip("bundled model:", err)
			}
			defer m.Close()
			fn(b, m)
		})
	}
}

func benchMethods(b *testing.B, m *load.Model) {
	s := datasets.Generate("lookup", datasets.Eval, 1, 1, datasets.DefaultOptions())[0]
	ids, pl, err := m.Tokenizer.EncodeChat(s.System, s.User)
	if err != nil {
		b.Fatal(err)
	}
	L := len(m.Blocks)
	o := sample.GenOptions{Regime: regime.Regime{GenLength: 64, Steps: 64, BlockLength: 32}}
	for _, tc := range []struct{ name, method, source string }{
		{"none", "none", ""},
		{"prefix-all", "prefix-all", ""},
		{"bicache-recompute", "bicache", "recompute"},
		{"bicache-request", "bicache", "request"},
		{"bicache-elastic", "bicache-elastic", "request"},
		{"d2cache", "d2cache", ""},
		{"dllm-cache", "dllm-cache", ""},
		{"freecache", "freecache", ""},
	} {
		b.Run(tc.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				opts := DefaultOptions()
				opts.Store, opts.Table, opts.DeepSource, opts.Fingerprint = NewStore(m.Backend, 1<<30, FIFO), table(L, 6), DeepSource(tc.source), m.Fingerprint
				meth := mk(b, tc.method, opts)
				if _, err := sample.Generate(context.Background(), m.Network, ids, pl, o, meth.Planner(m.Network, "", nil)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
