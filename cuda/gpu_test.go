//go:build cuda && gpu

// GPU-only tests: the CUDA backend against the CPU backend. A test binary
// that imports gorgonia.org/cu exits at start-up on a machine without a
// GPU, hence the extra tag. Run with `make gpu-test`.

package cuda

import (
	"context"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/dlmcache/dlmcache/cache"
	"github.com/dlmcache/dlmcache/internal/testutil"
	"github.com/dlmcache/dlmcache/model"
	"github.com/dlmcache/dlmcache/model/backend"
	"github.com/dlmcache/dlmcache/model/cpu"
	"github.com/dlmcache/dlmcache/model/load"
	"github.com/dlmcache/dlmcache/model/sample"
	"github.com/dlmcache/dlmcache/regime"
)

const tinyBF16 = "../model/testdata/tiny-bf16"

// modes are the two precisions with the tolerance each must meet against
// the CPU backend (max |a−b| / max |b| over a tensor). The default rounds
// activations to BF16 before each product (8 significant bits).
var modes = []struct {
	name string
	opts Options
	tol  float64
}{
	{"bf16", Options{}, 3e-2},
	{"f32", Options{F32: true}, 1e-4},
	{"kernel-attention", Options{F32: true, KernelAttention: true}, 1e-4},
}

func newGPU(t testing.TB, o Options) *Backend {
	t.Helper()
	b, err := NewWithOptions(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	t.Logf("device: %s", b.Device())
	return b
}

// loadTinyOn loads the tiny BF16 fixture on b; it is closed when the test
// ends.
func loadTinyOn(t testing.TB, b backend.Backend) *load.Model {
	t.Helper()
	m, err := load.Load(tinyBF16, b)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func randVec(rng *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64())
	}
	return v
}

// bf16Bytes rounds v to BF16 and returns the little-endian bytes and the
// rounded values.
func bf16Bytes(v []float32) ([]byte, []float32) {
	raw := make([]byte, 2*len(v))
	r := make([]float32, len(v))
	for i, x := range v {
		u := math.Float32bits(x)
		u += 0x7fff + (u>>16)&1
		h := uint16(u >> 16)
		raw[2*i], raw[2*i+1] = byte(h), byte(h>>8)
		r[i] = math.Float32frombits(uint32(h) << 16)
	}
	return raw, r
}

func f32Bytes(v []float32) []byte {
	raw := make([]byte, 4*len(v))
	for i, x := range v {
		u := math.Float32bits(x)
		raw[4*i], raw[4*i+1], raw[4*i+2], raw[4*i+3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
	}
	return raw
}

// The shapes TestGPUOpsMatchCPU runs the operations at: opsN rows of opsD
// columns, products to opsOut columns, attention of opsH heads on opsKV kv
// heads over opsNK keys.
const opsN, opsD, opsOut, opsH, opsKV, opsNK = 37, 64, 48, 8, 2, 53

// TestGPUOpsMatchCPU runs every operation on both backends with the same inputs.
func TestGPUOpsMatchCPU(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			o := gpuCPU{t: t, g: newGPU(t, m.opts), c: cpu.New(2), rng: rand.New(rand.NewPCG(1, 2)), tol: m.tol}
			x := o.random(opsN, opsD)
			o.weightOps(x)
			o.rowOps(x)
			o.argmaxConf()
		})
	}
}

// pair is one tensor on the GPU (g) and the CPU (c).
type pair struct{ g, c backend.Tensor }

// gpuCPU is a mode of TestGPUOpsMatchCPU: the GPU backend g, the CPU one c,
// the inputs' random source and the mode's tolerance of BF16 products.
type gpuCPU struct {
	t   *testing.T
	g   *Backend
	c   *cpu.Backend
	rng *rand.Rand
	tol float64
}

func (o gpuCPU) both(rows, cols int, v []float32) pair {
	return pair{o.g.FromHost(rows, cols, v), o.c.FromHost(rows, cols, v)}
}

// random is a rows×cols pair of random values.
func (o gpuCPU) random(rows, cols int) pair { return o.both(rows, cols, randVec(o.rng, rows*cols)) }

