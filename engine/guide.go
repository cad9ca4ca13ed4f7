package engine

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/dlmcache/dlmcache/cache"
	"github.com/dlmcache/dlmcache/model/sample"
)

// The guide of the guided decoder (sample.Guided, FlashDLM's guided
// diffusion): an autoregressive LM that checks the diffusion model's
// proposals (--guide).

// guideProbe is the request whose tokens a guide and its model must
// agree on: their vocabularies and chat templates frame it alike.
var guideProbe = [2]string{"You are a helpful assistant. Ünïcödé, 2+2=4.", "What is in the attic at night?"}

// LoadGuide loads --guide name for m (on device with threads) and refuses
// a guide that is not autoregressive or reads other token ids: another
// vocabulary size, chat template, end-of-text token or encoding of a
// probe request.
func LoadGuide(name string, m *Model, device string, threads int) (*Model, error) {
	if m.Config.Causal {
		return nil, fmt.Errorf("--guide %s: model %s is autoregressive itself; a guide checks a diffusion model's proposals", name, m.Name)
	}
	g, err := LoadModel(name, device, threads)
	if err != nil {
		return nil, fmt.Errorf("--guide: %w", err)
	}
	if err := CheckGuide(g, m); err != nil {
		g.Close()
		return nil, fmt.Errorf("--guide %s: %w", name, err)
	}
	return g, nil
}

// CheckGuide says why g cannot guide m (nil when it can).
func CheckGuide(g, m *Model) error {
	gc, c := g.Config, m.Config
	switch {
	case !gc.Causal:
		return fmt.Errorf("architecture %s is not an autoregressive LM (the guide must be a causal LM: Qwen2ForCausalLM, LlamaForCausalLM)", gc.ArchName())
	case gc.VocabSize != c.VocabSize:
		return fmt.Errorf("its vocabulary has %d tokens, model %s's %d: the guide reads the model's token ids, so they must share a vocabulary", gc.VocabSize, m.Name, c.VocabSize)
	case gc.EOSTokenID != c.EOSTokenID:
		return fmt.Errorf("its end-of-text token is id %d, model %s's %d: they must share a vocabulary", gc.EOSTokenID, m.Name, c.EOSTokenID)
	}
	if g.Tokenizer == nil || m.Tokenizer == nil {
		return fmt.Errorf("the guide and model %s must both carry a tokenizer to compare", m.Name)
	}
	if a, b := g.Tokenizer.ChatTemplate(), m.Tokenizer.ChatTemplate(); a != b {
		return fmt.Errorf("its chat template differs from model %s's (tokenizer_config.json's chat_template): the guide reads the model's prompt as it is framed", m.Name)
	}
	if a, b := g.Tokenizer.VocabSize(), m.Tokenizer.VocabSize(); a != b {
		return fmt.Errorf("its tokenizer has %d tokens, model %s's %d: they must share a vocabulary", a, m.Name, b)
	}
	a, _, err1 := g.Tokenizer.EncodeChat(guideProbe[0], guideProbe[1])
	b, _, err2 := m.Tokenizer.EncodeChat(guideProbe[0], guideProbe[1])
	if err1 != nil || err2 != nil || !slices.Equal(a, b) {
		return fmt.Errorf("its tokenizer encodes a chat request differently from model %s's: they must share a vocabulary and chat template", m.Name)
	}
	return nil
}

// DecodesGuided reports whether meth decodes with the guided decoder
// under gen, or, for a table's method, whether any of its choices does.
func DecodesGuided(meth cache.Method, gen sample.GenOptions) bool {
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

// GuideStoreBlocks is the guide's block store's block length when
// --store-blocks is 0 (the diffusion model's store then keeps whole
// prefixes; the guide's is a block store whatever the flag).
const GuideStoreBlocks = 16

// ServedGuide is the served method's guide: --guide's model (Build loaded
// and checked it) when the method decodes guided, refused when nothing
// does, and the guide's prefix store (GuideStore). note describes both
// for the start-up lines. Without --guide all are nil.
func (e *Engine) ServedGuide() (*Model, *cache.BlockStore, string, error) {
	g := e.Guide
	if g == nil {
		return nil, nil, "", nil
	}
	if !DecodesGuided(e.Method, e.Gen) {
		return nil, nil, "", fmt.Errorf("--guide %s: method %s does not decode with the guided decoder (serve NAME@guided, give --decoder guided, or a table that chooses guided settings)", e.cfg.Guide, e.Method.Name())
	}
	note := fmt.Sprintf("guide %s (%s, %s): verifies the guided methods' proposals, %d a forward, its forwards batched as the model's", g.Name, g.Config.ArchName(), g.Fingerprint, sample.GuideChunk)
	st, stNote := e.GuideStore()
	return g, st, note + "; " + stNote, nil
}

// GuideStore is the guide's prefix store as serve builds it: a block
// store of its own (--store-blocks N tokens a block, GuideStoreBlocks for
// 0) within --cache-bytes, nil with --cache-bytes 0; note says which.
func (e *Engine) GuideStore() (*cache.BlockStore, string) {
	s := e.cfg.Store
	if s.Bytes <= 0 {
		return nil, "no guide prefix store (--cache-bytes 0)"
	}
	B := cmp.Or(s.Blocks, GuideStoreBlocks)
	st := cache.NewBlockStore(e.Guide.Backend, B, s.Bytes, true, nil)
	return st, fmt.Sprintf("its shared prefixes from a block store of its own (%d-token blocks, %d bytes: exact at every layer)", B, s.Bytes)
}
