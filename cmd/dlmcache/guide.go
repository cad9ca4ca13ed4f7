package main

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/spf13/pflag"

	"github.com/dlmcache/dlmcache/cache"
	"github.com/dlmcache/dlmcache/model/load"
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

// guideProbe is the request whose tokens a guide and its model must
// agree on: their vocabularies and chat templates frame it alike.
var guideProbe = [2]string{"You are a helpful assistant. Ünïcödé, 2+2=4.", "What is in the attic at night?"}

// loadGuide loads --guide name for lm (on lm's device and threads) and
// refuses a guide that is not autoregressive or reads other token ids:
// another vocabulary size, chat template, end-of-text token or encoding
// of a probe request.
func loadGuide(f *factory, name string, lm *loadedModel, mf modelFlags) (*loadedModel, error) {
	if lm.Config.Causal {
		return nil, fmt.Errorf("--guide %s: model %s is autoregressive itself; a guide checks a diffusion model's proposals", name, lm.Name)
	}
	g, err := loadModel(f, name, mf.Device, mf.Threads)
	if err != nil {
		return nil, fmt.Errorf("--guide: %w", err)
	}
	if err := checkGuide(g, lm); err != nil {
		g.Close()
		return nil, fmt.Errorf("--guide %s: %w", name, err)
	}
	return g, nil
}

// checkGuide says why g cannot guide lm (nil when it can).
func checkGuide(g, lm *loadedModel) error {
	gc, c := g.Config, lm.Config
	switch {
	case !gc.Causal:
		return fmt.Errorf("architecture %s is not an autoregressive LM (the guide must be a causal LM: Qwen2ForCausalLM, LlamaForCausalLM)", gc.ArchName())
	case gc.VocabSize != c.VocabSize:
		return fmt.Errorf("its vocabulary has %d tokens, model %s's %d: the guide reads the model's token ids, so they must share a vocabulary", gc.VocabSize, lm.Name, c.VocabSize)
	case gc.EOSTokenID != c.EOSTokenID:
		return fmt.Errorf("its end-of-text token is id %d, model %s's %d: they must share a vocabulary", gc.EOSTokenID, lm.Name, c.EOSTokenID)
	}
	if g.Tokenizer == nil || lm.Tokenizer == nil {
		return fmt.Errorf("the guide and model %s must both carry a tokenizer to compare", lm.Name)
	}
	if a, b := g.Tokenizer.ChatTemplate(), lm.Tokenizer.ChatTemplate(); a != b {
		return fmt.Errorf("its chat template differs from model %s's (tokenizer_config.json's chat_template): the guide reads the model's prompt as it is framed", lm.Name)
	}
	if a, b := g.Tokenizer.VocabSize(), lm.Tokenizer.VocabSize(); a != b {
		return fmt.Errorf("its tokenizer has %d tokens, model %s's %d: they must share a vocabulary", a, lm.Name, b)
	}
	a, _, err1 := g.Tokenizer.EncodeChat(guideProbe[0], guideProbe[1])
	b, _, err2 := lm.Tokenizer.EncodeChat(guideProbe[0], guideProbe[1])
	if err1 != nil || err2 != nil || !slices.Equal(a, b) {
		return fmt.Errorf("its tokenizer encodes a chat request differently from model %s's: they must share a vocabulary and chat template", lm.Name)
	}
	return nil
}

// guideRecord is what a guided generation's record says of the guide
// and its work (nil without a guide).
func guideRecord(g *loadedModel, s sample.GuideStats) map[string]any {
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
func guidedLine(g *loadedModel, d sample.Decoding) string {
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
func guideUsed(c *cacheFlags, es []*profile.Evaluator) error {
	if c.guide == nil {
		return nil
	}
	for _, e := range es {
		if sample.DecodingOf(e.Gen).Guided() {
			return nil
		}
	}
	return fmt.Errorf("--guide %s: no method decodes with the guided decoder (name one as NAME@guided, or give --decoder guided)", c.Guide)
}

// decodesGuided reports whether meth decodes with the guided decoder
// under gen, or, for a table's method, whether any of its choices does.
func decodesGuided(meth cache.Method, gen sample.GenOptions) bool {
	if sample.DecodingOf(meth.Gen(gen)).Guided() {
		return true
	}
	if t := cache.TableOf(meth); t != nil && t.Chooses() {
		for _, b := range t.Bins {
			for _, c := range b.Choices {
				if d, err := sample.ParseDecoding(c.Setting.Decoder); err == nil && d.Guided() {
					return true
				}
			}
		}
	}
	return false
}

// guideStoreBlocks is the guide's block store's block length when
// --store-blocks is 0 (the diffusion model's store then keeps whole
// prefixes; the guide's is a block store whatever the flag).
const guideStoreBlocks = 16

// servedGuide is serve's guide: --guide's model (loadMethodEnv loaded and
// checked it) when meth decodes guided, refused when nothing does, and
// the guide's prefix store: a block store of its own (--store-blocks N
// tokens a block, guideStoreBlocks for 0) within --cache-bytes, off with
// --cache-bytes 0. note describes both for the start-up lines.
func servedGuide(c *cacheFlags, meth cache.Method, gen sample.GenOptions) (*load.Model, *cache.BlockStore, string, error) {
	g := c.guide
	if g == nil {
		return nil, nil, "", nil
	}
	if !decodesGuided(meth, gen) {
		return nil, nil, "", fmt.Errorf("--guide %s: method %s does not decode with the guided decoder (serve NAME@guided, give --decoder guided, or a table that chooses guided settings)", c.Guide, meth.Name())
	}
	note := fmt.Sprintf("guide %s (%s, %s): verifies the guided methods' proposals, %d a forward, its forwards batched as the model's", g.Name, g.Config.ArchName(), g.Fingerprint, sample.GuideChunk)
	st, stNote := guidePrefixStore(c, g)
	return g.Model, st, note + "; " + stNote, nil
}

// guidePrefixStore is the guide's prefix store as serve builds it: a
// block store of its own (--store-blocks N tokens a block,
// guideStoreBlocks for 0) within --cache-bytes, nil with --cache-bytes 0;
// note says which.
func guidePrefixStore(c *cacheFlags, g *loadedModel) (*cache.BlockStore, string) {
	if c.CacheBytes <= 0 {
		return nil, "no guide prefix store (--cache-bytes 0)"
	}
	B := cmp.Or(c.StoreBlocks, guideStoreBlocks)
	st := cache.NewBlockStore(g.Backend, B, c.CacheBytes, true, nil)
	return st, fmt.Sprintf("its shared prefixes from a block store of its own (%d-token blocks, %d bytes: exact at every layer)", B, c.CacheBytes)
}