func (o gpuCPU) empty(rows, cols int) pair { return pair{o.g.New(rows, cols), o.c.New(rows, cols)} }

// weight is a rows×cols weight of random values of type dt on both.
func (o gpuCPU) weight(rows, cols int, dt backend.DType) pair {
	v := randVec(o.rng, rows*cols)
	var raw []byte
	if dt == backend.BF16 {
		raw, _ = bf16Bytes(v)
	} else {
		raw = f32Bytes(v)
	}
	wg, err := o.g.Weight(dt, rows, cols, raw)
	if err != nil {
		o.t.Fatal(err)
	}
	wc, err := o.c.Weight(dt, rows, cols, raw)
	if err != nil {
		o.t.Fatal(err)
	}
	return pair{wg, wc}
}

// check: the GPU's p is the CPU's within tol (relative).
func (o gpuCPU) check(name string, p pair, tol float64) {
	o.t.Helper()
	a, b := o.g.ToHost(p.g, nil), o.c.ToHost(p.c, nil)
	if e := testutil.RelErr(a, b); e > tol {
		o.t.Errorf("%s: relative error %.3g > %.3g", name, e, tol)
	}
}

// weightOps: MatMul, RMSNorm and Embed with F32 and BF16 weights, on x.
func (o gpuCPU) weightOps(x pair) {
	g, c := o.g, o.c
	for _, dt := range []backend.DType{backend.F32, backend.BF16} {
		w := o.weight(opsOut, opsD, dt)
		dst := o.empty(opsN, opsOut)
		g.MatMul(dst.g, x.g, w.g)
		c.MatMul(dst.c, x.c, w.c)
		tol := o.tol
		if dt == backend.F32 {
			tol = 1e-4
		}
		o.check("MatMul "+dt.String(), dst, tol)

		nw := o.weight(1, opsD, dt)
		nr := o.empty(opsN, opsD)
		g.RMSNorm(nr.g, x.g, nw.g, 1e-5)
		c.RMSNorm(nr.c, x.c, nw.c, 1e-5)
		o.check("RMSNorm "+dt.String(), nr, 1e-5)

		tab := o.weight(50, opsD, dt)
		ids := []int32{3, 0, 49, 3, 7}
		e := o.empty(len(ids), opsD)
		g.Embed(e.g, tab.g, ids)
		c.Embed(e.c, tab.c, ids)
		o.check("Embed "+dt.String(), e, 0)
	}
}

// rowOps: RoPE, Attention, SiLUMul, Add (of x) and CopyRows (from x).
func (o gpuCPU) rowOps(x pair) {
	g, c, n, d := o.g, o.c, opsN, opsD
	hd := d / opsH
	pos := make([]int32, n)
	for i := range pos {
		pos[i] = int32(o.rng.IntN(5000))
	}
	r := o.random(n, d)
	g.RoPE(r.g, pos, hd, 500000)
	c.RoPE(r.c, pos, hd, 500000)
	o.check("RoPE", r, 1e-5)

	q := o.random(n, d)
	k := o.random(opsNK, opsKV*hd)
	v := o.random(opsNK, opsKV*hd)
	att := o.empty(n, d)
	g.Attention(att.g, q.g, k.g, v.g, opsH, opsKV)
	c.Attention(att.c, q.c, k.c, v.c, opsH, opsKV)
	o.check("Attention", att, max(o.tol, 1e-4))

	gt, up := o.random(n, d), o.random(n, d)
	g.SiLUMul(gt.g, gt.g, up.g)
	c.SiLUMul(gt.c, gt.c, up.c)
	o.check("SiLUMul", gt, 1e-5)
	g.Add(gt.g, x.g)
	c.Add(gt.c, x.c)
	o.check("Add", gt, 1e-5)

	for _, cr := range []struct {
		name     string
		dst, src []int32
	}{
		{"both nil", nil, nil},
		{"gather", nil, []int32{5, 1, 1, 36}},
		{"scatter", []int32{9, 2, 30}, nil},
		{"repeat", []int32{4, 8, 4}, []int32{0, 1, 2}},
	} {
		dst := o.random(n, d)
		g.CopyRows(dst.g, cr.dst, x.g, cr.src)
		c.CopyRows(dst.c, cr.dst, x.c, cr.src)
		o.check("CopyRows "+cr.name, dst, 0)
	}
}

