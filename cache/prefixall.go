package cache

import (
	"errors"

	"github.com/dlmcache/dlmcache/model"
	"github.com/dlmcache/dlmcache/model/sample"
)

// prefixAll reuses the stored prefix K/V at every layer and every step and
// never recomputes them: what an autoregressive server's prefix cache does,
// and the upper bound on what prefix reuse saves.
type prefixAll struct{ base }

func newPrefixAll(o Options) (Method, error) {
	if o.Store == nil {
		return nil, errors.New("needs a prefix store")
	}
	return &prefixAll{base{"prefix-all", o}}, nil
}

func (m *prefixAll) Store() PrefixStore { return m.o.Store }

func (m *prefixAll) Planner(lm *model.Network, salt string, info *Info) sample.Planner {
	if info == nil {
		info = &Info{}
	}
	L := len(lm.Blocks)
	return &shallow{lm: lm, b: lm.Backend, L: L, store: m.o.Store, src: SourceStore,
		id: PrefixID{Fingerprint: m.o.Fingerprint, Salt: joinSalt(m.o.Salt, salt)}, info: info,
		depth: func(float64) (int, bool) { return L, false }}
}

// CheckModel refuses block-causal models (wholeCanvas).
func (m *prefixAll) CheckModel(c *model.Config) error { return wholeCanvas(m.name, c) }
