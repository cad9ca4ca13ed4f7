package cache

import (
	"fmt"

	"github.com/dlmcache/dlmcache/model"
	"github.com/dlmcache/dlmcache/model/backend"
	"github.com/dlmcache/dlmcache/model/sample"
)

// GuidePrefix is the guided decoder's cross-request prefix cache
// (sample.GenOptions.GuidePrefix) on block store bs: the guide's shared
// prefix is looked up as the block chain of (fingerprint, salt, its
// tokens), the missing full blocks computed and stored (BlockStore.get:
// single flight, counted in the store's Stats), and every layer's K/V of
// the chain's rows copied into the guide's own cache. The guide is an
// autoregressive model, so a block's K/V depend on it and the blocks
// before it alone: reuse is exact at every layer, whatever request
// stored the block. The prefix's partial last block is not stored (the
// guide's prefill computes it). bs must be the guide's store alone (its
// K/V are the guide's shape, not the diffusion model's).
func GuidePrefix(bs *BlockStore, fingerprint, salt string) sample.GuidePrefixFunc {
	return func(guide *model.Network, tokens []int32, k, v []backend.Tensor) (int, int, int, error) {
		if !guide.Config.Causal {
			return 0, 0, 0, fmt.Errorf("cache: the guide's prefix store holds an autoregressive model's K/V; %s is not one", guide.Config.ArchName())
		}
		id := PrefixID{Fingerprint: fingerprint, Salt: salt, Tokens: tokens}
		chain, hit, rows, _, err := bs.get(guide, id, true)
		if err != nil {
			return 0, 0, 0, err
		}
		defer bs.releaseNodes(chain)
		B := bs.BlockSize()
		for i, n := range chain {
			dst := iota32(i*B, (i+1)*B)
			for l := range k {
				bs.b.CopyRows(k[l], dst, n.k[l], nil)
				bs.b.CopyRows(v[l], dst, n.v[l], nil)
			}
		}
		return len(chain) * B, hit, rows, nil
	}
}
