package sample

import (
	"context"
	"fmt"
	"testing"

	"github.com/dlmcache/dlmcache/model/cpu"
)

func TestGenerateGolden(t *testing.T) {
	for _, fx := range fixtures {
		for lib, be := range goldenBackends(t) {
			if fx == "tiny-bf16" && be.BF16Activations() {
				// Random weights leave near-ties among the logits that
				// BF16 activations flip (one slot of 39 when this was
				// written); TestBF16Weights checks oneDNN's BF16 answers
				// on the bundled model instead.
				continue
			}
			t.Run(fx+"/"+lib, func(t *testing.T) { testGenerateGolden(t, fx, be) })
		}
	}
}

func testGenerateGolden(t *testing.T, fx string, be *cpu.Backend) {
	{
		{
			m, g, _ := loadFixtureOn(t, fx, be)
			for _, gc := range g.Generate {
				res, err := Generate(context.Background(), m.Network, gc.PromptIDs, 0,
					GenOptions{Regime: gc.Regime}, nil)
				if err != nil {
					t.Fatal(err)
				}
				if fmt.Sprint(res.Canvas) != fmt.Sprint(gc.OutputIDs) {
					t.Errorf("%s:\n got %v\nwant %v", gc.Name, res.Canvas, gc.OutputIDs)
				}
				if res.NFE != gc.Steps {
					t.Errorf("%s: NFE %d, want %d", gc.Name, res.NFE, gc.Steps)
				}
			}
		}
	}
}
