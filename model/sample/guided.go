package sample

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/dlmcache/dlmcache/model"
	"github.com/dlmcache/dlmcache/model/backend"
)

// Guided decoding (FlashDLM's guided diffusion, its Algorithm 1 and the
// "speculative" generator of its public code): a causal LM of the same
// vocabulary (GenOptions.Guide) checks the diffusion model's proposals
// the way a target model checks a draft in speculative decoding.
//
// Each step is one forward of the DLM (under the caching method's plan,
// as any step), which proposes a token for every masked slot of the
// current block; commits are left to right, so those slots are the block
// from the first masked one, the slot after the committed prefix (prompt
// and committed answer). The guide holds the committed prefix in an exact
// K/V cache (arCache: every layer's rows, final once computed) and scores
// the proposals left to right in chunks of GuideChunk: one guide forward
// per chunk over the last committed token and the chunk's proposals but
// its last (the rows the chunk's predictions come from), stopping after
// the first chunk with a rejection. A proposal is accepted while
//
//   - guided (deterministic): it is the guide's argmax there;
//   - guided:TAU (FlashDLM's top-k relative rule): it is among the guide's
//     TopK most likely tokens there and its probability is at least
//     TAU × the most likely token's.
//
// The step commits the accepted run and, at the first rejected slot, the
// guide's argmax there (over every token but the diffusion model's mask
// token, which an untrained guide may rank first): the AR model's own next token after the verified
// prefix (FlashDLM's speculative generator does this; it is what
// speculative decoding commits on a rejection), so every step commits at
// least one token, and the deterministic rule's answer is the guide's
// greedy answer, the DLM deciding only how many forwards it takes. The
// guide's cache is then cut back to the committed prefix (rows past it
// are recomputed when fed again). Decoding stops at the first committed
// EOS, the slots after it filled with EOS (Generation.Decoded counts the
// decoded ones). The guide's first forward fills its cache with the
// prompt but its last token (none for a one-token prompt).
//
// guided+threshold:T (Guided.Keep) adds one rule to either: a proposal
// the guide rejects is kept all the same when the diffusion model's own
// confidence in it is at least T, and the run goes on through it. The
// guide then decides the slots the DLM is unsure of, and its argmax is
// committed only at the first slot neither model vouches for. This is
// not FlashDLM's rule: theirs answers what the guide answers, right for a
// guide at least as good as the DLM; with a small guide weaker than the
// DLM on some task, the guide's mistakes become the answer's, and the
// DLM's confident tokens are the ones the threshold decoder alone would
// commit (Fast-dLLM), so keeping them costs no forwards.
//
// With GenOptions.GuidePrefix (a server's block store: cache.GuidePrefix)
// the guide's K/V of the shared prefix's leading rows come from the
// store at every layer before the prefill, which then computes only the
// rest of the prompt: a causal model's rows depend on their own and
// earlier tokens alone, so stored rows are exact, and the answer is the
// one the guide computing every row gives (serve's TestGuidedStore).
//
// The guide reads the DLM's token ids (the commands refuse a guide whose
// vocabulary or chat template differ) and is counted apart from the DLM:
// Generation.NFE and Steps are the DLM's forwards, Generation.Guide the
// guide's forwards, acceptance and time.

// GuideChunk is how many proposals one guide forward verifies
// (FlashDLM's verify_batch_size).
const GuideChunk = 32

// DefaultGuideTopK is the guided:TAU rule's k (FlashDLM's evaluator's
// acceptance_top_k).
const DefaultGuideTopK = 5

// Guided is the guided decoder (GenOptions.Decoder): Tau 0 is the
// deterministic rule (a proposal must be the guide's argmax), Tau in
// (0, 1] the top-k relative rule with k TopK (0: DefaultGuideTopK).
// Generate runs it with the guide in GenOptions.Guide; it is not a
// ranking of candidates, so Choose, which Generate never calls for it,
// falls back to the most confident proposal.
type Guided struct {
	Tau  float64
	TopK int
	// Keep, in (0, 1] (0: off), keeps a proposal the guide rejects when
	// the diffusion model's own confidence in it (its softmax probability,
	// the threshold decoder's measure) is at least Keep: the run goes on
	// through it, as through an accepted one ("guided+threshold:T"). The
	// guide then decides only the slots the DLM is unsure of, so a guide
	// weaker than the DLM does not overrule the DLM's confident tokens.
	// FlashDLM's rule is Keep 0.
	Keep float64
}

func (Guided) Choose(c *Candidates, _ int, _ *rand.Rand) []int { return topK(c.Conf, 1) }

