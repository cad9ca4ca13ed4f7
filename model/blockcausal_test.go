package model

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/dlmcache/dlmcache/model/backend"
)

// blockCausal returns m with its config made block-causal with blocks of
// B (and the token shift where shift), sharing m's weights.
func blockCausal(m *LLaDA, B int, shift bool) *LLaDA {
	c := *m.Config
	c.BlockCausal, c.BlockSize, c.ShiftLogits = true, B, shift
	bc := *m
	bc.Config = &c
	return &bc
}

// refForward is a plain float64 forward of the LLaDA layer on the host,
// written from the layer's definition with the block-causal mask as a
// mask over every key (query at position id p reads the key at p' iff
// floor(p'/B) <= floor(p/B); B = 0: every key): the reference the
// block-wise attention of the forward is checked against. It returns the
// logits of every row.
func refForward(t *testing.T, m *LLaDA, toks, pos []int32, B int) [][]float64 {
	t.Helper()
	c, b := m.Config, m.Backend
	host := func(w backend.Tensor) [][]float64 {
		f := b.ToHost(w, nil)
		out := make([][]float64, w.Rows())
		for i := range out {
			out[i] = make([]float64, w.Cols())
			for j := range out[i] {
				out[i][j] = float64(f[i*w.Cols()+j])
			}
		}
		return out
	}
	mul := func(x, w [][]float64) [][]float64 { // x · wᵀ
		out := make([][]float64, len(x))
		for i := range x {
			out[i] = make([]float64, len(w))
			for o := range w {
				var s float64
				for j, v := range x[i] {
					s += v * w[o][j]
				}
				out[i][o] = s
			}
		}
		return out
	}
	norm := func(x [][]float64, w backend.Tensor) [][]float64 {
		g := host(w)[0]
		out := make([][]float64, len(x))
		for i, r := range x {
			var ss float64
			for _, v := range r {
				ss += v * v
			}
			s := 1 / math.Sqrt(ss/float64(len(r))+c.RMSNormEps)
			out[i] = make([]float64, len(r))
			for j, v := range r {
				out[i][j] = v * s * g[j]
			}
		}
		return out
	}
	hd := c.HeadDim()
	rope := func(x [][]float64) {
		for i, r := range x {
			for h := 0; h < len(r)/hd; h++ {
				v := r[h*hd : (h+1)*hd]
				for j := 0; j < hd/2; j++ {
					a := float64(pos[i]) * math.Pow(c.RopeTheta, -2*float64(j)/float64(hd))
					x0, x1 := v[j], v[j+hd/2]
					v[j], v[j+hd/2] = x0*math.Cos(a)-x1*math.Sin(a), x1*math.Cos(a)+x0*math.Sin(a)
				}
			}
		}
	}
	sees := func(i, j int) bool { return B == 0 || int(pos[j])/B <= int(pos[i])/B }
	emb := host(m.Embed)
	x := make([][]float64, len(toks))
	for i, tk := range toks {
		x[i] = slices.Clone(emb[tk])
	}
	n, group := len(toks), c.NHeads/c.NKVHeads
	for l := range m.Blocks {
		blk := &m.Blocks[l]
		a := norm(x, blk.AttnNorm)
		q, k, v := mul(a, host(blk.Q)), mul(a, host(blk.K)), mul(a, host(blk.V))
		rope(q)
		rope(k)
		att := make([][]float64, n)
		for i := range n {
			att[i] = make([]float64, c.DModel)
			for h := range c.NHeads {
				kh := h / group
				s := make([]float64, n)
				mx := math.Inf(-1)
				for j := range n {
					if !sees(i, j) {
						continue
					}
					for e := range hd {
						s[j] += q[i][h*hd+e] * k[j][kh*hd+e]
					}
					s[j] /= math.Sqrt(float64(hd))
					mx = max(mx, s[j])
				}
				var sum float64
				for j := range n {
					if sees(i, j) {
						s[j] = math.Exp(s[j] - mx)
						sum += s[j]
					}
				}
				for j := range n {
					if sees(i, j) {
						for e := range hd {
							att[i][h*hd+e] += s[j] / sum * v[j][kh*hd+e]
						}
					}
				}
			}
		}
		o := mul(att, host(blk.AttnOut))
		for i := range x {
			for j := range x[i] {
				x[i][j] += o[i][j]
			}
		}
		f := norm(x, blk.FFNorm)
		g, u := mul(f, host(blk.Gate)), mul(f, host(blk.Up))
		for i := range g {
			for j, gv := range g[i] {
				g[i][j] = gv / (1 + math.Exp(-gv)) * u[i][j]
			}
		}
		y := mul(g, host(blk.Down))
		for i := range x {
			for j := range x[i] {
				x[i][j] += y[i][j]
			}
		}
	}
	return mul(norm(x, m.Norm), host(m.Head))
}

