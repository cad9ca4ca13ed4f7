package sample

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"time"

	"github.com/dlmcache/dlmcache/internal/sumexp"
	"github.com/dlmcache/dlmcache/model"
	"github.com/dlmcache/dlmcache/regime"
)

// Generation is split in three swappable pieces around the one forward:
//
//   - the Schedule: blocks, steps, how many tokens each step commits;
//   - the Decoder: which masked tokens to commit given their logits;
//   - the Planner: which rows each forward computes and where the rest
//     come from (the caching method).
//
// Generate wires them together.

// GenOptions configures one generation.
type GenOptions struct {
	// Regime is the gen length (masked answer slots appended to the
	// prompt), the denoising steps in all (a cap with threshold decoding)
	// and the block length (0 means GenLength: one block).
	regime.Regime
	Temperature float64 // 0: greedy; >0: argmax of logits + T·Gumbel
	CFGScale    float64 // classifier-free guidance; 0 disables
	Seed        uint64
	// Positions, if not nil, are the prompt's RoPE position ids (one per
	// prompt token, ascending; gaps allowed: prompt modules placed at
	// their reserved ranges); the answer slots follow the last one. nil
	// means 0..n-1.
	Positions []int32
	// Decoder picks committed tokens; nil means LowConfidence.
	Decoder Decoder
	// Forward, if not nil, runs the step forwards in place of the model's
	// own Forward (a server batching concurrent generations).
	Forward model.Forwarder
	// OnStep, if set, is called after every step with the step (its Canvas
	// now holds the step's commits; read only) and the positions it
	// committed. Streaming servers show the canvas unmasking with it.
	OnStep func(s *Step, committed []int32)
	// Guide is the autoregressive model that checks the proposals under
	// the Guided decoder (guided.go); other decoders ignore it.
	Guide *model.Network
	// GuideForward, if not nil, runs the guide's forwards in place of its
	// own Forward (a server batching concurrent generations' guide
	// forwards); GuideIdle, if not nil, is called when a step's
	// verification is over, so that such a batch stops waiting for this
	// generation's guide forwards until its next step's.
	GuideForward model.Forwarder
	GuideIdle    func()
	// GuidePrefix, if not nil, supplies the guide's K/V of the shared
	// prefix from a cross-request store (guided.go).
	GuidePrefix GuidePrefixFunc
	// OnBlock, if set, is called when block b is complete, with the
	// block's end (a canvas index) and the canvas (read only): its answer
	// up to end is final. After a block-causal model's early stop (an EOS
	// run to the canvas end) the canvas is complete and b is the last
	// block.
	OnBlock func(b, end int, canvas []int32)
}

// DefaultBlockThreshold is the confidence threshold of a block-causal
// model's default decoder (LLaDA 2.x's public default).
const DefaultBlockThreshold = 0.95

// BlockDefaults fills a block-causal model's generation defaults into o's
// zero values, as the public code of LLaDA 2.x ships them: the model's
// block size as the block length, one step per answer slot at most, and
// threshold decoding at DefaultBlockThreshold when o has no decoder. A
// bidirectional model's o is returned as it is. The caller records what
// it returns (DecodingOf, GenOptions' fields).
func BlockDefaults(c *model.Config, o GenOptions) GenOptions {
	B := c.CausalBlock()
	if B == 0 {
		return o
	}
	if o.BlockLength == 0 {
		o.BlockLength = B
	}
	if o.Steps == 0 {
		o.Steps = o.GenLength
	}
	if o.Decoder == nil {
		o.Decoder = Threshold{T: DefaultBlockThreshold}
	}
	return o
}

// Schedule is LLaDA's semi-autoregressive schedule: the answer is split into
// blocks filled left to right, each with Steps/blocks steps.
//
// For a block-causal model (CausalBlock = its block size B) the blocks
// are the model's attention blocks, absolute in position ids: the first
// answer block ends at the first multiple of B after the first answer
// slot's position id FirstPos (it shares its block with the prompt's
// tail), the next ones are B slots each, the last is cut by the canvas
// end; every block gets Steps·B/GenLength steps at most.
type Schedule struct {
	PromptLen int
	regime.Regime
	CausalBlock, FirstPos int
}

