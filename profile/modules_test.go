package profile

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/dlmcache/dlmcache/datasets"
	"github.com/dlmcache/dlmcache/internal/testmodel"
	"github.com/dlmcache/dlmcache/model/sample"
	"github.com/dlmcache/dlmcache/regime"
)

// A sample's modules re-form its prompt text; the sweep's contiguous layout
// at depth 0 is the whole request (every answer agrees), every point counts
// every sample, and reuse computes fewer rows.
func TestModuleSweep(t *testing.T) {
	m := testmodel.Load(t, "tiny-f32")
	samples, err := SuiteSamples([]string{"lookup", "sequence"}, 2, 1, datasets.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	names, parts, rest, err := SampleModules(m, samples[0])
	if err != nil {
		t.Fatal(err)
	}
	ids, pl, _ := m.Tokenizer.EncodeChat(samples[0].System, samples[0].User)
	var text strings.Builder
	for _, p := range parts {
		text.WriteString(m.Tokenizer.Decode(p))
	}
	if text.String() != m.Tokenizer.Decode(ids[:pl]) || !slices.Equal(rest, ids[pl:]) {
		t.Errorf("modules %v do not re-form the prompt", names)
	}
	if len(names) < 3 || names[0] != "head" {
		t.Errorf("modules %v: want the head and at least two paragraphs", names)
	}
	ticks := 0
	gen := sample.GenOptions{Regime: regime.Regime{GenLength: 8, Steps: 4}}
	L := len(m.Blocks)
	res, err := ModuleSweep(context.Background(), m, samples, []int{0, 1, L}, 1, gen, func() { ticks++ })
	if err != nil {
		t.Fatal(err)
	}
	if res.N != len(samples) || ticks != len(samples)*(1+2*3) || len(res.Points) != 6 {
		t.Fatalf("n %d, %d ticks, %d points", res.N, ticks, len(res.Points))
	}
	for _, p := range res.Points {
		if p.N != len(samples) {
			t.Errorf("%+v: n", p)
		}
		if p.Layout == "contiguous" && p.Depth == 0 && p.Agree != p.N {
			t.Errorf("%+v: depth 0 of the contiguous layout disagrees with the whole request", p)
		}
		if p.Depth > 0 && p.RowsComputed >= p.RowsFull {
			t.Errorf("%+v: nothing reused", p)
		}
	}
	if _, err := ModuleSweep(context.Background(), m, samples, []int{L + 1}, 1, gen, nil); err == nil {
		t.Error("depth past the last layer accepted")
	}
}
