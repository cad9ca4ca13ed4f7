package cache

import (
	"fmt"

	"github.com/spf13/pflag"

	"github.com/dlmcache/dlmcache/model"
	"github.com/dlmcache/dlmcache/model/sample"
)

// FreeOptions are FreeCache's settings (its block length is
// BlockOptions.Length).
type FreeOptions struct {
	// Refresh, if > 0, makes FreeCache run a full forward every that many
	// steps (1: every step, as none).
	Refresh int
}

// freeFlags are FreeCache's flags: the full-forward period and the block
// length.
func freeFlags(fl *pflag.FlagSet, o *Options) {
	fl.IntVar(&o.Free.Refresh, "free-refresh", 0, "freecache: a full forward every N steps (0: only the first)")
	blockLengthFlag(fl, o)
}

// freeKnobs: the full-forward period and the block length.
var freeKnobs = []Knob{
	intKnob("free-refresh", "a full forward every N steps (0: only the first)", 0, func(o *Options, n int) { o.Free.Refresh = n }),
	intKnob("block-length", "block length in tokens when the regime has one block", 1, func(o *Options, n int) { o.Block.Length = n }),
}

// freeCache is FlashDLM's FreeCache: after a full first step, the prompt
// and every finished block of the answer are frozen — their K/V are
// reused — and each step computes only the current block and everything
// after it (the window shrinks as blocks finish). A finished block keeps
// the K/V of its last denoising step, as the authors' code saves its cache
// there (src/model/llada_v2/generate.py: save_cache at a block's last step,
// clean up to the block's end): the tokens that step commits keep the K/V
// their rows had while masked, and the next block's first step already
// starts at its own start. With FreeRefresh R > 0 every R-th step is a full
// forward (R = 1: as none).
type freeCache struct{ base }

func newFreeCache(o Options) (Method, error) {
	if o.Free.Refresh < 0 {
		return nil, fmt.Errorf("full-forward period (--free-refresh) must be ≥ 0, got %d", o.Free.Refresh)
	}
	return &freeCache{base{"freecache", o}}, nil
}

// Gen decodes in blocks (FreeCache freezes finished blocks) with the
// schedule's own decoder.
func (m *freeCache) Gen(o sample.GenOptions) sample.GenOptions { return blocked(o, m.o.Block.Length) }

func (m *freeCache) Planner(lm *model.Network, _ string, _ *Info) sample.Planner {
	return &freePlanner{tokenPlan: tokenPlan{lm: lm}, refresh: m.o.Free.Refresh}
}

// freePlanner: the window is the current block and everything after it.
type freePlanner struct {
	tokenPlan
	refresh int
	n       int
}

func (p *freePlanner) Begin(r *sample.Request) error {
	p.n = len(r.Canvas)
	p.begin(r)
	return nil
}

func (p *freePlanner) Plan(s *sample.Step) model.Plan {
	p.all = s.Index == 0 || p.refresh > 0 && s.Index%p.refresh == 0
	p.compute(s, iota32(s.BlockStart, p.n))
	return p
}

// CheckModel refuses block-causal models (wholeCanvas).
func (m *freeCache) CheckModel(c *model.Config) error { return wholeCanvas(m.name, c) }