// argmaxConf: the GPU's ArgmaxConf is each row's argmax and softmax
// probability there.
func (o gpuCPU) argmaxConf() {
	lg := randVec(o.rng, 5*300)
	lg[2*300+17] = 40 // a sharp row
	lg[3*300+4], lg[3*300+9] = 9, 9
	ids, conf := o.g.ArgmaxConf(o.g.FromHost(5, 300, lg))
	for i := range ids {
		row := lg[i*300 : (i+1)*300]
		want := int32(slices.Index(row, slices.Max(row)))
		var s float64
		for _, x := range row {
			s += math.Exp(float64(x - row[want]))
		}
		if ids[i] != want || math.Abs(conf[i]-1/s) > 1e-9 {
			o.t.Errorf("ArgmaxConf row %d: %d %.9f, want %d %.9f", i, ids[i], conf[i], want, 1/s)
		}
	}
}

// recorder is a plan that computes every row and keeps each layer's K/V.
type recorder struct {
	model.EveryRow
	b    backend.Backend
	k, v [][]float32
}

func (r *recorder) Observe(l int, _ []int32, _, k, v backend.Tensor) {
	r.k = append(r.k, r.b.ToHost(k, nil))
	r.v = append(r.v, r.b.ToHost(v, nil))
}

// goldenGenerations are the golden decodings of the fixture in dir.
func goldenGenerations(t *testing.T, dir string) []testutil.Generation {
	var g struct {
		Generate []testutil.Generation `json:"generate"`
	}
	testutil.ReadJSON(t, filepath.Join(dir, "golden.json"), &g)
	return g.Generate
}

// TestForwardMatchesCPU compares logits and every layer's K/V on the
// bundled tiny BF16 model.
func TestForwardMatchesCPU(t *testing.T) {
	gen := goldenGenerations(t, tinyBF16)[0]
	cm := loadTinyOn(t, cpu.New(2))
	tokens := append(slices.Clone(gen.PromptIDs), slices.Repeat([]int32{int32(cm.Config.MaskTokenID)}, gen.GenLength)...)
	rows := make([]int32, len(tokens))
	for i := range rows {
		rows[i] = int32(i)
	}
	in := model.Input{Tokens: tokens, LogitRows: rows}
	crec := &recorder{b: cm.Backend}
	cout, err := cm.Forward(in, crec)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			g := newGPU(t, m.opts)
			gm := loadTinyOn(t, g)
			grec := &recorder{b: g}
			gout, err := gm.Forward(in, grec)
			if err != nil {
				t.Fatal(err)
			}
			if e := testutil.RelErr(gout.Logits, cout.Logits); e > m.tol {
				t.Errorf("logits: relative error %.3g > %.3g", e, m.tol)
			} else {
				t.Logf("logits: relative error %.3g", e)
			}
			for l := range crec.k {
				ek, ev := testutil.RelErr(grec.k[l], crec.k[l]), testutil.RelErr(grec.v[l], crec.v[l])
				if ek > m.tol || ev > m.tol {
					t.Errorf("layer %d: K error %.3g, V error %.3g > %.3g", l, ek, ev, m.tol)
				}
			}
		})
	}
}

