package model

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/dlmcache/dlmcache/internal/testutil"
	"github.com/dlmcache/dlmcache/model/backend"
	"github.com/dlmcache/dlmcache/model/cpu"
	"github.com/dlmcache/dlmcache/model/safetensors"
)

// blockCausal returns m with its config made block-causal with blocks of
// B (and the token shift where shift), sharing m's weights.
func blockCausal(m *Network, B int, shift bool) *Network {
	c := *m.Config
	c.BlockCausal, c.BlockSize, c.ShiftLogits = true, B, shift
	bc := *m
	bc.Config = &c
	return &bc
}

// blockCausalF32 loads tiny-f32 and returns it, its layer made block-causal
// in blocks of B, and golden.json's input ids.
func blockCausalF32(t *testing.T, B int) (*Checkpoint, *Network, []int32) {
	t.Helper()
	m, g, _ := loadFixture(t, "tiny-f32")
	return m, blockCausal(m.Network, B, false), g.InputIDs
}

// refHost holds what refForward's pieces need: the config, the backend the
// weights are read from, the position ids and the block size B.
type refHost struct {
	c   *Config
	b   backend.Backend
	pos []int32
	B   int
}

// host is weight w as float64 rows.
func (r refHost) host(w backend.Tensor) [][]float64 {
	f := r.b.ToHost(w, nil)
	out := make([][]float64, w.Rows())
	for i := range out {
		out[i] = make([]float64, w.Cols())
		for j := range out[i] {
			out[i][j] = float64(f[i*w.Cols()+j])
		}
	}
	return out
}

