package load

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/dlmcache/dlmcache/regime"
)

// CardFile is the optional file in a model directory that carries
// dlmcache's defaults for the model.
const CardFile = "dlmcache.json"

// Card holds a model's generation defaults and demo request. A directory
// without dlmcache.json gets the paper's LLaDA-8B defaults.
type Card struct {
	regime.Regime // gen_length, steps, block_length (omitted when 0)
	// Refresh is BiCache's deep-layer refresh period R for this model in
	// its regime (0: the paper's 16), what --refresh 0 means.
	Refresh       int    `json:"refresh,omitempty"`
	DemoSystem    string `json:"demo_system,omitempty"`
	DemoPrompt    string `json:"demo_prompt,omitempty"`
	RandomWeights bool   `json:"random_weights,omitempty"`
}

// DefaultCard is the paper's setting for LLaDA-8B-Instruct: 256 answer
// slots, 128 steps (two tokens per step), blocks of 32.
var DefaultCard = Card{Regime: regime.Regime{GenLength: 256, Steps: 128, BlockLength: 32}}

// forBlocks checks a block-causal model's card (blocks of B; B = 0: a
// bidirectional model, any card): its block length is B or absent (then
// B). A directory without a card gets DefaultCard's gen length with one
// step per slot at most in blocks of B, the public block-diffusion
// defaults.
func (c Card) forBlocks(B int) (Card, error) {
	switch {
	case B == 0:
		return c, nil
	case c == DefaultCard:
		c.Steps, c.BlockLength = c.GenLength, B
	case c.BlockLength == 0:
		c.BlockLength = B
	case c.BlockLength != B:
		return c, fmt.Errorf("block_length %d: the model is block-causal with blocks of %d (block_size in config.json)", c.BlockLength, B)
	}
	return c, nil
}

// forCausal is a causal LM's card: one token per step, in blocks of one
// (an autoregressive decoder takes only the gen length from it).
func (c Card) forCausal() Card {
	c.Steps, c.BlockLength = c.GenLength, 1
	return c
}

// DefaultRefresh is the paper's refresh period R, for a card without one.
const DefaultRefresh = 16

// RefreshOr is r when positive, else the card's refresh period, else
// DefaultRefresh.
func (c Card) RefreshOr(r int) int {
	switch {
	case r > 0:
		return r
	case c.Refresh > 0:
		return c.Refresh
	}
	return DefaultRefresh
}

func readCard(dir string) (Card, error) {
	p := filepath.Join(dir, CardFile)
	raw, err := readOptional(p)
	if err != nil {
		return Card{}, err
	}
	if raw == nil {
		return DefaultCard, nil
	}
	return parseCard(raw, p)
}

// parseCard decodes the bytes of a dlmcache.json; where names them in
// errors.
func parseCard(raw []byte, where string) (Card, error) {
	var c Card
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return Card{}, fmt.Errorf("%s: %w", where, err)
	}
	if c.GenLength <= 0 || c.Steps <= 0 {
		return Card{}, fmt.Errorf("%s: gen_length and steps must be positive", where)
	}
	if c.Refresh < 0 {
		return Card{}, fmt.Errorf("%s: refresh must be positive (or absent), got %d", where, c.Refresh)
	}
	return c, nil
}

// AnswerText decodes answer slots up to the first end-of-text, end-of-turn
// or mask token.
func (m *Model) AnswerText(ids []int32) string {
	return m.Tokenizer.Decode(ids[:m.AnswerEnd(ids)])
}

// AnswerEnd is the index of the answer's first end-of-text, end-of-turn or
// mask token (a diffusion model's) (len(ids) when it has none).
func (m *Model) AnswerEnd(ids []int32) int {
	stop := map[int32]bool{int32(m.Config.EOSTokenID): true}
	if !m.Config.Causal { // a causal LM has no mask token (MaskTokenID may be any token)
		stop[int32(m.Config.MaskTokenID)] = true
	}
	for _, s := range []string{"<|endoftext|>", "<|eot_id|>"} {
		if id, ok := m.Tokenizer.TokenID(s); ok {
			stop[id] = true
		}
	}
	for i, t := range ids {
		if stop[t] {
			return i
		}
	}
	return len(ids)
}

// readOptional reads one of a model directory's optional files
// (tokenizer_config.json, the card): nil without an error when it is
// absent. An empty file that exists reads as an empty, non-nil slice.
func readOptional(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return b, err
}