// NewSchedule validates the options against LLaDA's rules.
func NewSchedule(promptLen int, o GenOptions) (Schedule, error) {
	s := Schedule{PromptLen: promptLen, Regime: o.Regime}
	if s.BlockLength == 0 {
		s.BlockLength = s.GenLength
	}
	switch {
	case s.GenLength <= 0:
		return s, fmt.Errorf("gen length must be positive, got %d", s.GenLength)
	case s.Steps <= 0:
		return s, fmt.Errorf("steps must be positive, got %d", s.Steps)
	case s.BlockLength <= 0 || s.GenLength%s.BlockLength != 0:
		return s, fmt.Errorf("gen length %d is not a multiple of block length %d", s.GenLength, s.BlockLength)
	case s.Steps%s.Blocks() != 0:
		return s, fmt.Errorf("steps %d do not divide into %d blocks", s.Steps, s.Blocks())
	case s.Steps/s.Blocks() > s.BlockLength:
		return s, fmt.Errorf("%d steps per block exceed the block length %d", s.Steps/s.Blocks(), s.BlockLength)
	}
	return s, nil
}

// causalSchedule validates o for a block-causal model with blocks of B
// whose first answer slot is at position id firstPos.
func causalSchedule(promptLen, firstPos, B int, o GenOptions) (Schedule, error) {
	o = BlockDefaults(&model.Config{BlockCausal: true, BlockSize: B}, o)
	s := Schedule{PromptLen: promptLen, Regime: o.Regime,
		CausalBlock: B, FirstPos: firstPos}
	switch {
	case s.GenLength <= 0:
		return s, fmt.Errorf("gen length must be positive, got %d", s.GenLength)
	case s.BlockLength != B:
		return s, fmt.Errorf("block length %d: a block-causal model decodes in its own blocks of %d (block_size in config.json)", s.BlockLength, B)
	case s.Steps <= 0 || s.Steps*B%s.GenLength != 0:
		return s, fmt.Errorf("steps %d: steps·block size (%d·%d) must be a positive multiple of the gen length %d", s.Steps, s.Steps, B, s.GenLength)
	case s.StepsPerBlock() > B:
		return s, fmt.Errorf("%d steps per block exceed the block size %d", s.StepsPerBlock(), B)
	}
	return s, nil
}

// Blocks is the number of blocks.
func (s Schedule) Blocks() int {
	if B := s.CausalBlock; B > 0 {
		return (s.FirstPos+s.GenLength-1)/B - s.FirstPos/B + 1
	}
	return s.GenLength / s.BlockLength
}

// StepsPerBlock is the number of steps spent in each block (at most, for
// a block-causal model).
func (s Schedule) StepsPerBlock() int {
	if B := s.CausalBlock; B > 0 {
		return s.Steps * B / s.GenLength
	}
	return s.Steps / s.Blocks()
}

// Block returns block b's canvas range [start, end).
func (s Schedule) Block(b int) (start, end int) {
	if B := s.CausalBlock; B > 0 {
		lo := max(s.FirstPos, (s.FirstPos/B+b)*B)
		hi := min(s.FirstPos+s.GenLength, (s.FirstPos/B+b+1)*B)
		return s.PromptLen + lo - s.FirstPos, s.PromptLen + hi - s.FirstPos
	}
	start = s.PromptLen + b*s.BlockLength
	return start, start + s.BlockLength
}

// Transfers is how many tokens step i (0-based, within a block) commits when
// the block had masked tokens at its start: masked//steps each, the first
// masked%steps steps one more.
func (s Schedule) Transfers(masked, i int) int {
	spb := s.StepsPerBlock()
	k := masked / spb
	if i < masked%spb {
		k++
	}
	return k
}

