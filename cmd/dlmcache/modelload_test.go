package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dlmcache/dlmcache/lut"
	"github.com/dlmcache/dlmcache/model"
	"github.com/dlmcache/dlmcache/model/load"
	"github.com/dlmcache/dlmcache/model/sample"
	"github.com/dlmcache/dlmcache/profile"
)

// TestGenOptionsDefaultToTheCardsRegime: every command resolves zero flags through
// genOptions, so the card's regime is the default, and --gen-length alone
// (a length other than the card's) gives gen/2 steps in one block: the
// one-flag way back to the 16-slot regime from a long-regime card.
func TestGenOptionsDefaultToTheCardsRegime(t *testing.T) {
	short := load.Card{GenLength: 16, Steps: 8, BlockLength: 16}
	long := load.Card{GenLength: 128, Steps: 64, BlockLength: 32}
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
			lm := &loadedModel{Model: &load.Model{Card: tc.card}}
			o, err := lm.genOptions(tc.gen, tc.steps, tc.block)
			if err != nil {
				t.Fatal(err)
			}
			if o.GenLength != tc.wantGen || o.Steps != tc.wantSteps || o.BlockLength != tc.wantBlock {
				t.Errorf("got gen %d steps %d block %d, want %d %d %d", o.GenLength, o.Steps, o.BlockLength, tc.wantGen, tc.wantSteps, tc.wantBlock)
			}
		})
	}
	lm := &loadedModel{Model: &load.Model{Card: long}}
	if _, err := lm.genOptions(0, 0, 48); err == nil {
		t.Error("block 48 does not divide 128: want an error")
	}
}

// TestBlockCausalModelsDecodeInTheirOwnBlocks: a block-causal model decodes in its own
// blocks with one step per slot at most and threshold decoding at the
// public default unless flags say otherwise, and its regime line says so.
func TestBlockCausalModelsDecodeInTheirOwnBlocks(t *testing.T) {
	cfg := &model.Config{BlockCausal: true, BlockSize: 8}
	lm := &loadedModel{Model: &load.Model{Card: load.Card{GenLength: 32, Steps: 32, BlockLength: 8}, Network: &model.Network{Config: cfg}}, Name: "b"}
	o, err := lm.genOptions(0, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if o.GenLength != 32 || o.Steps != 32 || o.BlockLength != 8 || o.Decoder != (sample.Threshold{T: sample.DefaultBlockThreshold}) {
		t.Errorf("defaults %+v", o)
	}
	if o, err = lm.genOptions(20, 0, 0); err != nil || o.Steps != 20 || o.BlockLength != 8 {
		t.Errorf("--gen-length 20: %+v, %v", o, err)
	}
	if _, err := lm.genOptions(32, 0, 16); err == nil {
		t.Error("--block-length 16 on a model with blocks of 8: no error")
	}
	if line := lm.regimeLine(o); !strings.Contains(line, "block-causal (blocks of 8)") || !strings.Contains(line, "threshold 0.95") {
		t.Errorf("regime line %q", line)
	}
}

// TestCommandsSayWhichArchitectureLoaded: generate prints the loaded
// model's architecture and records it in its JSON; profile (every command
// through loadRegime) prints it and keeps it in the table it writes.
func TestCommandsSayWhichArchitectureLoaded(t *testing.T) {
	const dream, moe = "../../model/testdata/tiny-dream", "../../model/testdata/tiny-llada-moe"
	if _, errOut, code := run(t, "generate", "--model", dream); code != 0 || !strings.Contains(errOut, "architecture dream,") {
		t.Errorf("generate: exit %d, stderr does not name the architecture:\n%s", code, errOut)
	}
	out, errOut, code := run(t, "generate", "--model", dream, "--json")
	var js struct{ Arch string }
	if err := json.Unmarshal([]byte(out), &js); code != 0 || err != nil || js.Arch != "dream" {
		t.Errorf("generate --json: exit %d, arch %q (%v): %s", code, js.Arch, err, errOut)
	}
	prof := filepath.Join(t.TempDir(), "prof")
	_, errOut, code = run(t, "profile", "--model", moe, "--ratios", "0.3:0.9:0.3", "--per-ratio", "1", "--quiet", "--out", prof,
		"--user-prompts", "50", "--system-prompts", "builtin:assistant,builtin:coder")
	if code != 0 || !strings.Contains(errOut, "architecture llada-moe, 2 layers") || !strings.Contains(errOut, "8 experts (top 2)") {
		t.Fatalf("profile: exit %d, stderr does not describe the model:\n%s", code, errOut)
	}
	tab, err := lut.Read(filepath.Join(prof, profile.TableFile))
	if err != nil {
		t.Fatal(err)
	}
	if tab.Model.Arch != "llada-moe" || !strings.Contains(tab.String(), "(llada-moe, 2 layers") {
		t.Errorf("the table records architecture %q:\n%s", tab.Model.Arch, tab)
	}
}
