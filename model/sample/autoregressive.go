package sample

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlmcache/dlmcache/model"
	"github.com/dlmcache/dlmcache/model/backend"
)

// Autoregressive decoding of a causal LM (Config.Causal): sample.Generate
// on such a model appends one token per forward, the argmax of the last
// row's logits (with Temperature > 0, the argmax of logits + T·Gumbel
// noise: a sample of softmax(logits/T)), until GenLength tokens or the
// EOS token (which the answer keeps; the slots after it are filled with
// EOS, Generation.Decoded counting the decoded ones).
//
// The K/V of a causal model's rows depend on their own and earlier tokens
// only, so they are final once computed: the decoder keeps every layer's
// K/V for the whole request (arCache, a Plan holding its own K/V
// buffers, KVHolder) and each forward after the first (the prompt)
// computes one row per layer, the token just decoded, attending over the
// kept rows in place. The answers are those of recomputing every row each
// token (TestARCacheMatchesRecompute).

// generateAR decodes prompt autoregressively; cached false recomputes
// every row each token (the reference the cache is checked against).
func (m *sampler) generateAR(ctx context.Context, prompt []int32, o GenOptions, planner Planner, cached bool) (*Generation, error) {
	start := time.Now()
	switch {
	case planner != nil:
		return nil, errors.New("an autoregressive model decodes with its own exact K/V cache; it takes no caching method's planner (use none)")
	case o.GenLength <= 0:
		return nil, fmt.Errorf("gen length must be positive, got %d", o.GenLength)
	case o.CFGScale != 0:
		return nil, fmt.Errorf("classifier-free guidance (cfg %g) is a diffusion sampler's; this model is autoregressive", o.CFGScale)
	case len(prompt) == 0:
		return nil, errors.New("an autoregressive model needs a prompt of at least one token")
	}
	switch o.Decoder.(type) {
	case nil, LowConfidence:
	default:
		return nil, fmt.Errorf("decoder %s is a diffusion sampler's; an autoregressive model decodes one token per forward (greedy, or sampled with a temperature)", decoderLabel(o.Decoder))
	}
	var pos []int32
	if o.Positions != nil {
		var err error
		if pos, err = canvasPositions(o.Positions, len(prompt), o.GenLength); err != nil {
			return nil, err
		}
	}
	n := len(prompt) + o.GenLength
	canvas := make([]int32, n)
	copy(canvas, prompt)
	eos := int32(m.Config.EOSTokenID)
	for i := len(prompt); i < n; i++ {
		canvas[i] = eos
	}
	forward := o.Forward
	if forward == nil {
		forward = m.Forward
	}
	var kv *arCache
	if cached {
		kv = newARCache(m.Network, n)
		defer kv.free()
	}
	rng := samplerRNG(o.Seed)
	g := &Generation{}
	L := len(m.Blocks)
	cur := len(prompt) // tokens known; the next one is decoded at canvas[cur]
	for cur < n {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		in := model.Input{Tokens: canvas[:cur], LogitRows: []int32{int32(cur - 1)}}
		if pos != nil {
			in.Positions = pos[:cur]
		}
		var plan model.Plan
		if kv != nil {
			plan = kv.plan(cur)
		}
		out, err := forward(in, plan)
		if err != nil {
			return nil, fmt.Errorf("token %d: %w", cur-len(prompt), err)
		}
		if kv != nil {
			kv.have = cur
		}
		g.NFE++
		g.RowsComputed += out.RowsComputed
		g.RowsFull += L * cur
		g.FLOPs += out.FLOPs
		g.FLOPsFull += m.Config.FullFLOPs(in.Positions, cur, 1)
		tok, _ := propose(out.Logits, o.Temperature, rng)
		canvas[cur] = tok
		st := &Step{Index: g.Steps, Block: g.Steps, BlockStart: cur, BlockEnd: cur + 1, Canvas: canvas,
			PromptLen: len(prompt), Positions: pos, Len: cur}
		g.Steps++
		cur++
		stop := tok == eos
		if o.OnStep != nil {
			o.OnStep(st, []int32{int32(cur - 1)})
		}
		if o.OnBlock != nil {
			o.OnBlock(st.Block, cur, canvas)
		}
		if stop {
			break
		}
	}
	g.Decoded = cur - len(prompt)
	g.Canvas = canvas
	g.Answer = canvas[len(prompt):]
	g.Duration = time.Since(start)
	return g, nil
}

// decoderLabel names a decoder in messages.
func decoderLabel(d Decoder) string {
	switch d := d.(type) {
	case Threshold:
		return fmt.Sprintf("threshold:%g", d.T)
	case RandomRemask:
		return "random"
	case Guided:
		return Decoding{Kind: DecodeGuided, T: d.Tau, K: d.TopK}.String()
	}
	return fmt.Sprintf("%T", d)
}

// arCache is the exact K/V cache of one autoregressive request: every
// layer's keys (RoPE applied) and values of the request's rows, in
// buffers the forward writes and attends over in place (KVHolder). Rows
// 0..have-1 hold final K/V; a forward over cur tokens computes rows
// have..cur-1 at every layer (the prompt on the first, then the one token
// decoded since).
type arCache struct {
	b    backend.Backend
	k, v []backend.Tensor // per layer [n, kv_dim]
	have int
	rows []int32
}

// newARCache allocates the buffers of a request of n tokens (prompt and
// answer) with the backend's NewKV, so that attention lays out only the
// rows written since the last step where the backend keeps its layout.
func newARCache(m *model.Network, n int) *arCache {
	p := &arCache{b: m.Backend, k: make([]backend.Tensor, len(m.Blocks)), v: make([]backend.Tensor, len(m.Blocks))}
	for l := range p.k {
		p.k[l], p.v[l] = backend.NewKV(p.b, n, m.Config.KVDim())
	}
	return p
}

// plan is the cache as the plan of a forward over the first cur tokens.
func (p *arCache) plan(cur int) model.Plan {
	p.rows = p.rows[:0]
	for i := p.have; i < cur; i++ {
		p.rows = append(p.rows, int32(i))
	}
	return p
}

func (p *arCache) free() {
	for l := range p.k {
		p.b.Free(p.k[l])
		p.b.Free(p.v[l])
	}
	p.k, p.v = nil, nil
}

func (p *arCache) Rows(int) []int32 { return p.rows }

func (p *arCache) Hidden(l int, _ []int32, _ backend.Tensor) error {
	return fmt.Errorf("model: the autoregressive cache computes the same rows at every layer (layer %d)", l)
}

// KV supplies the kept rows where the forward cannot attend over the
// buffers in place.
func (p *arCache) KV(l int, rows []int32, k, v backend.Tensor) error {
	p.b.CopyRows(k, rows, p.k[l], rows)
	p.b.CopyRows(v, rows, p.v[l], rows)
	return nil
}

// KVBuffers hands the forward the kept K/V (KVHolder): it writes the
// computed rows into them, so Observe keeps nothing.
func (p *arCache) KVBuffers(l int) (k, v backend.Tensor) { return p.k[l], p.v[l] }

func (p *arCache) Observe(int, []int32, backend.Tensor, backend.Tensor, backend.Tensor) {}