// Candidates are the masked positions of the current block at one step, with
// the model's proposal for each.
type Candidates struct {
	Pos  []int32   // canvas positions
	Tok  []int32   // proposed token (argmax, with Gumbel noise if T > 0)
	Conf []float64 // softmax probability of Tok under the raw logits
	// The canvas before this step (read only), where the answer starts,
	// and the mask id: decoders that weigh a slot by its decoded
	// neighbours read them.
	Canvas    []int32
	PromptLen int
	Mask      int32
}

// Decoder chooses which candidates a step commits. k is the schedule's
// count for this step. It returns indices into c.Pos.
type Decoder interface {
	Choose(c *Candidates, k int, rng *rand.Rand) []int
}

// LowConfidence is LLaDA's default remasking: commit the k most confident
// proposals (remask the low-confidence rest).
type LowConfidence struct{}

func (LowConfidence) Choose(c *Candidates, k int, _ *rand.Rand) []int {
	return topK(c.Conf, k)
}

// RandomRemask commits k proposals chosen uniformly at random.
type RandomRemask struct{}

func (RandomRemask) Choose(c *Candidates, k int, rng *rand.Rand) []int {
	s := make([]float64, len(c.Pos))
	for i := range s {
		s[i] = rng.Float64()
	}
	return topK(s, k)
}

// Threshold is Fast-dLLM's parallel decoding: always the most confident
// proposal, plus every other one whose confidence is at least T. It ignores
// the schedule's k; a block ends when it has no masks left. On a
// block-causal model it is LLaDA 2.x's threshold decoding and SDAR's
// dynamic low-confidence remasking: at least the schedule's k most
// confident (so the steps per block are a cap), more where at least T.
type Threshold struct{ T float64 }

func (d Threshold) Choose(c *Candidates, _ int, _ *rand.Rand) []int {
	best := topK(c.Conf, 1)
	for i, p := range c.Conf {
		if i != best[0] && p >= d.T {
			best = append(best, i)
		}
	}
	return best
}

// CertaintyPrior is d2Cache's certainty-prior decoding: commit the k
// proposals of highest confidence × certainty density (the Gaussian-
// weighted share, width Sigma, of decoded tokens around the slot), which
// decodes in a quasi left-to-right order.
type CertaintyPrior struct{ Sigma float64 }

func (d CertaintyPrior) Choose(c *Candidates, k int, _ *rand.Rand) []int {
	known := make([]bool, len(c.Canvas)-c.PromptLen)
	for i := range known {
		known[i] = c.Canvas[c.PromptLen+i] != c.Mask
	}
	dens := CertaintyDensity(known, d.Sigma)
	s := make([]float64, len(c.Pos))
	for i, p := range c.Pos {
		s[i] = c.Conf[i] * dens[int(p)-c.PromptLen]
	}
	return topK(s, k)
}

// CertaintyDensity is, per answer slot, the Gaussian-weighted (σ) share of
// decoded tokens around it (d2Cache's certainty density); before the
// answer everything counts as decoded (the prompt), past its end as the
// last slot is.
func CertaintyDensity(known []bool, sigma float64) []float64 {
	G := len(known)
	w := int(math.Ceil(3 * sigma))
	kern := make([]float64, w+1)
	for d := range kern {
		kern[d] = math.Exp(-float64(d*d) / (2 * sigma * sigma))
	}
	at := func(j int) float64 {
		switch {
		case j < 0:
			return 1
		case j >= G:
			j = G - 1
		}
		if known[j] {
			return 1
		}
		return 0
	}
	out := make([]float64, G)
	for i := range G {
		var num, den float64
		for j := i - w; j <= i+w; j++ {
			k := kern[max(i-j, j-i)]
			num += k * at(j)
			den += k
		}
		out[i] = num / den
	}
	return out
}

// topK returns the indices of the k largest scores (ties: lower index first).
func topK(score []float64, k int) []int {
	idx := make([]int, len(score))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return score[idx[a]] > score[idx[b]] })
	if k > len(idx) {
		k = len(idx)
	}
	return idx[:k]
}