// flat32 flattens rows of logits to float32 for relErr.
func flat32(rows [][]float64, idx []int32) []float32 {
	var out []float32
	for _, i := range idx {
		for _, v := range rows[i] {
			out = append(out, float32(v))
		}
	}
	return out
}

// TestBlockCausalForwardMatchesMaskedReference: the block-wise attention
// equals attention over every key with the block-causal mask (a float64
// host forward), for block sizes that cut the canvas at and between
// blocks, with gapped position ids, alone and inside a batch, on a backend
// with views and on one without (copies).
func TestBlockCausalForwardMatchesMaskedReference(t *testing.T) {
	m, g, _ := loadFixture(t, "tiny-f32")
	ids := g.InputIDs
	all := iota32(len(ids))
	for _, tc := range []struct {
		name string
		B    int
		pos  []int32
	}{
		{"B=4", 4, nil},
		{"B=5", 5, nil},
		{"B=32", 32, nil},
		{"B=8 gapped positions", 8, g.Pos2.PositionIDs},
	} {
		bc := blockCausal(m.LLaDA, tc.B, false)
		pos := tc.pos
		if pos == nil {
			pos = all
		}
		want := flat32(refForward(t, bc, ids, pos, tc.B), all)
		in := Input{Tokens: ids, Positions: tc.pos, LogitRows: all}
		out, err := bc.Forward(in, nil)
		if err != nil {
			t.Fatal(err)
		}
		if e := relErr(out.Logits, want); e > 1e-5 {
			t.Errorf("%s: relative error %.3g > 1e-5 against the masked reference", tc.name, e)
		}
		outs, err := bc.ForwardBatch([]Input{{Tokens: ids[:20], LogitRows: []int32{3}}, in}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if e := relErr(outs[1].Logits, want); e > 1e-5 {
			t.Errorf("%s in a batch: relative error %.3g > 1e-5 against the masked reference", tc.name, e)
		}
		copies := *bc
		copies.Backend = noViews{bc.Backend}
		cp, err := copies.Forward(in, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(cp.Logits, out.Logits) {
			t.Errorf("%s: logits with views and with copies differ (relative error %.3g)", tc.name, relErr(cp.Logits, out.Logits))
		}
		if out.FLOPs >= m.Config.StepFLOPs(len(ids), len(ids), len(ids)) {
			t.Errorf("%s: %g FLOPs, not fewer than the bidirectional forward's", tc.name, out.FLOPs)
		}
	}
	// The reference itself: bidirectional (B = 0) it is the model's forward.
	out, err := m.Forward(Input{Tokens: ids, LogitRows: all}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if e := relErr(out.Logits, flat32(refForward(t, m.LLaDA, ids, all, 0), all)); e > 1e-5 {
		t.Errorf("bidirectional: relative error %.3g > 1e-5 against the reference", e)
	}
}

// TestBlockCausalLaterBlocksDoNotMatter: a position's logits do not change
// when the tokens of later blocks change, or when the canvas ends after
// its block.
func TestBlockCausalLaterBlocksDoNotMatter(t *testing.T) {
	m, g, _ := loadFixture(t, "tiny-f32")
	const B = 8
	bc := blockCausal(m.LLaDA, B, false)
	ids := g.InputIDs
	n := len(ids)
	rows := iota32(2 * B) // blocks 0 and 1
	base, err := bc.Forward(Input{Tokens: ids, LogitRows: rows}, nil)
	if err != nil {
		t.Fatal(err)
	}
	changed := slices.Clone(ids)
	for i := 2 * B; i < n; i++ {
		changed[i] = int32(m.Config.MaskTokenID)
	}
	got, err := bc.Forward(Input{Tokens: changed, LogitRows: rows}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Logits, base.Logits) {
		t.Errorf("later blocks masked: logits of blocks 0-1 moved (relative error %.3g)", relErr(got.Logits, base.Logits))
	}
	cut, err := bc.Forward(Input{Tokens: ids[:2*B], LogitRows: rows}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// A shorter canvas is a product of fewer rows: the same values up to
	// the matrix library's rounding.
	if e := relErr(cut.Logits, base.Logits); e > 1e-5 {
		t.Errorf("canvas cut after block 1: relative error %.3g > 1e-5", e)
	}
	// A change inside block 1 does move block 1 (the test can fail).
	changed = slices.Clone(ids)
	changed[B+1] = int32(m.Config.MaskTokenID)
	moved, err := bc.Forward(Input{Tokens: changed, LogitRows: rows}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Equal(moved.Logits[B*m.Config.Embeddings():], base.Logits[B*m.Config.Embeddings():]) {
		t.Error("a token changed inside block 1 left block 1's logits unchanged")
	}
	if !slices.Equal(moved.Logits[:B*m.Config.Embeddings()], base.Logits[:B*m.Config.Embeddings()]) {
		t.Error("a token changed inside block 1 moved block 0's logits")
	}
}

// TestBlockCausalOneBlockIsBidirectional: a block at least as long as the
// canvas is the bidirectional forward, bit for bit (one attention over
// every key, the bidirectional model's call).
func TestBlockCausalOneBlockIsBidirectional(t *testing.T) {
	m, g, _ := loadFixture(t, "tiny-f32")
	in := Input{Tokens: g.InputIDs, LogitRows: iota32(len(g.InputIDs))}
	want, err := m.Forward(in, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := blockCausal(m.LLaDA, len(g.InputIDs), false).Forward(in, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Logits, want.Logits) || got.FLOPs != want.FLOPs {
		t.Errorf("one block: logits differ (relative error %.3g) or FLOPs %g != %g", relErr(got.Logits, want.Logits), got.FLOPs, want.FLOPs)
	}
}

// TestBlockCausalPlan: a plan that computes only the last block (the K/V
// of earlier rows from a full forward's capture) reproduces the full
// forward's logits of that block: the block-causal forward reads the
// plan's K/V as it reads its own.
func TestBlockCausalPlan(t *testing.T) {
	m, g, _ := loadFixture(t, "tiny-f32")
	const B = 8
	bc := blockCausal(m.LLaDA, B, false)
	ids := g.InputIDs
	n := len(ids)
	last := iotaFrom(n-B, B)
	fc := &fullCapture{capture: capture{b: m.Backend}}
	want, err := bc.Forward(Input{Tokens: ids, LogitRows: last}, fc)
	if err != nil {
		t.Fatal(err)
	}
	p := &replay{b: m.Backend, n: n, from: n - B, upTo: len(m.Blocks), k: fc.k, v: fc.v, h: fc.h,
		d: m.Config.DModel, kvDim: m.Config.KVDim()}
	got, err := bc.Forward(Input{Tokens: ids, LogitRows: last}, p)
	if err != nil {
		t.Fatal(err)
	}
	if e := relErr(got.Logits, want.Logits); e > 1e-5 {
		t.Errorf("last block from the plan's K/V: relative error %.3g > 1e-5", e)
	}
	if got.RowsComputed != B*len(m.Blocks) {
		t.Errorf("%d rows computed, want %d", got.RowsComputed, B*len(m.Blocks))
	}
}

// TestShiftLogits: with the token shift, position p's logits are row
// p-1's (row 0 its own).
func TestShiftLogits(t *testing.T) {
	m, g, _ := loadFixture(t, "tiny-f32")
	ids := g.InputIDs
	n := len(ids)
	plain, err := blockCausal(m.LLaDA, 8, false).Forward(Input{Tokens: ids, LogitRows: iota32(n)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	rows := []int32{0, 1, 9, int32(n - 1)}
	shifted, err := blockCausal(m.LLaDA, 8, true).Forward(Input{Tokens: ids, LogitRows: rows}, nil)
	if err != nil {
		t.Fatal(err)
	}
	e := m.Config.Embeddings()
	for i, p := range rows {
		src := max(p-1, 0)
		// A head product of another row count: equal up to rounding.
		if r := relErr(shifted.Logits[i*e:(i+1)*e], plain.Logits[int(src)*e:int(src+1)*e]); r > 1e-5 {
			t.Errorf("shifted logits of position %d are not row %d's (relative error %.3g)", p, src, r)
		}
	}
}

// TestBlockCausalAttentionWeights: the attention weights a plan observes
// are 0 on the keys of later blocks and sum to 1 per row.
func TestBlockCausalAttentionWeights(t *testing.T) {
	m, g, _ := loadFixture(t, "tiny-f32")
	const B = 8
	ids := g.InputIDs
	n := len(ids)
	ob := &attnRecorder{}
	if _, err := blockCausal(m.LLaDA, B, false).Forward(Input{Tokens: ids}, ob); err != nil {
		t.Fatal(err)
	}
	if len(ob.probs) != len(m.Blocks) {
		t.Fatalf("%d layers observed", len(ob.probs))
	}
	for l, p := range ob.probs {
		for i := range n {
			var sum float64
			for j := range n {
				w := p[i*n+j]
				if j/B > i/B && w != 0 {
					t.Fatalf("layer %d: row %d puts %g on key %d of a later block", l, i, w, j)
				}
				sum += float64(w)
			}
			if math.Abs(sum-1) > 1e-5 {
				t.Fatalf("layer %d: row %d's weights sum to %g", l, i, sum)
			}
		}
	}
}

// attnRecorder is a plan that computes everything and records every
// layer's attention weights.
type attnRecorder struct {
	capture
	probs [][]float32
}

func (a *attnRecorder) Observe(int, []int32, backend.Tensor, backend.Tensor, backend.Tensor) {}
func (a *attnRecorder) WantsAttention(int) bool                                              { return true }
func (a *attnRecorder) ObserveAttention(_ int, _ []int32, p []float32) {
	a.probs = append(a.probs, p)
}

// TestBlockCausalBadInput: decreasing position ids are refused on a
// block-causal model (its blocks' keys must be a prefix of the rows), and
// a config without a block size is refused naming the field.
func TestBlockCausalBadInput(t *testing.T) {
	m, g, _ := loadFixture(t, "tiny-f32")
	bc := blockCausal(m.LLaDA, 8, false)
	if _, err := bc.Forward(Input{Tokens: g.InputIDs[:3], Positions: []int32{0, 2, 1}}, nil); err == nil {
		t.Error("decreasing position ids: no error")
	}
	for _, tc := range []struct{ cfg, want string }{
		{`"block_causal": true`, "block_size"},
		{`"block_causal": true, "block_size": 0`, "block_size"},
		{`"block_size": -1`, "block_size"},
	} {
		raw := `{"d_model": 8, "n_layers": 1, "n_heads": 2, "mlp_hidden_size": 8, "vocab_size": 10, ` + tc.cfg + `}`
		if _, err := ParseConfig([]byte(raw)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one naming %s", tc.cfg, err, tc.want)
		}
	}
	c, err := ParseConfig([]byte(`{"d_model": 8, "n_layers": 1, "n_heads": 2, "mlp_hidden_size": 8, "vocab_size": 10, "block_causal": true, "block_size": 4, "shift_logits": true}`))
	if err != nil || c.CausalBlock() != 4 || !c.ShiftLogits {
		t.Errorf("block-causal config: %+v, %v", c, err)
	}
}