// TestGenerateMatchesCPU runs the golden generations on both backends. In
// F32 mode the answers must be identical; in BF16 mode a difference is
// reported, not failed: the golden prompts have proposals whose
// confidences differ by less than BF16 rounding moves them (see
// min_confidence_gap in golden.json).
func TestGenerateMatchesCPU(t *testing.T) {
	cm := loadTinyOn(t, cpu.New(2))
	for _, m := range modes[:2] {
		t.Run(m.name, func(t *testing.T) {
			g := newGPU(t, m.opts)
			gm := loadTinyOn(t, g)
			for _, gen := range goldenGenerations(t, tinyBF16) {
				o := sample.GenOptions{Regime: gen.Regime}
				want, err := sample.Generate(context.Background(), cm.Network, gen.PromptIDs, 0, o, nil)
				if err != nil {
					t.Fatal(err)
				}
				got, err := sample.Generate(context.Background(), gm.Network, gen.PromptIDs, 0, o, nil)
				if err != nil {
					t.Fatal(err)
				}
				switch {
				case slices.Equal(got.Answer, want.Answer):
				case m.opts.F32:
					t.Errorf("%s: GPU answer %v, CPU answer %v", gen.Name, got.Answer, want.Answer)
				default:
					t.Logf("%s: BF16 answer %v differs from the CPU's %v", gen.Name, got.Answer, want.Answer)
				}
			}
		})
	}
}

const tinyBlock = "../model/testdata/tiny-block"

// TestBlockCausalMatchesCPU: on the block-causal fixture (blocks of 8) the
// CUDA forward honours the block-causal mask as the CPU backend does —
// logits and every layer's K/V of a whole canvas, and of a canvas cut
// inside a block — and in F32 the exact block cache (committed blocks'
// K/V kept, a block store across requests) decodes on the GPU the tokens
// that no cache decodes there and on the CPU.
func TestBlockCausalMatchesCPU(t *testing.T) {
	cm, err := load.Load(tinyBlock, cpu.New(2))
	if err != nil {
		t.Fatal(err)
	}
	defer cm.Close()
	if cm.Config.CausalBlock() != 8 {
		t.Fatalf("%s: block size %d, want 8", tinyBlock, cm.Config.CausalBlock())
	}
	gens := goldenGenerations(t, tinyBlock)
	prompt := gens[0].PromptIDs
	canvas := append(slices.Clone(prompt), slices.Repeat([]int32{int32(cm.Config.MaskTokenID)}, 24)...)
	inputs := map[string][]int32{"canvas": canvas, "cut inside a block": canvas[:len(prompt)+7]}
	type ref struct {
		out *model.Output
		rec *recorder
	}
	want := map[string]ref{}
	for name, toks := range inputs {
		in := model.Input{Tokens: toks, LogitRows: iotaRows(len(toks))}
		rec := &recorder{b: cm.Backend}
		out, err := cm.Forward(in, rec)
		if err != nil {
			t.Fatal(err)
		}
		want[name] = ref{out, rec}
	}
	o := sample.GenOptions{Regime: regime.Regime{GenLength: 24, Steps: 24, BlockLength: 8}, Decoder: sample.Threshold{T: 0.12}}
	cpuNone, err := sample.Generate(context.Background(), cm.Network, prompt, 0, o, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			g := newGPU(t, m.opts)
			gm, err := load.Load(tinyBlock, g)
			if err != nil {
				t.Fatal(err)
			}
			defer gm.Close()
			for name, toks := range inputs {
				rec := &recorder{b: g}
				out, err := gm.Forward(model.Input{Tokens: toks, LogitRows: iotaRows(len(toks))}, rec)
				if err != nil {
					t.Fatal(err)
				}
				if e := testutil.RelErr(out.Logits, want[name].out.Logits); e > m.tol {
					t.Errorf("%s: logits: relative error %.3g > %.3g", name, e, m.tol)
				}
				for l := range rec.k {
					ek, ev := testutil.RelErr(rec.k[l], want[name].rec.k[l]), testutil.RelErr(rec.v[l], want[name].rec.v[l])
					if ek > m.tol || ev > m.tol {
						t.Errorf("%s: layer %d: K error %.3g, V error %.3g > %.3g", name, l, ek, ev, m.tol)
					}
				}
			}
			if !m.opts.F32 {
				return
			}
			none, err := sample.Generate(context.Background(), gm.Network, prompt, 0, o, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(none.Answer, cpuNone.Answer) {
				t.Errorf("no cache: GPU answer %v, CPU answer %v", none.Answer, cpuNone.Answer)
			}
			meth, err := cache.New("exact-block", cache.Options{Store: cache.NewBlockStore(g, 8, 1<<30, true, nil), Fingerprint: gm.Fingerprint})
			if err != nil {
				t.Fatal(err)
			}
			for i := range 2 { // the second request's prefix blocks come from the store
				res, err := cache.Run(context.Background(), gm.Network, meth, cache.Request{Prompt: prompt, PrefixLen: len(prompt) - 3}, o)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(res.Generation.Answer, none.Answer) {
					t.Errorf("exact-block, request %d: answer %v, no cache %v", i, res.Generation.Answer, none.Answer)
				}
				if i == 1 && res.Info.HitTokens == 0 {
					t.Errorf("exact-block, request %d: nothing served from the store", i)
				}
			}
		})
	}
}