// refMul is x · wᵀ.
func refMul(x, w [][]float64) [][]float64 {
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

// norm is the RMSNorm of x's rows with weight w.
func (r refHost) norm(x [][]float64, w backend.Tensor) [][]float64 {
	g := r.host(w)[0]
	out := make([][]float64, len(x))
	for i, row := range x {
		var ss float64
		for _, v := range row {
			ss += v * v
		}
		s := 1 / math.Sqrt(ss/float64(len(row))+r.c.RMSNormEps)
		out[i] = make([]float64, len(row))
		for j, v := range row {
			out[i][j] = v * s * g[j]
		}
	}
	return out
}

// rope rotates each head of x's rows (rotate-half) by its position id.
func (r refHost) rope(x [][]float64) {
	hd := r.c.HeadDim()
	for i, row := range x {
		for h := 0; h < len(row)/hd; h++ {
			v := row[h*hd : (h+1)*hd]
			for j := 0; j < hd/2; j++ {
				a := float64(r.pos[i]) * math.Pow(r.c.RopeTheta, -2*float64(j)/float64(hd))
				x0, x1 := v[j], v[j+hd/2]
				v[j], v[j+hd/2] = x0*math.Cos(a)-x1*math.Sin(a), x1*math.Cos(a)+x0*math.Sin(a)
			}
		}
	}
}

// sees reports whether the query of row i reads the key of row j.
func (r refHost) sees(i, j int) bool { return r.B == 0 || int(r.pos[j])/r.B <= int(r.pos[i])/r.B }

// attention is the masked softmax attention of q over k and v, the heads
// grouped onto the K/V heads.
func (r refHost) attention(q, k, v [][]float64) [][]float64 {
	c, hd, n := r.c, r.c.HeadDim(), len(q)
	group := c.NHeads / c.NKVHeads
	att := make([][]float64, n)
	for i := range n {
		att[i] = make([]float64, c.DModel)
		for h := range c.NHeads {
			kh := h / group
			s := make([]float64, n)
			mx := math.Inf(-1)
			for j := range n {
				if !r.sees(i, j) {
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
				if r.sees(i, j) {
					s[j] = math.Exp(s[j] - mx)
					sum += s[j]
				}
			}
			for j := range n {
				if r.sees(i, j) {
					for e := range hd {
						att[i][h*hd+e] += s[j] / sum * v[j][kh*hd+e]
					}
				}
			}
		}
	}
	return att
}

// refForward is a plain float64 forward of the LLaDA layer on the host,
// written from the layer's definition with the block-causal mask as a
// mask over every key (query at position id p reads the key at p' iff
// floor(p'/B) <= floor(p/B); B = 0: every key): the reference the
// block-wise attention of the forward is checked against. It returns the
// logits of every row.
func refForward(t *testing.T, m *Network, toks, pos []int32, B int) [][]float64 {
	t.Helper()
	r := refHost{c: m.Config, b: m.Backend, pos: pos, B: B}
	emb := r.host(m.Embed)
	x := make([][]float64, len(toks))
	for i, tk := range toks {
		x[i] = slices.Clone(emb[tk])
	}
	for l := range m.Blocks {
		blk := &m.Blocks[l]
		a := r.norm(x, blk.AttnNorm)
		q, k, v := refMul(a, r.host(blk.Q)), refMul(a, r.host(blk.K)), refMul(a, r.host(blk.V))
		r.rope(q)
		r.rope(k)
		o := refMul(r.attention(q, k, v), r.host(blk.AttnOut))
		for i := range x {
			for j := range x[i] {
				x[i][j] += o[i][j]
			}
		}
		f := r.norm(x, blk.FFNorm)
		g, u := refMul(f, r.host(blk.Gate)), refMul(f, r.host(blk.Up))
		for i := range g {
			for j, gv := range g[i] {
				g[i][j] = gv / (1 + math.Exp(-gv)) * u[i][j]
			}
		}
		y := refMul(g, r.host(blk.Down))
		for i := range x {
			for j := range x[i] {
				x[i][j] += y[i][j]
			}
		}
	}
	return refMul(r.norm(x, m.Norm), r.host(m.Head))
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
		bc := blockCausal(m.Network, tc.B, false)
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
		if e := testutil.RelErr(out.Logits, want); e > 1e-5 {
			t.Errorf("%s: relative error %.3g > 1e-5 against the masked reference", tc.name, e)
		}
		outs, err := bc.ForwardBatch([]Input{{Tokens: ids[:20], LogitRows: []int32{3}}, in}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if e := testutil.RelErr(outs[1].Logits, want); e > 1e-5 {
			t.Errorf("%s in a batch: relative error %.3g > 1e-5 against the masked reference", tc.name, e)
		}
		copies := *bc
		copies.Backend = noViews{bc.Backend}
		cp, err := copies.Forward(in, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(cp.Logits, out.Logits) {
			t.Errorf("%s: logits with views and with copies differ (relative error %.3g)", tc.name, testutil.RelErr(cp.Logits, out.Logits))
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
	if e := testutil.RelErr(out.Logits, flat32(refForward(t, m.Network, ids, all, 0), all)); e > 1e-5 {
		t.Errorf("bidirectional: relative error %.3g > 1e-5 against the reference", e)
	}
}

// TestBlockCausalLaterBlocksDoNotMatter: a position's logits do not change
// when the tokens of later blocks change, or when the canvas ends after
// its block.
func TestBlockCausalLaterBlocksDoNotMatter(t *testing.T) {
	const B = 8
	m, bc, ids := blockCausalF32(t, B)
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
		t.Errorf("later blocks masked: logits of blocks 0-1 moved (relative error %.3g)", testutil.RelErr(got.Logits, base.Logits))
	}
	cut, err := bc.Forward(Input{Tokens: ids[:2*B], LogitRows: rows}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// A shorter canvas is a product of fewer rows: the same values up to
	// the matrix library's rounding.
	if e := testutil.RelErr(cut.Logits, base.Logits); e > 1e-5 {
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
	got, err := blockCausal(m.Network, len(g.InputIDs), false).Forward(in, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Logits, want.Logits) || got.FLOPs != want.FLOPs {
		t.Errorf("one block: logits differ (relative error %.3g) or FLOPs %g != %g", testutil.RelErr(got.Logits, want.Logits), got.FLOPs, want.FLOPs)
	}
}

// TestBlockCausalPlan: a plan that computes only the last block (the K/V
// of earlier rows from a full forward's capture) reproduces the full
// forward's logits of that block: the block-causal forward reads the
// plan's K/V as it reads its own.
func TestBlockCausalPlan(t *testing.T) {
	const B = 8
	m, bc, ids := blockCausalF32(t, B)
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
	if e := testutil.RelErr(got.Logits, want.Logits); e > 1e-5 {
		t.Errorf("last block from the plan's K/V: relative error %.3g > 1e-5", e)
	}
	if got.RowsComputed != B*len(m.Blocks) {
		t.Errorf("%d rows computed, want %d", got.RowsComputed, B*len(m.Blocks))
	}
}

// TestKVHolder: a plan holding the K/V in buffers of its own (an exact
// cache's) gets the logits of the full forward from computing the last
// block only — with buffers of exactly the input's rows, with longer ones
// (read through a view, or completed through KV on a backend without
// views), alone and in a batch — and finds every computed row's K/V
// written into its buffers, the other rows untouched.
func TestKVHolder(t *testing.T) {
	const B = 8
	m, bc, ids := blockCausalF32(t, B)
	n, kvDim := len(ids), m.Config.KVDim()
	last := iotaFrom(n-B, B)
	fc := &fullCapture{capture: capture{b: m.Backend}}
	want, err := bc.Forward(Input{Tokens: ids, LogitRows: last}, fc)
	if err != nil {
		t.Fatal(err)
	}
	copies := *bc
	copies.Backend = noViews{bc.Backend}
	for _, tc := range []struct {
		name  string
		lm    *Network
		extra int // buffer rows after the input's
		batch bool
		viaKV bool // the forward completes its own copy through KV
	}{
		{"n rows", bc, 0, false, false},
		{"longer, view", bc, 5, false, false},
		{"longer, view, in a batch", bc, 5, true, false},
		{"n rows, no views", &copies, 0, false, false},
		{"longer, no views", &copies, 5, false, true},
	} {
		b := tc.lm.Backend
		N := n + tc.extra
		const mark = 7.5 // rows the forward must not write
		h := &kvHolder{b: b, rows: last}
		for l := range m.Blocks {
			k, v := make([]float32, N*kvDim), make([]float32, N*kvDim)
			for i := range k {
				k[i], v[i] = mark, mark
			}
			copy(k, fc.k[l][:(n-B)*kvDim])
			copy(v, fc.v[l][:(n-B)*kvDim])
			h.k, h.v = append(h.k, b.FromHost(N, kvDim, k)), append(h.v, b.FromHost(N, kvDim, v))
		}
		in := Input{Tokens: ids, LogitRows: last}
		var got *Output
		if tc.batch {
			outs, err := tc.lm.ForwardBatch([]Input{{Tokens: ids[:20], LogitRows: []int32{3}}, in}, []Plan{nil, h})
			if err != nil {
				t.Fatal(err)
			}
			got = outs[1]
		} else if got, err = tc.lm.Forward(in, h); err != nil {
			t.Fatal(err)
		}
		if e := testutil.RelErr(got.Logits, want.Logits); e > 1e-5 {
			t.Errorf("%s: relative error %.3g > 1e-5 against the full forward", tc.name, e)
		}
		if (h.kvCalls > 0) != tc.viaKV {
			t.Errorf("%s: %d KV calls", tc.name, h.kvCalls)
		}
		for l := range m.Blocks {
			k := b.ToHost(h.k[l], nil)
			if e := testutil.RelErr(k[(n-B)*kvDim:n*kvDim], fc.k[l][(n-B)*kvDim:]); e > 1e-5 {
				t.Errorf("%s: layer %d: the computed rows' K in the buffer: relative error %.3g", tc.name, l, e)
			}
			if !slices.Equal(k[:(n-B)*kvDim], fc.k[l][:(n-B)*kvDim]) {
				t.Errorf("%s: layer %d: rows not computed changed in the buffer", tc.name, l)
			}
			for _, x := range k[n*kvDim:] {
				if x != mark {
					t.Fatalf("%s: layer %d: a buffer row after the input's was written", tc.name, l)
				}
			}
		}
	}
}

// kvHolder computes rows and holds every layer's K/V (KVHolder).
type kvHolder struct {
	b       backend.Backend
	rows    []int32
	k, v    []backend.Tensor
	kvCalls int
}

func (h *kvHolder) Rows(int) []int32                          { return h.rows }
func (h *kvHolder) Hidden(int, []int32, backend.Tensor) error { return fmt.Errorf("unexpected") }
func (h *kvHolder) KV(l int, rows []int32, k, v backend.Tensor) error {
	h.kvCalls++
	h.b.CopyRows(k, rows, h.k[l], rows)
	h.b.CopyRows(v, rows, h.v[l], rows)
	return nil
}
func (h *kvHolder) Observe(int, []int32, backend.Tensor, backend.Tensor, backend.Tensor) {}
func (h *kvHolder) KVBuffers(l int) (backend.Tensor, backend.Tensor)                     { return h.k[l], h.v[l] }

// TestShiftLogits: with the token shift, position p's logits are row
// p-1's (row 0 its own).
func TestShiftLogits(t *testing.T) {
	m, g, _ := loadFixture(t, "tiny-f32")
	ids := g.InputIDs
	n := len(ids)
	plain, err := blockCausal(m.Network, 8, false).Forward(Input{Tokens: ids, LogitRows: iota32(n)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	rows := []int32{0, 1, 9, int32(n - 1)}
	shifted, err := blockCausal(m.Network, 8, true).Forward(Input{Tokens: ids, LogitRows: rows}, nil)
	if err != nil {
		t.Fatal(err)
	}
	e := m.Config.Embeddings()
	for i, p := range rows {
		src := max(p-1, 0)
		// A head product of another row count: equal up to rounding.
		if r := testutil.RelErr(shifted.Logits[i*e:(i+1)*e], plain.Logits[int(src)*e:int(src+1)*e]); r > 1e-5 {
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
	if _, err := blockCausal(m.Network, B, false).Forward(Input{Tokens: ids}, ob); err != nil {
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

// blockGolden is testdata/tiny-block/golden.json: an independent PyTorch
// reference of the block-causal forward and its block decoding
// (tools/golden/make_block_golden.py, tools/pyllada in float64).
type blockGolden struct {
	InputIDs    []int32           `json:"input_ids"`
	PositionIDs []int32           `json:"position_ids"`
	Generate    []blockGeneration `json:"generate"`
}

type blockGeneration = testutil.BlockGeneration

func loadBlockGolden(t *testing.T, be *cpu.Backend) (*Checkpoint, *blockGolden, *safetensors.Set) {
	t.Helper()
	return loadGolden[blockGolden](t, "tiny-block", be)
}

// TestBlockCausalForwardGolden: the block-causal forward of the tiny-block
// checkpoint (blocks of 8, a 45-token canvas whose last block is partial)
// equals the PyTorch reference within 1e-4: logits and every layer's K/V,
// the canvas cut at a block boundary and inside a block, the same input
// inside a batch, and the same weights run bidirectionally.
func TestBlockCausalForwardGolden(t *testing.T) {
	for lib, be := range goldenBackends(t) {
		t.Run(lib, func(t *testing.T) {
			m, g, gs := loadBlockGolden(t, be)
			if m.Config.CausalBlock() != 8 {
				t.Fatalf("tiny-block: causal block %d, want 8", m.Config.CausalBlock())
			}
			const tol = 1e-4
			ids, n := g.InputIDs, len(g.InputIDs)
			cap := &capture{b: m.Backend}
			out, err := m.Forward(Input{Tokens: ids, Positions: g.PositionIDs, LogitRows: iota32(n)}, cap)
			if err != nil {
				t.Fatal(err)
			}
			check := func(name string, got []float32) {
				t.Helper()
				if e := testutil.RelErr(got, goldenF32(t, gs, name)); e > tol {
					t.Errorf("%s: relative error %.3g > %g", name, e, tol)
				}
			}
			check("logits", out.Logits)
			for l := range m.Blocks {
				check(fmt.Sprintf("k.%d", l), cap.k[l])
				check(fmt.Sprintf("v.%d", l), cap.v[l])
			}
			for _, cut := range []int{24, 29} {
				o, err := m.Forward(Input{Tokens: ids[:cut], LogitRows: iota32(cut)}, nil)
				if err != nil {
					t.Fatal(err)
				}
				check(fmt.Sprintf("cut%d.logits", cut), o.Logits)
			}
			outs, err := m.ForwardBatch([]Input{{Tokens: ids[:29], LogitRows: iota32(29)}, {Tokens: ids, LogitRows: iota32(n)}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			check("cut29.logits", outs[0].Logits)
			check("logits", outs[1].Logits)
			bidir := *m.Config
			bidir.BlockCausal = false
			bm := *m.Network
			bm.Config = &bidir
			o, err := bm.Forward(Input{Tokens: ids, LogitRows: iota32(n)}, nil)
			if err != nil {
				t.Fatal(err)
			}
			check("bidir.logits", o.Logits)
		})
	}
}
