package cache

import (
	"github.com/dlmcache/dlmcache/model"
)

// blockKnobs: the block length the dual cache decodes in.
var blockKnobs = []Knob{
	intKnob("block-length", "block length in tokens when the regime has one block", 1, func(o *Options, n int) { o.BlockLength = n }),
}

// blockGrid: the dual cache at its paper's threshold.
var blockGrid = []GridPoint{{Decoders: []string{"threshold:0.9"}}}

// block is Fast-dLLM's dual cache: each block starts with a full forward
// whose K/V are kept; the block's other steps compute only the block's
// rows and read every other row's K/V from the kept ones. It decodes with
// Fast-dLLM's threshold rule.
type block struct{ base }

func newBlock(o Options) (Method, error) { return &block{base{"block", o}}, nil }

func (m *block) Gen(o model.GenOptions) model.GenOptions {
	o = blocked(o, m.o.BlockLength)
	o.Decoder = model.Threshold{T: m.o.Threshold}
	return o
}

func (m *block) Planner(lm *model.LLaDA, _ string, _ *Info) model.Planner {
	return &blockPlanner{tokenPlan{lm: lm}}
}

// blockPlanner: a block start computes every row, the block's other steps
// its rows.
type blockPlanner struct{ tokenPlan }

func (p *blockPlanner) Begin(r *model.Request) error {
	p.begin(r)
	return nil
}

func (p *blockPlanner) Plan(s *model.Step) model.Plan {
	p.all = s.BlockStep == 0
	p.rows = iota32(s.BlockStart, s.BlockEnd)
	return p
}
