package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dlmcache/dlmcache/lut"
	"github.com/dlmcache/dlmcache/profile"
)

// plot pareto draws a calibrated table (one panel per bin and class, every
// setting tried, the choice marked) and a bench.json with NAME@DECODER and
// table rows; a table without choices is refused with the command that
// draws it.
func TestPlotParetoReadsCalibratedTablesAndBench(t *testing.T) {
	dir := t.TempDir()
	thr := lut.Setting{Method: "none", Decoder: "threshold:0.9"}
	bic := lut.Setting{Method: "bicache", Decoder: "threshold:0.9", Knobs: map[string]float64{"depth": 1}, Source: "store"}
	tab := &lut.Table{Format: lut.Format, Model: lut.ModelID{Name: "m", NLayers: 2, Fingerprint: "f"}, Tau: 1,
		Classes: []lut.Class{{Name: "short", MaxGen: 8}, {Name: "long"}},
		Bins: []lut.Bin{{Lo: 0, Hi: 1, Choices: []*lut.Choice{
			{Class: "short", Setting: thr, Samples: 4, Agreement: 1, LowerBound: 0.7, SpeedUp: 9,
				Tried: []lut.Point{{Setting: thr, Requests: 4, Answers: 4, SpeedUp: 9, Passed: true},
					{Setting: bic, Requests: 2, Answers: 1, SpeedUp: 12, Stopped: "bound"}}},
			{Class: "long", Setting: bic, Samples: 4, Agreement: 1, LowerBound: 0.7, SpeedUp: 11,
				Tried: []lut.Point{{Setting: thr, Requests: 4, Answers: 4, SpeedUp: 10, Passed: true},
					{Setting: bic, Requests: 4, Answers: 4, SpeedUp: 11, Passed: true}}},
		}}}}
	table := filepath.Join(dir, "table.json")
	if err := tab.Write(table); err != nil {
		t.Fatal(err)
	}
	svg := filepath.Join(dir, "t.svg")
	if _, errOut, code := run(t, "plot", "pareto", table, "-o", svg); code != 0 {
		t.Fatalf("table: exit %d: %s", code, errOut)
	}
	b, err := os.ReadFile(svg)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"short answers", "long answers", "(chosen)", "(bound, 2/4)"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("figure lacks %q", want)
		}
	}
	old := filepath.Join(dir, "v2.json")
	v2 := &lut.Table{Format: lut.Format, Model: tab.Model, Tau: 0.97, Bins: []lut.Bin{{Lo: 0, Hi: 1, MeanDepth: 1, Min: 1, Count: 4}}}
	if err := v2.Write(old); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := run(t, "plot", "pareto", old, "-o", svg); code == 0 || !strings.Contains(errOut, "plot depth") {
		t.Errorf("v2 table: exit %d: %s", code, errOut)
	}
	rows := []profile.SuiteResult{
		{Method: "none", Suite: "average", N: 4, Correct: 4, Accuracy: 1, TokensPerSec: 10},
		{Method: "none@threshold:0.9", Suite: "average", N: 4, Correct: 4, Accuracy: 1, TokensPerSec: 100},
		{Method: "table", Suite: "average", N: 4, Correct: 4, Accuracy: 1, TokensPerSec: 120},
	}
	raw, _ := json.Marshal(map[string]any{"model": "m", "gen_length": 8, "steps": 4, "results": rows})
	bench := filepath.Join(dir, "bench.json")
	os.WriteFile(bench, raw, 0o644)
	if _, errOut, code := run(t, "plot", "pareto", bench, "-o", svg); code != 0 {
		t.Fatalf("bench: exit %d: %s", code, errOut)
	}
	if b, _ := os.ReadFile(svg); !strings.Contains(string(b), "none@threshold:0.9") || !strings.Contains(string(b), "table") {
		t.Errorf("bench figure lacks its methods")
	}
}