// Step describes one denoising step to a Planner.
type Step struct {
	Index      int     // 0-based step number within the request
	Block      int     // current block
	BlockStep  int     // 0-based step within the block
	BlockStart int     // canvas range of the current block
	BlockEnd   int     //
	Canvas     []int32 // the canvas before this step (read only)
	PromptLen  int
	Positions  []int32 // the canvas's RoPE position ids (nil: 0..n-1; read only)
	// Len is the number of canvas tokens the step's forward is fed
	// (Input.Tokens is Canvas[:Len]): the whole canvas, or for a
	// block-causal model the canvas up to the current block's end (later
	// positions cannot reach it).
	Len int
	// Whole says the decoder scores every masked slot of the block
	// (guided decoding commits left to right): a CandidateNarrower's plan
	// computes them all and CandidateRows is not asked.
	Whole bool
}

// Request describes a generation to a Planner before its first step.
type Request struct {
	Prompt    []int32 // prompt token ids
	PrefixLen int     // shared-prefix length m (0: none)
	Schedule  Schedule
	Canvas    []int32 // prompt ⊕ MASK×gen_length, updated in place
	Positions []int32 // the canvas's RoPE position ids (nil: 0..n-1)
}

// canvasPositions checks a prompt's position ids (one per token, strictly
// ascending, non-negative) and extends them over the answer slots.
func canvasPositions(prompt []int32, promptLen, gen int) ([]int32, error) {
	if len(prompt) != promptLen {
		return nil, fmt.Errorf("%d position ids for a prompt of %d tokens", len(prompt), promptLen)
	}
	pos := make([]int32, 0, promptLen+gen)
	for i, p := range prompt {
		if p < 0 || (i > 0 && p <= prompt[i-1]) {
			return nil, fmt.Errorf("prompt position ids must be non-negative and strictly ascending (id %d at token %d)", p, i)
		}
		pos = append(pos, p)
	}
	next := int32(0)
	if promptLen > 0 {
		next = prompt[promptLen-1] + 1
	}
	for i := range int32(gen) {
		pos = append(pos, next+i)
	}
	return pos, nil
}

// Planner is a caching method: it turns each step into a Plan for the
// forward. A nil Planner computes everything.
type Planner interface {
	// Begin is called once before the first step.
	Begin(r *Request) error
	// Plan returns the plan of step s's forward (nil: compute everything).
	Plan(s *Step) model.Plan
	// After reports the positions committed by step s.
	After(s *Step, committed []int32)
	// End is called once when the request finishes (or fails).
	End()
}

// Generation is the result of Generate.
type Generation struct {
	Canvas []int32 // prompt ⊕ answer
	Answer []int32 // the answer region (gen_length tokens)
	Steps  int     // denoising steps taken
	NFE    int     // forward evaluations (CFG counts two per step)
	// Decoded is the answer slots the model committed; a block-causal
	// model stops after the block that completes an EOS run to the canvas
	// end and fills the rest with EOS (GenLength - Decoded slots).
	Decoded      int
	RowsComputed int           // (layer,row) pairs computed over all forwards
	RowsFull     int           // what computing every row would have cost
	FLOPs        float64       // matrix-product FLOPs over all forwards
	FLOPsFull    float64       // what computing every row would have cost
	Duration     time.Duration // wall time
	// Guide is what the guide did under the Guided decoder (NFE, Steps
	// and the counts above are the diffusion model's).
	Guide GuideStats
}

// Generate runs the diffusion sampler of net on prompt. planner may be
// nil. Under the Guided decoder the guide o.Guide checks the proposals
// (guided.go). On a causal LM (Config.Causal) it decodes autoregressively
// instead, one token per forward with an exact K/V cache
// (autoregressive.go): o's GenLength, Temperature, Seed, Positions,
// Forward and callbacks apply (each token is a step and a block of one),
// planner must be nil.
func Generate(ctx context.Context, net *model.Network, prompt []int32, prefixLen int, o GenOptions, planner Planner) (*Generation, error) {
	return (&sampler{Network: net}).generate(ctx, prompt, prefixLen, o, planner)
}

