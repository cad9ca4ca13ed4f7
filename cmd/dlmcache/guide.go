package main

import (
	"fmt"

	"github.com/spf13/pflag"

	"github.com/dlmcache/dlmcache/engine"
	"github.com/dlmcache/dlmcache/model/sample"
	"github.com/dlmcache/dlmcache/profile"
)

// The guide of the guided decoder (sample.Guided, FlashDLM's guided
// diffusion): an autoregressive LM that checks the diffusion model's
// proposals. generate, eval, bench, calibrate, lut verify and serve take
// it with --guide.

// addGuideFlag declares --guide into p.
func addGuideFlag(fl *pflag.FlagSet, p *string) {
	fl.StringVar(p, "guide", "", "the guided decoder's guide: an autoregressive LM (Qwen2ForCausalLM, LlamaForCausalLM) with the model's vocabulary and chat template, "+
		"as --model names it; it verifies the proposals of --decoder guided (guided:TAU[:K]) or NAME@guided")
}

// guideRecord is what a guided generation's record says of the guide
// and its work (nil without a guide).
func guideRecord(g *engine.Model, s sample.GuideStats) map[string]any {
	if g == nil {
		return nil
	}
	return map[string]any{
		"model":         g.Name,
		"fingerprint":   g.Fingerprint,
		"arch":          g.Config.ArchName(),
		"nfe":           s.NFE,
		"steps":         s.Steps,
		"committed":     s.Committed,
		"accepted":      s.Accepted,
		"kept":          s.Kept,
		"accept_len":    s.AcceptLen(),
		"dlm_seconds":   s.DLMTime.Seconds(),
		"guide_seconds": s.GuideTime.Seconds(),
	}
}

// guidedLine describes guided decoding for the log.
func guidedLine(g *engine.Model, d sample.Decoding) string {
	rule := "a proposal is accepted while it is the guide's argmax"
	if d.T > 0 {
		k := d.K
		if k == 0 {
			k = sample.DefaultGuideTopK
		}
		rule = fmt.Sprintf("a proposal is accepted while it is among the guide's top %d with probability ≥ %g × the top one's", k, d.T)
	}
	if d.Keep > 0 {
		rule += fmt.Sprintf(", or while the diffusion model's own confidence in it is ≥ %g (kept where the guide rejects it)", d.Keep)
	}
	return fmt.Sprintf("decoder %s: guide %s (%s) verifies each block's proposals left to right, %d a forward; %s, then the guide's own token at the first rejection",
		d, g.Name, g.Config.ArchName(), sample.GuideChunk, rule)
}

// guideUsed refuses --guide when no method decodes with the guided
// decoder (NAME@guided or --decoder guided): the guide would be loaded
// for nothing.
func guideUsed(eng *engine.Engine, es []*profile.Evaluator) error {
	if eng.Guide == nil {
		return nil
	}
	for _, e := range es {
		if sample.DecodingOf(e.Gen).Guided() {
			return nil
		}
	}
	return fmt.Errorf("--guide %s: no method decodes with the guided decoder (name one as NAME@guided, or give --decoder guided)", eng.Guide.Name)
}