func (d Guided) topK() int {
	if d.TopK > 0 {
		return d.TopK
	}
	return DefaultGuideTopK
}

// keeps reports whether a proposal the guide rejected is kept on the
// DLM's confidence conf in it.
func (d Guided) keeps(conf float64) bool { return d.Keep > 0 && conf >= d.Keep }

// accepts reports whether draft is accepted against the guide's logits l
// at its slot, whose argmax is best.
func (d Guided) accepts(l []float32, draft, best int32) bool {
	if d.Tau == 0 {
		return draft == best
	}
	if draft == best {
		return true
	}
	// In the top k: fewer than k tokens rank above the draft (ties:
	// lower id first, as a stable sort by probability would rank them).
	ld := l[draft]
	above := 0
	for i, v := range l {
		if v > ld || (v == ld && int32(i) < draft) {
			above++
		}
	}
	if above >= d.topK() {
		return false
	}
	// p(draft) ≥ τ·p(top): the softmax's normaliser cancels.
	return math.Exp(float64(ld)-float64(l[best])) >= d.Tau
}

// GuideStats is what a guided generation's guide did (zero without one).
type GuideStats struct {
	NFE       int // guide forwards: the prefill and one per verified chunk
	Steps     int // guided steps (one DLM forward each)
	Committed int // answer tokens the steps committed
	Accepted  int // proposals accepted (Committed less the guide's own tokens)
	// Kept is those of Accepted the guide rejected but the DLM was at
	// least Guided.Keep confident of (0 under FlashDLM's rule).
	Kept         int
	RowsComputed int // the guide's (layer, row) pairs computed
	// PrefixTokens is the shared prefix the guide looked up in a store
	// (GenOptions.GuidePrefix: the prefix less the prompt's last token,
	// which the guide feeds with the first proposals), PrefixHitTokens
	// those of its tokens found stored and PrefixRows the (layer, row)
	// pairs the store computed for it (0 on a full hit).
	PrefixTokens, PrefixHitTokens, PrefixRows int
	// DLMTime and GuideTime are the wall time in each model's forwards
	// (the DLM's proposals included in its own).
	DLMTime, GuideTime time.Duration
}

// Add adds o's counts and times to s (a sum over generations; the
// prefix counters too).
func (s *GuideStats) Add(o GuideStats) {
	s.NFE += o.NFE
	s.Steps += o.Steps
	s.Committed += o.Committed
	s.Accepted += o.Accepted
	s.Kept += o.Kept
	s.RowsComputed += o.RowsComputed
	s.PrefixTokens += o.PrefixTokens
	s.PrefixHitTokens += o.PrefixHitTokens
	s.PrefixRows += o.PrefixRows
	s.DLMTime += o.DLMTime
	s.GuideTime += o.GuideTime
}

// AcceptLen is the mean number of tokens a guided step committed.
func (s GuideStats) AcceptLen() float64 {
	if s.Steps == 0 {
		return 0
	}
	return float64(s.Committed) / float64(s.Steps)
}

// GuidePrefixFunc writes the guide's stored K/V of the leading rows of
// tokens (a request's shared prefix, at positions 0, 1, …) into k and v
// (per layer, rows 0, 1, …), computing and storing what is missing, and
// returns how many rows it wrote, how many of tokens it found stored and
// the (layer, row) pairs it computed.
type GuidePrefixFunc func(guide *model.Network, tokens []int32, k, v []backend.Tensor) (rows, hitTokens, computedRows int, err error)

// checkGuide refuses a guide that cannot check m's proposals.
func (m *sampler) checkGuide(guide *model.Network) error {
	switch {
	case guide == nil:
		return errors.New("decoder guided needs a guide model (an autoregressive LM of the same vocabulary: --guide)")
	case !guide.Config.Causal:
		return fmt.Errorf("the guide (%s) is not an autoregressive model: guided decoding needs a causal LM (Qwen2ForCausalLM, LlamaForCausalLM)", guide.Config.ArchName())
	case guide.Config.VocabSize != m.Config.VocabSize:
		return fmt.Errorf("the guide's vocabulary has %d tokens, the model's %d: guided decoding compares token ids, so they must share a vocabulary",
			guide.Config.VocabSize, m.Config.VocabSize)
	case m.Config.Causal:
		return errors.New("guided decoding is a diffusion model's decoder; this model is autoregressive")
	case m.Config.CausalBlock() > 0:
		return fmt.Errorf("guided decoding of a block-causal model (blocks of %d) is not supported; use threshold or schedule decoding", m.Config.CausalBlock())
	}
	return nil
}

