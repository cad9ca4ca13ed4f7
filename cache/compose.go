package cache

import (
	"github.com/dlmcache/dlmcache/lut"
	"github.com/dlmcache/dlmcache/model"
	"github.com/dlmcache/dlmcache/model/sample"
)

// withBiCache is BiCache's shallow prefix reuse wrapped around another
// method: layers 1..d (from the table) take the prefix rows' K/V from the
// store or the request's first step, and the inner method steers every
// other row and layer — its own refreshes (block starts, full steps) are
// where the deep layers refresh. The inner method's generation options
// apply.
type withBiCache struct {
	base
	inner Method
}

// composed returns the constructor of bicache+inner.
func composed(inner func(Options) (Method, error)) func(Options) (Method, error) {
	return func(o Options) (Method, error) {
		if err := checkTable(o); err != nil {
			return nil, err
		}
		in, err := inner(o)
		if err != nil {
			return nil, err
		}
		return &withBiCache{base{"bicache+" + in.Name(), o}, in}, nil
	}
}

func (m *withBiCache) Store() PrefixStore                        { return m.o.Store }
func (m *withBiCache) Table() *lut.Table                         { return m.o.Table }
func (m *withBiCache) Source() string                            { return string(source(m.o.DeepSource)) }
func (m *withBiCache) Gen(o sample.GenOptions) sample.GenOptions { return m.inner.Gen(o) }

func (m *withBiCache) Planner(lm *model.Network, salt string, info *Info) sample.Planner {
	return tableWrapper(m.o, lm, salt, info, m.inner.Planner(lm, salt, nil))
}

// CheckModel: bicache's shallow reuse around any inner method is planned
// over the whole canvas.
func (m *withBiCache) CheckModel(c *model.Config) error { return wholeCanvas(m.name, c) }
