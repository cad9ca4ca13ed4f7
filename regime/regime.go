package regime

import "fmt"

// Regime is a generation regime. A zero field is one not chosen yet (a
// command's flag left 0: the model's default) or not known (a v1 table's
// block length); the sampler reads a zero block length as one block.
//
// Its JSON keys are gen_length, steps and block_length; block_length is
// left out when 0 (unknown), as the model card and the table have always
// written it.
type Regime struct {
	GenLength   int `json:"gen_length"`             // masked answer slots appended to the prompt
	Steps       int `json:"steps"`                  // denoising steps in all (a cap with threshold decoding)
	BlockLength int `json:"block_length,omitempty"` // semi-autoregressive block length; 0: GenLength (one block)
}

// Text states r for people: "gen length 128, 64 steps, blocks of 32". It
// is not String: a struct embedding Regime would print as its regime
// alone.
func (r Regime) Text() string {
	return fmt.Sprintf("gen length %d, %d steps, blocks of %d", r.GenLength, r.Steps, r.BlockLength)
}

// Short is r as gen length/steps/block length: "128/64/32".
func (r Regime) Short() string {
	return fmt.Sprintf("%d/%d/%d", r.GenLength, r.Steps, r.BlockLength)
}

// Known reports whether every field of r is set (positive).
func (r Regime) Known() bool {
	return r.GenLength > 0 && r.Steps > 0 && r.BlockLength > 0
}

// Blocks is the number of semi-autoregressive blocks, GenLength /
// BlockLength (one with a block length of 0).
func (r Regime) Blocks() int {
	if r.BlockLength == 0 {
		return 1
	}
	return r.GenLength / r.BlockLength
}