// generateGuided is Generate under the Guided decoder dec.
func (m *sampler) generateGuided(ctx context.Context, prompt []int32, prefixLen int, o GenOptions, dec Guided, planner Planner) (*Generation, error) {
	start := time.Now()
	guide := o.Guide
	if err := m.checkGuide(guide); err != nil {
		return nil, err
	}
	if dec.Tau < 0 || dec.Tau > 1 {
		return nil, fmt.Errorf("guided decoding's τ %g is not in (0, 1]", dec.Tau)
	}
	if dec.Keep < 0 || dec.Keep > 1 {
		return nil, fmt.Errorf("guided decoding's keep threshold %g is not in (0, 1]", dec.Keep)
	}
	if len(prompt) == 0 {
		return nil, errors.New("guided decoding needs a prompt of at least one token (the guide predicts from it)")
	}
	pos, sch, err := m.canvasSchedule(len(prompt), o)
	if err != nil {
		return nil, err
	}
	mask, eos := int32(m.Config.MaskTokenID), int32(m.Config.EOSTokenID)
	req, end, err := m.beginRequest(planner, prompt, prefixLen, o.GenLength, sch, pos)
	if err != nil {
		return nil, err
	}
	defer end()
	canvas, n, rng := req.Canvas, len(req.Canvas), samplerRNG(o.Seed)
	gv := newGuideVerifier(guide, dec, n, pos)
	gv.mask = mask
	defer gv.kv.free()
	if o.GuideForward != nil {
		gv.forwarder = o.GuideForward
	}
	g := &Generation{Decoded: o.GenLength}
	if m := min(prefixLen, len(prompt)-1); o.GuidePrefix != nil && pos == nil && m > 0 {
		// Before the first step, as a planner's Begin: a store's single
		// flight may wait here for another request's fill, which must
		// not hold up a batch this generation has joined.
		h, hit, rows, err := o.GuidePrefix(guide, prompt[:m], gv.kv.k, gv.kv.v)
		if err != nil {
			return nil, fmt.Errorf("the guide's shared prefix: %w", err)
		}
		gv.kv.have = h
		g.Guide.PrefixTokens, g.Guide.PrefixHitTokens, g.Guide.PrefixRows = m, hit, rows
	}
	cur := len(prompt) // the committed prefix: the next slot to decode
	stopped := false
	for blk := 0; blk < sch.Blocks() && !stopped; blk++ {
		bs, be := sch.Block(blk)
		for i := 0; cur < be && !stopped; i++ {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			st := &Step{Index: g.Steps, Block: blk, BlockStep: i, BlockStart: bs, BlockEnd: be, Canvas: canvas,
				PromptLen: len(prompt), Positions: pos, Len: n, Whole: true}
			t0 := time.Now()
			c, err := m.proposeStep(st, o, mask, planner, rng, g)
			g.Guide.DLMTime += time.Since(t0)
			if err != nil {
				return nil, fmt.Errorf("step %d: %w", g.Steps, err)
			}
			// The block's masked slots are [cur, be), in order (unless a
			// model committed the mask token itself).
			if len(c.Pos) != be-cur || c.Pos[0] != int32(cur) {
				return nil, fmt.Errorf("step %d: the committed answer holds the mask token (id %d) before slot %d; guided decoding commits left to right",
					g.Steps, mask, cur-len(prompt))
			}
			toks, accepted, err := gv.verify(canvas, cur, c.Tok, c.Conf, &g.Guide)
			if o.GuideIdle != nil {
				o.GuideIdle()
			}
			if err != nil {
				return nil, fmt.Errorf("step %d: guide: %w", g.Steps, err)
			}
			committed := gv.commit(canvas, cur, toks, accepted, eos, g)
			stopped = int32(len(committed)) > 0 && canvas[committed[len(committed)-1]] == eos
			cur += len(committed)
			if planner != nil {
				planner.After(st, committed)
			}
			if o.OnStep != nil {
				o.OnStep(st, committed)
			}
		}
		if stopped {
			for i := cur; i < n; i++ {
				canvas[i] = eos
			}
			g.Decoded = cur - len(prompt)
		}
		if o.OnBlock != nil {
			o.OnBlock(blk, be, canvas)
		}
	}
	g.Canvas = canvas
	g.Answer = canvas[len(prompt):]
	g.Duration = time.Since(start)
	return g, nil
}

