package engine

import (
	"fmt"
	"strings"
	"testing"

	"github.com/dlmcache/dlmcache/lut"
	"github.com/dlmcache/dlmcache/model"
	"github.com/dlmcache/dlmcache/model/load"
	"github.com/dlmcache/dlmcache/model/sample"
	"github.com/dlmcache/dlmcache/regime"
)

// TestGenOptionsDefaultToTheCardsRegime: every command resolves zero flags through
// GenOptions, so the card's regime is the default, and --gen-length alone
// (a length other than the card's) gives gen/2 steps in one block: the
// one-flag way back to the 16-slot regime from a long-regime card.
func TestGenOptionsDefaultToTheCardsRegime(t *testing.T) {
	short := load.Card{Regime: regime.Regime{GenLength: 16, Steps: 8, BlockLength: 16}}
	long := load.Card{Regime: regime.Regime{GenLength: 128, Steps: 64, BlockLength: 32}}
	tests := []struct {
		name                          string
		card                          load.Card
		gen, steps, block             int
		wantGen, wantSteps, wantBlock int
	}{
		{"short card, no flags", short, 0, 0, 0, 16, 8, 16},
		{"long card, no flags", long, 0, 0, 0, 128, 64, 32},
		{"long card, --gen-length 16", long, 16, 0, 0, 16, 8, 16},
		{"short card, long regime flags", short, 128, 64, 32, 128, 64, 32},
		{"short card, paper setting", short, 256, 128, 32, 256, 128, 32},
		{"long card, --gen-length 128 is the card's", long, 128, 0, 0, 128, 64, 32},
		{"long card, --steps only", long, 0, 32, 0, 128, 32, 32},
		{"short card, --gen-length 64", short, 64, 0, 0, 64, 32, 64},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			lm := &Model{Model: &load.Model{Card: tc.card}}
			o, err := lm.GenOptions(regime.Regime{GenLength: tc.gen, Steps: tc.steps, BlockLength: tc.block})
			if err != nil {
				t.Fatal(err)
			}
			if o.GenLength != tc.wantGen || o.Steps != tc.wantSteps || o.BlockLength != tc.wantBlock {
				t.Errorf("got gen %d steps %d block %d, want %d %d %d", o.GenLength, o.Steps, o.BlockLength, tc.wantGen, tc.wantSteps, tc.wantBlock)
			}
		})
	}
	lm := &Model{Model: &load.Model{Card: long}}
	if _, err := lm.GenOptions(regime.Regime{BlockLength: 48}); err == nil {
		t.Error("block 48 does not divide 128: want an error")
	}
}

// TestBlockCausalModelsDecodeInTheirOwnBlocks: a block-causal model decodes in its own
// blocks with one step per slot at most and threshold decoding at the
// public default unless flags say otherwise, and its regime line says so.
func TestBlockCausalModelsDecodeInTheirOwnBlocks(t *testing.T) {
	cfg := &model.Config{BlockCausal: true, BlockSize: 8}
	lm := &Model{Model: &load.Model{Card: load.Card{Regime: regime.Regime{GenLength: 32, Steps: 32, BlockLength: 8}}, Network: &model.Network{Config: cfg}}, Name: "b"}
	o, err := lm.GenOptions(regime.Regime{})
	if err != nil {
		t.Fatal(err)
	}
	if o.GenLength != 32 || o.Steps != 32 || o.BlockLength != 8 || o.Decoder != (sample.Threshold{T: sample.DefaultBlockThreshold}) {
		t.Errorf("defaults %+v", o)
	}
	if o, err = lm.GenOptions(regime.Regime{GenLength: 20}); err != nil || o.Steps != 20 || o.BlockLength != 8 {
		t.Errorf("--gen-length 20: %+v, %v", o, err)
	}
	if _, err := lm.GenOptions(regime.Regime{GenLength: 32, BlockLength: 16}); err == nil {
		t.Error("--block-length 16 on a model with blocks of 8: no error")
	}
	if line := lm.RegimeLine(o); !strings.Contains(line, "block-causal (blocks of 8)") || !strings.Contains(line, "threshold 0.95") {
		t.Errorf("regime line %q", line)
	}
}

// The bicache methods warn before reusing the store's prefix K/V across
// requests at depths from the whole-prefix cosine, and only then.
func TestCosineDepthsAcrossRequestsWarn(t *testing.T) {
	kv, old, rowMin := &lut.Table{Similarity: "kv"}, &lut.Table{}, &lut.Table{Similarity: "kv-row-min"}
	calibrated := &lut.Table{Bins: []lut.Bin{{Lo: 0, Hi: 1, Count: 3, MeanDepth: 6,
		Calibrated: map[string]*lut.BinCalibration{"store": {Depth: 2}}}},
		Calibration: &lut.Calibration{Sources: []string{"store"}}}
	if w := crossRequestWarning("store", calibrated); w != "" {
		t.Errorf("a table calibrated for the store source: warning %q", w)
	}
	for _, tc := range []struct {
		source string
		table  *lut.Table
		warn   bool
	}{
		{"request", kv, false},
		{"store", kv, true},
		{"recompute", kv, true},
		{"recompute", old, true}, // written before tables named their statistic: kv
		{"store", rowMin, false},
		{"recompute", rowMin, false},
		{"store", nil, false},
	} {
		w := crossRequestWarning(tc.source, tc.table)
		if (w != "") != tc.warn || tc.warn && !strings.Contains(w, "--similarity kv-row-min") {
			t.Errorf("%s with %+v: warning %q, want one: %v", tc.source, tc.table, w, tc.warn)
		}
	}
}

// --store-blocks below MinStoreBlocks is refused, naming the flag (the
// causal fill runs one forward per block).
func TestStoreBlocksFloor(t *testing.T) {
	for _, n := range []int{1, 4, 7} {
		_, err := NewStore(nil, StoreConfig{Eviction: "fifo", Fill: "causal", Blocks: n}, nil)
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("--store-blocks %d", n)) || !strings.Contains(err.Error(), "at least 8") {
			t.Errorf("--store-blocks %d: %v", n, err)
		}
	}
}
