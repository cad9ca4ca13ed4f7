package cache

import (
	"context"
	"testing"

	"github.com/dlmcache/dlmcache/datasets"
	"github.com/dlmcache/dlmcache/model/load"
	"github.com/dlmcache/dlmcache/model/sample"
	"github.com/dlmcache/dlmcache/regime"
)

// BenchmarkExactBlock times the shared-system workload of `bench
// --questions-per-system 4` on the bundled block-causal model: five system
// messages, four questions each, none against exact-block with a block
// store of the model's block (fresh each iteration, so each system
// message's first request fills it). Compare the rows' ns/op, not absolute
// times: docs/results.md has the measured ratios.
func BenchmarkExactBlock(b *testing.B) { benchBundled(b, "llada-tiny-block", benchExactBlock) }

func benchExactBlock(b *testing.B, m *load.Model) {
	samples, err := datasets.Shared(datasets.Generate("lookup", datasets.Eval, 1, 20, datasets.DefaultOptions()), 4)
	if err != nil {
		b.Fatal(err)
	}
	type req struct {
		ids []int32
		pl  int
	}
	var reqs []req
	for _, s := range samples {
		ids, pl, err := m.Tokenizer.EncodeChat(s.System, s.User)
		if err != nil {
			b.Fatal(err)
		}
		reqs = append(reqs, req{ids, pl})
	}
	B := m.Config.CausalBlock()
	o := sample.GenOptions{Regime: regime.Regime{GenLength: 128, Steps: 128, BlockLength: B}, Decoder: sample.Threshold{T: 0.95}}
	for _, name := range []string{"none", "exact-block"} {
		b.Run(name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				opts := DefaultOptions()
				opts.Store, opts.Fingerprint = NewBlockStore(m.Backend, B, 1<<30, true, nil), m.Fingerprint
				meth := mk(b, name, opts)
				for _, r := range reqs {
					if _, err := Run(context.Background(), m.Network, meth, Request{Prompt: r.ids, PrefixLen: r.pl}, o); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
