package cache

import (
	"fmt"

	"github.com/spf13/pflag"

	"github.com/dlmcache/dlmcache/model"
	"github.com/dlmcache/dlmcache/model/sample"
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
	fl.IntVar(&o.Block.Length, "dual-block", DefaultOptions().Block.Length, "block methods (block, freecache and their bicache compositions): block length in tokens when the regime has one block (clamped to a divisor of the gen length; a block-causal model decodes in its own blocks, so at least its block)")
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

func (m *block) Gen(o sample.GenOptions) sample.GenOptions {
	o = blocked(o, m.o.Block.Length)
	o.Decoder = sample.Threshold{T: m.o.Block.Threshold}
	return o
}

// CheckModel refuses a dual block shorter than a block-causal model's own
// block: such a model decodes in its blocks of B, so the dual block (used
// where the regime is one block, a gen length of at most B) can only be
// the whole answer, and a shorter one would fail every such request.
func (m *block) CheckModel(c *model.Config) error {
	if B := c.CausalBlock(); B > 0 && m.o.Block.Length > 0 && m.o.Block.Length < B {
		return fmt.Errorf("%s: --dual-block %d is shorter than this block-causal model's blocks of %d, in which it decodes: "+
			"use --dual-block %d (or more)", m.name, m.o.Block.Length, B, B)
	}
	return nil
}

func (m *block) Planner(lm *model.Network, _ string, _ *Info) sample.Planner {
	return &blockPlanner{tokenPlan{lm: lm}}
}

// blockPlanner: a block start computes every row, the block's other steps
// its rows.
type blockPlanner struct{ tokenPlan }

func (p *blockPlanner) Begin(r *sample.Request) error {
	p.begin(r)
	return nil
}

func (p *blockPlanner) Plan(s *sample.Step) model.Plan {
	p.all = s.BlockStep == 0
	p.compute(s, iota32(s.BlockStart, s.BlockEnd))
	return p
}