// commit writes the step's tokens toks (accepted of them proposals) into
// canvas from slot cur, through the first EOS, and counts the step in g;
// it returns the slots committed.
func (v *guideVerifier) commit(canvas []int32, cur int, toks []int32, accepted int, eos int32, g *Generation) []int32 {
	committed := make([]int32, 0, len(toks))
	for j, t := range toks {
		canvas[cur+j] = t
		committed = append(committed, int32(cur+j))
		if t == eos {
			break
		}
	}
	g.Steps++
	g.Guide.Steps++
	g.Guide.Committed += len(committed)
	g.Guide.Accepted += min(accepted, len(committed))
	for _, k := range v.kept {
		if k < len(committed) {
			g.Guide.Kept++
		}
	}
	return committed
}

// guideVerifier is the guide's side of a guided generation: its exact K/V
// cache of the committed prefix (kv.have = the committed length less one:
// the last committed token is fed with the next chunk) and the sequence
// it reads (the canvas's committed tokens, then the proposals).
type guideVerifier struct {
	m         *model.Network
	forwarder model.Forwarder // the guide's Forward, or a server's batching one
	dec       Guided
	kv        *arCache
	seq       []int32
	pos       []int32
	// kept is the last verify's proposals kept on the DLM's confidence
	// (Guided.Keep), as offsets from cur.
	kept []int
	// mask is the diffusion model's mask token: never the guide's token
	// (an untrained guide may rank it first; committed, it would read as
	// a slot still masked).
	mask int32
}

func newGuideVerifier(guide *model.Network, dec Guided, n int, pos []int32) *guideVerifier {
	return &guideVerifier{m: guide, forwarder: guide.Forward, dec: dec, kv: newARCache(guide, n), seq: make([]int32, n), pos: pos}
}

// forward runs the guide over seq[:end], computing rows kv.have..end-1,
// with the logits of rows.
func (v *guideVerifier) forward(end int, rows []int32, s *GuideStats) (*model.Output, error) {
	in := model.Input{Tokens: v.seq[:end], LogitRows: rows}
	if v.pos != nil {
		in.Positions = v.pos[:end]
	}
	t0 := time.Now()
	out, err := v.forwarder(in, v.kv.plan(end))
	s.GuideTime += time.Since(t0)
	if err != nil {
		return nil, err
	}
	s.NFE++
	s.RowsComputed += out.RowsComputed
	return out, nil
}

// verify checks the proposals drafts of slots cur, cur+1, … (the DLM's
// confidence in each in conf) against the guide, the committed prefix
// being canvas[:cur]. It returns the tokens
// to commit from cur on (the accepted run, then the guide's token at the
// first rejection, if any) and how many of them are accepted proposals,
// and leaves the guide's cache holding rows 0..cur+len(toks)-2.
func (v *guideVerifier) verify(canvas []int32, cur int, drafts []int32, conf []float64, s *GuideStats) ([]int32, int, error) {
	copy(v.seq[:cur], canvas[:cur])
	v.kept = v.kept[:0]
	if v.kv.have < cur-1 {
		// The prefill: the prompt but its last token.
		if _, err := v.forward(cur-1, []int32{int32(cur - 2)}, s); err != nil {
			return nil, 0, err
		}
		v.kv.have = cur - 1
	}
	copy(v.seq[cur:], drafts)
	e := v.m.Config.Embeddings()
	for i := 0; i < len(drafts); i += GuideChunk {
		C := min(GuideChunk, len(drafts)-i)
		// Rows cur+i-1 .. cur+i+C-2 predict slots cur+i .. cur+i+C-1.
		rows := make([]int32, C)
		for j := range rows {
			rows[j] = int32(cur + i + j - 1)
		}
		out, err := v.forward(cur+i+C-1, rows, s)
		if err != nil {
			return nil, 0, err
		}
		for j := range C {
			l := out.Logits[j*e : (j+1)*e]
			best := argmaxBut(l, v.mask)
			if !v.dec.accepts(l, drafts[i+j], best) {
				if v.dec.keeps(conf[i+j]) {
					// Kept: the guide's later rows read this proposal,
					// which is what is committed, so they stay valid.
					v.kept = append(v.kept, i+j)
					continue
				}
				toks := append(append([]int32(nil), drafts[:i+j]...), best)
				v.kv.have = cur + i + j // through the last accepted proposal
				return toks, i + j, nil
			}
		}
		v.kv.have = cur + i + C - 1
	}
	return append([]int32(nil), drafts...), len(drafts), nil
}

// argmaxBut is the index of l's largest value but skip's (the first of
// ties).
func argmaxBut(l []float32, skip int32) int32 {
	best := -1
	for i, x := range l {
		if int32(i) != skip && (best < 0 || x > l[best]) {
			best = i
		}
	}
	return int32(best)
}