func (m *sampler) generate(ctx context.Context, prompt []int32, prefixLen int, o GenOptions, planner Planner) (*Generation, error) {
	if m.Config.Causal {
		return m.generateAR(ctx, prompt, o, planner, true)
	}
	if d, ok := o.Decoder.(Guided); ok {
		return m.generateGuided(ctx, prompt, prefixLen, o, d, planner)
	}
	start := time.Now()
	pos, sch, err := m.canvasSchedule(len(prompt), o)
	if err != nil {
		return nil, err
	}
	causal := sch.CausalBlock > 0
	dec := o.Decoder
	if dec == nil {
		dec = LowConfidence{}
	}
	mask := int32(m.Config.MaskTokenID)
	req, end, err := m.beginRequest(planner, prompt, prefixLen, o.GenLength, sch, pos)
	if err != nil {
		return nil, err
	}
	defer end()
	canvas, n, rng := req.Canvas, len(req.Canvas), samplerRNG(o.Seed)
	g := &Generation{Decoded: o.GenLength}
	_, threshold := dec.(Threshold)
	for blk := 0; blk < sch.Blocks(); blk++ {
		bs, be := sch.Block(blk)
		fed := n
		if causal {
			fed = be
		}
		masked0 := countMask(canvas[bs:be], mask)
		for i := 0; ; i++ {
			left := countMask(canvas[bs:be], mask)
			if causal {
				if left == 0 || i >= sch.StepsPerBlock() {
					break
				}
			} else if threshold {
				if left == 0 {
					break
				}
			} else if i >= sch.StepsPerBlock() {
				break
			}
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			st := &Step{Index: g.Steps, Block: blk, BlockStep: i, BlockStart: bs, BlockEnd: be, Canvas: canvas, PromptLen: len(prompt), Positions: pos, Len: fed}
			committed, err := m.step(st, o, dec, sch.Transfers(masked0, i), mask, planner, rng, g)
			if err != nil {
				return nil, fmt.Errorf("step %d: %w", g.Steps, err)
			}
			g.Steps++
			if planner != nil {
				planner.After(st, committed)
			}
			if o.OnStep != nil {
				o.OnStep(st, committed)
			}
		}
		stop := causal && eosToEnd(canvas[len(prompt):be], int32(m.Config.EOSTokenID))
		if stop {
			for i := be; i < n; i++ {
				canvas[i] = int32(m.Config.EOSTokenID)
			}
			g.Decoded = be - len(prompt)
		}
		if o.OnBlock != nil {
			o.OnBlock(blk, be, canvas)
		}
		if stop {
			break
		}
	}
	g.Canvas = canvas
	g.Answer = canvas[len(prompt):]
	g.Duration = time.Since(start)
	return g, nil
}

// step runs one forward (two with CFG) and commits tokens into s.Canvas.
func (m *sampler) step(s *Step, o GenOptions, dec Decoder, k int, mask int32, planner Planner, rng *rand.Rand, g *Generation) ([]int32, error) {
	c, err := m.proposeStep(s, o, mask, planner, rng, g)
	if c == nil || err != nil {
		return nil, err
	}
	canvas := s.Canvas
	pick := dec.Choose(c, k, rng)
	if _, ok := dec.(Threshold); ok && m.Config.CausalBlock() > 0 && len(pick) < k {
		// At least the schedule's count: the k most confident hold every
		// proposal at or above the threshold.
		pick = topK(c.Conf, k)
	}
	committed := make([]int32, 0, len(pick))
	for _, j := range pick {
		canvas[c.Pos[j]] = c.Tok[j]
		committed = append(committed, c.Pos[j])
	}
	sort.Slice(committed, func(a, b int) bool { return committed[a] < committed[b] })
	return committed, nil
}