// iotaRows is 0, 1, …, n-1.
func iotaRows(n int) []int32 {
	r := make([]int32, n)
	for i := range r {
		r[i] = int32(i)
	}
	return r
}

// BenchmarkForward8B times one full forward at LLaDA-8B shapes (32 layers,
// d 4096, 32 heads, MLP 12288, vocabulary 126464) with random BF16
// weights, over 1,024 positions with logits for the last 256.
//
//	go test -tags 'cuda gpu' -run '^$' -bench Forward8B ./cuda/
func BenchmarkForward8B(b *testing.B) {
	c := &model.Config{DModel: 4096, NLayers: 32, NHeads: 32, NKVHeads: 32, MLPHiddenSize: 12288,
		VocabSize: 126464, EmbeddingSize: 126464, RopeTheta: 500000, RMSNormEps: 1e-5, MaskTokenID: 126336}
	g := newGPU(b, Options{})
	rng := rand.New(rand.NewPCG(3, 4))
	block := make([]float32, 1<<22)
	for i := range block {
		block[i] = float32(rng.NormFloat64() * 0.02)
	}
	blockRaw, _ := bf16Bytes(block)
	weight := func(rows, cols int) backend.Tensor {
		raw := make([]byte, 2*rows*cols)
		for i := 0; i < len(raw); i += len(blockRaw) {
			copy(raw[i:], blockRaw)
		}
		w, err := g.Weight(backend.BF16, rows, cols, raw)
		if err != nil {
			b.Fatal(err)
		}
		return w
	}
	ones := make([]byte, 2*c.DModel)
	for i := 0; i < len(ones); i += 2 {
		ones[i], ones[i+1] = 0x80, 0x3f
	}
	norm := func() backend.Tensor {
		w, err := g.Weight(backend.BF16, 1, c.DModel, ones)
		if err != nil {
			b.Fatal(err)
		}
		return w
	}
	d, h := c.DModel, c.MLPHiddenSize
	m := &model.Network{Config: c, Backend: g, Embed: weight(c.Embeddings(), d), Norm: norm(), Head: weight(c.Embeddings(), d)}
	for range c.NLayers {
		m.Blocks = append(m.Blocks, model.Block{
			AttnNorm: norm(), Q: weight(d, d), K: weight(c.KVDim(), d), V: weight(c.KVDim(), d), AttnOut: weight(d, d),
			FFNorm: norm(), Gate: weight(h, d), Up: weight(h, d), Down: weight(d, h),
		})
	}
	const n, gen = 1024, 256
	tokens := make([]int32, n)
	for i := range tokens {
		tokens[i] = int32(rng.IntN(c.VocabSize))
	}
	rows := make([]int32, gen)
	for i := range rows {
		rows[i] = int32(n - gen + i)
	}
	in := model.Input{Tokens: tokens, LogitRows: rows}
	if _, err := m.Forward(in, nil); err != nil { // warm-up: cuBLAS heuristics, block cache
		b.Fatal(err)
	}
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		if _, err := m.Forward(in, nil); err != nil {
			b.Fatal(err)
		}
	}
	if err := g.Synchronize(); err != nil {
		b.Fatal(err)
	}
	per := time.Since(start).Seconds() / float64(b.N)
	flops := c.StepFLOPs(n, n, gen)
	b.ReportMetric(per*1e3, "ms/forward")
	b.ReportMetric(flops/per/1e12, "TFLOP/s")
	b.ReportMetric(flops/989e12/per*100, "%H100-BF16-peak")
}
