package cache

import (
	"github.com/spf13/pflag"

	"github.com/dlmcache/dlmcache/model"
)

// BlockOptions are Fast-dLLM's dual cache's settings; the block length is
// freecache's too.
type BlockOptions struct {
	// Length is the semi-autoregressive block length block methods decode
	// in when the options have one block (0: 32).
	Length int
	// Threshold is Fast-dLLM's confidence threshold.
	Threshold float64
}

// blockFlags are the dual cache's flags.
func blockFlags(fl *pflag.FlagSet, o *Options) {
	fl.Float64Var(&o.Block.Threshold, "block-threshold", DefaultOptions().Block.Threshold, "block methods: Fast-dLLM confidence threshold for parallel decoding")
	blockLengthFlag(fl, o)
}

// blockLengthFlag is the block length of every method that decodes in
// blocks (block, freecache).
func blockLengthFlag(fl *pflag.FlagSet, o *Options) {
	fl.IntVar(&o.Block.Length, "dual-block", DefaultOptions().Block.Length, "block methods (block, freecache and their bicache compositions): block length in tokens when the regime has one block (clamped to a divisor of the gen length)")
}

// blockKnobs: the block length the dual cache decodes in.
var blockKnobs = []Knob{
	intKnob("block-length", "block length in tokens when the regime has one block", 1, func(o *Options, n int) { o.Block.Length = n }),
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
	o = blocked(o, m.o.Block.Length)
	o.Decoder = model.Threshold{T: m.o.Block.Threshold}
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