// proposeStep runs step s's forward (two with CFG) under the planner's
// plan and returns the proposals of the current block's masked slots (nil
// when it has none), counted in g.
func (m *sampler) proposeStep(s *Step, o GenOptions, mask int32, planner Planner, rng *rand.Rand, g *Generation) (*Candidates, error) {
	canvas := s.Canvas
	var rows []int32
	for p := s.BlockStart; p < s.BlockEnd; p++ {
		if canvas[p] == mask {
			rows = append(rows, int32(p))
		}
	}
	if len(rows) == 0 {
		return nil, nil
	}
	var plan model.Plan
	if planner != nil {
		plan = planner.Plan(s)
	}
	if cn, ok := planner.(CandidateNarrower); ok && !s.Whole {
		if r := cn.CandidateRows(s, rows); len(r) > 0 {
			rows = r
		}
	}
	forward := o.Forward
	if forward == nil {
		forward = m.Forward
	}
	fed, fpos := canvas[:s.Len], s.Positions
	if fpos != nil {
		fpos = fpos[:s.Len]
	}
	full := m.Config.FullFLOPs(fpos, s.Len, len(rows))
	e := m.Config.Embeddings()
	// run is one forward of tokens (the canvas, or its unconditional copy)
	// under plan, counted in g.
	run := func(tokens []int32, plan model.Plan) (*model.Output, error) {
		out, err := forward(model.Input{Tokens: tokens, Positions: fpos, LogitRows: rows}, plan)
		if err != nil {
			return nil, err
		}
		g.NFE++
		g.RowsComputed += out.RowsComputed
		g.RowsFull += len(m.Blocks) * s.Len
		g.FLOPs += out.FLOPs
		g.FLOPsFull += full
		return out, nil
	}
	out, err := run(fed, plan)
	if err != nil {
		return nil, err
	}
	// The logits' storage goes back to the backend once proposed from.
	defer out.Release()
	logits := out.Logits
	if o.CFGScale > 0 {
		un := append([]int32(nil), fed...)
		for i := 0; i < s.PromptLen; i++ {
			un[i] = mask
		}
		uo, err := run(un, nil)
		if err != nil {
			return nil, err
		}
		defer uo.Release()
		w := float32(o.CFGScale + 1)
		for i := range logits {
			logits[i] = uo.Logits[i] + w*(logits[i]-uo.Logits[i])
		}
	}
	c := &Candidates{Pos: rows, Tok: make([]int32, len(rows)), Conf: make([]float64, len(rows)),
		Canvas: canvas, PromptLen: s.PromptLen, Mask: mask}
	for i := range rows {
		c.Tok[i], c.Conf[i] = propose(logits[i*e:(i+1)*e], o.Temperature, rng)
	}
	if co, ok := planner.(CandidateObserver); ok {
		co.Candidates(s, c)
	}
	return c, nil
}

// propose returns x0 (argmax of the logits, plus T·Gumbel noise when T > 0)
// and its softmax probability under the raw logits; greedy, in one float32
// pass (argmaxConf: a small model's step 5% faster than through the
// general loop, Zen 5).
func propose(l []float32, temp float64, rng *rand.Rand) (int32, float64) {
	if temp <= 0 {
		return argmaxConf(l)
	}
	return proposeAny(l, temp, rng)
}

// proposeAny is propose's loop for any temperature.
func proposeAny(l []float32, temp float64, rng *rand.Rand) (int32, float64) {
	best, bestScore := 0, math.Inf(-1)
	mx := math.Inf(-1)
	for i, v := range l {
		f := float64(v)
		if f > mx {
			mx = f
		}
		score := f
		if temp > 0 {
			u := rng.Float64()
			for u == 0 {
				u = rng.Float64()
			}
			score = f - temp*math.Log(-math.Log(u))
		}
		if score > bestScore {
			best, bestScore = i, score
		}
	}
	return int32(best), math.Exp(float64(l[best])-mx) / sumexp.Sum(l, mx)
}

// argmaxConf is propose at temperature 0: the first largest logit (NaNs
// never chosen) and its softmax probability, 1/Σ e^(l−max) — the same
// bits as exp(l[best] − max)/Σ, as l[best] is the max — in one float32
// pass. Where no logit is above −∞ it leaves it to propose's general loop.
func argmaxConf(l []float32) (int32, float64) {
	best, bv := -1, float32(math.Inf(-1))
	for i, v := range l {
		if v > bv {
			best, bv = i, v
		}
	}
	if best < 0 {
		return proposeAny(l, 0, nil)
	}
	return int32(best), 1 / sumexp.Sum(l, float64(bv))
}

// canvasSchedule is a generation's canvas positions (nil: 0..n-1) and
// its schedule, for a prompt of promptLen tokens.
func (m *sampler) canvasSchedule(promptLen int, o GenOptions) ([]int32, Schedule, error) {
	var pos []int32
	if o.Positions != nil {
		var err error
		if pos, err = canvasPositions(o.Positions, promptLen, o.GenLength); err != nil {
			return nil, Schedule{}, err
		}
	}
	sch, err := m.schedule(promptLen, pos, o)
	return pos, sch, err
}

// newRequest is the request a generation's planner sees: the prompt
// followed by genLength mask tokens, its schedule and positions.
func (m *sampler) newRequest(prompt []int32, prefixLen, genLength int, sch Schedule, pos []int32) *Request {
	canvas := make([]int32, len(prompt)+genLength)
	copy(canvas, prompt)
	for i := len(prompt); i < len(canvas); i++ {
		canvas[i] = int32(m.Config.MaskTokenID)
	}
	return &Request{Prompt: prompt, PrefixLen: prefixLen, Schedule: sch, Canvas: canvas, Positions: pos}
}

// beginRequest is newRequest's request, begun on planner where there is
// one; end ends it (deferred by the caller, once the generation is done).
func (m *sampler) beginRequest(planner Planner, prompt []int32, prefixLen, genLength int, sch Schedule, pos []int32) (req *Request, end func(), err error) {
	req = m.newRequest(prompt, prefixLen, genLength, sch, pos)
	if planner == nil {
		return req, func() {}, nil
	}
	if err := planner.Begin(req); err != nil {
		return nil, nil, err
	}
	return req, planner.End, nil
}

// samplerRNG is the random source of a generation with seed seed (Gumbel
// noise, random remasking, sampled tokens).
func samplerRNG(seed uint64) *rand.Rand {
	return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}

// schedule validates o for a prompt of promptLen tokens (canvas position
// ids pos, nil: 0..n-1): LLaDA's schedule, or the block schedule of a
// block-causal model.
func (m *sampler) schedule(promptLen int, pos []int32, o GenOptions) (Schedule, error) {
	B := m.Config.CausalBlock()
	if B == 0 {
		return NewSchedule(promptLen, o)
	}
	first := promptLen
	if promptLen < len(pos) {
		first = int(pos[promptLen])
	}
	return causalSchedule(promptLen, first, B, o)
}

// ScheduleFor validates o for a model of config c and a prompt of promptLen
// tokens at positions 0..promptLen-1: LLaDA's rules (NewSchedule),
// or a block-causal model's (blocks of its own size; steps·block size a
// multiple of the gen length).
func ScheduleFor(c *model.Config, promptLen int, o GenOptions) (Schedule, error) {
	if B := c.CausalBlock(); B > 0 {
		return causalSchedule(promptLen, promptLen, B, o)
	}
	return NewSchedule(promptLen, o)
}

// eosToEnd reports whether the answer so far holds an EOS and only EOS
// after its first one: the run that an EOS-padded answer continues to
// the canvas end.
func eosToEnd(ans []int32, eos int32) bool {
	for i, t := range ans {
		if t == eos {
			for _, u := range ans[i:] {
				if u != eos {
					return false
				}
			}
			return true
		}
	}
	return false
}

func countMask(t []int32, mask int32) int {
	n := 0
	for _, v := range t {
		if v == mask {
			n++
		}
	}
	return n
}
