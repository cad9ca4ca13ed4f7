package load

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/dlmcache/dlmcache/model"
	"github.com/dlmcache/dlmcache/model/backend"
	"github.com/dlmcache/dlmcache/model/cpu"
	"github.com/dlmcache/dlmcache/model/gguf"
	"github.com/dlmcache/dlmcache/model/safetensors"
)

// bundledDir is the bundled model's directory in the repository.
const bundledDir = "../../models/llada-tiny"

// testdata is the model fixtures' directory, model/testdata.
const testdata = "../testdata"

// ggufLogits runs one full forward over ids and returns every row's logits.
func ggufLogits(t *testing.T, m *Model, ids []int32) []float32 {
	t.Helper()
	out, err := m.Forward(model.Input{Tokens: ids, LogitRows: allRows(len(ids))}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return out.Logits
}

func testIDs(t *testing.T, m *Model) []int32 {
	t.Helper()
	ids, _, err := m.Tokenizer.EncodeChat("You are a helpful assistant.", "What is two plus three?")
	if err != nil {
		t.Fatal(err)
	}
	for range 8 {
		ids = append(ids, int32(m.Config.MaskTokenID))
	}
	return ids
}

// ggufReference is m's logits on testIDs and their largest magnitude, the
// scale the GGUF tests hold the other models' logits against.
func ggufReference(t *testing.T, m *Model) (ids []int32, want []float32, scale float64) {
	t.Helper()
	ids = testIDs(t, m)
	want = ggufLogits(t, m, ids)
	for _, v := range want {
		scale = max(scale, math.Abs(float64(v)))
	}
	return ids, want, scale
}

func maxAbsDiff(a, b []float32) float64 {
	var d float64
	for i := range a {
		d = max(d, math.Abs(float64(a[i]-b[i])))
	}
	return d
}

// TestGGUFRoundTrip converts the bundled model to GGUF in each type, loads
// it, and compares its logits with the safetensors model's: identical for
// F32, close for the others; and GGUF F32 → safetensors gives back the
// original tensors bit for bit.
func TestGGUFRoundTrip(t *testing.T) {
	be := cpu.New(1)
	ref, err := Load(bundledDir, be)
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	ids, want, scale := ggufReference(t, ref)
	tmp := t.TempDir()
	for _, tc := range []struct {
		typ gguf.GGMLType
		tol float64 // max |Δlogit| relative to max |logit|
	}{
		{gguf.F32, 0},
		{gguf.F16, 2e-3},
		{gguf.BF16, 2e-2},
		{gguf.Q8_0, 2e-2},
	} {
		t.Run(tc.typ.String(), func(t *testing.T) {
			p := filepath.Join(tmp, "tiny-"+tc.typ.String()+".gguf")
			rep, err := ToGGUF(bundledDir, p, tc.typ)
			if err != nil {
				t.Fatal(err)
			}
			for _, ct := range rep.Tensors {
				wantT := tc.typ.String()
				if len(ct.Shape) == 1 {
					wantT = "F32"
				}
				if ct.To != wantT {
					t.Errorf("%s written as %s, want %s", ct.Name, ct.To, wantT)
				}
			}
			m, err := Load(p, be)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			if m.Name() != "tiny-"+tc.typ.String() {
				t.Errorf("Name %q", m.Name())
			}
			if !configEqual(m.Config, ref.Config) {
				t.Errorf("config %+v, want %+v", *m.Config, *ref.Config)
			}
			if m.Card != ref.Card {
				t.Errorf("card %+v, want %+v", m.Card, ref.Card)
			}
			if got := testIDs(t, m); !slices.Equal(got, ids) {
				t.Fatalf("GGUF tokenizer: chat prompt ids %v, want %v", got, ids)
			}
			tol := tc.tol
			if tc.typ == gguf.F16 && m.Blocks[0].Down.(*cpu.Tensor).BF16() {
				tol = 2e-2 // rounded to BF16 at load (cpu.F16Auto on AVX512-BF16): BF16's bound
			}
			got := ggufLogits(t, m, ids)
			d := maxAbsDiff(got, want) / scale
			if tc.tol == 0 && d != 0 {
				t.Fatalf("logits differ by %.3g (relative); want identical", d)
			}
			if d > tol {
				t.Fatalf("logits differ by %.3g (relative), tolerance %.3g", d, tol)
			}
			t.Logf("%s: max |Δlogit| / max |logit| = %.3g", tc.typ, d)
		})
	}

	// Back to safetensors: lossless for F32.
	out := filepath.Join(tmp, "back")
	if _, err := FromGGUF(filepath.Join(tmp, "tiny-F32.gguf"), out); err != nil {
		t.Fatal(err)
	}
	a, err := safetensors.Open(bundledDir)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := safetensors.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if !slices.Equal(a.Names(), b.Names()) {
		t.Fatalf("names %v, want %v", b.Names(), a.Names())
	}
	for _, n := range a.Names() {
		x, _ := a.Tensor(n)
		y, _ := b.Tensor(n)
		if !slices.Equal(x.Shape, y.Shape) || !bytes.Equal(x.Data, y.Data) {
			t.Errorf("%s: round trip changed the tensor", n)
		}
	}
	m, err := Load(out, be)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if got := ggufLogits(t, m, ids); maxAbsDiff(got, want) != 0 {
		t.Error("the round-tripped directory's logits differ")
	}
	if _, err := FromGGUF(filepath.Join(tmp, "tiny-Q8_0.gguf"), filepath.Join(tmp, "q8")); err == nil || !strings.Contains(err.Error(), "Q8_0") {
		t.Errorf("Q8_0 → safetensors: err %v, want a refusal naming Q8_0", err)
	}
}

func configEqual(a, b *model.Config) bool {
	x, y := *a, *b
	x.Architectures, y.Architectures = nil, nil
	x.ModelType, y.ModelType = "", ""
	return reflect.DeepEqual(x, y)
}

// TestGGUFPermute checks the q/k permutation against its definition in
// llama.cpp's converter: reshape(n_head, 2, hd/2, cols).swapaxes(1, 2).
func TestGGUFPermute(t *testing.T) {
	const heads, hd, cols = 3, 8, 2
	rows := heads * hd
	src := make([]byte, rows*cols)
	for i := range src {
		src[i] = byte(i / cols) // row id
	}
	got, err := ggufPermute(src, rows, cols, heads, true)
	if err != nil {
		t.Fatal(err)
	}
	for h := 0; h < heads; h++ {
		for j := 0; j < hd/2; j++ {
			for s := 0; s < 2; s++ {
				// output index [h, j, s] comes from input [h, s, j]
				if g, w := got[(h*hd+j*2+s)*cols], byte(h*hd+s*hd/2+j); g != w {
					t.Fatalf("row %d holds input row %d, want %d", h*hd+j*2+s, g, w)
				}
			}
		}
	}
	back, _ := ggufPermute(got, rows, cols, heads, false)
	if !bytes.Equal(back, src) {
		t.Error("inverse permutation does not restore the rows")
	}
	if _, err := ggufPermute(src, rows, cols, 5, true); err == nil {
		t.Error("5 heads over 24 rows: no error")
	}
}

// TestGGUFBadInput checks that files llama.cpp writes for other diffusion
// architectures, and damaged files, fail with errors that say why.
func TestGGUFBadInput(t *testing.T) {
	tmp := t.TempDir()
	src := filepath.Join(tmp, "tiny.gguf")
	if _, err := ToGGUF(bundledDir, src, gguf.F16); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	kv := slices.Clone(f.KV)
	var wts []gguf.WriteTensor
	for _, ti := range f.Tensors {
		wts = append(wts, gguf.WriteTensor{Name: ti.Name, Shape: ti.Shape, Type: ti.Type})
	}
	rewrite := func(name string, edit func([]gguf.KV, []gguf.WriteTensor) ([]gguf.KV, []gguf.WriteTensor)) string {
		k, w := edit(slices.Clone(kv), slices.Clone(wts))
		p := filepath.Join(tmp, name+".gguf")
		err := gguf.Write(p, k, w, func(i int) ([]byte, error) {
			ti, _ := f.Tensor(w[i].Name)
			return f.Data(ti), nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	set := func(key string, v gguf.Value) func([]gguf.KV, []gguf.WriteTensor) ([]gguf.KV, []gguf.WriteTensor) {
		return func(k []gguf.KV, w []gguf.WriteTensor) ([]gguf.KV, []gguf.WriteTensor) {
			for i := range k {
				if k[i].Key == key {
					k[i].Value = v
					return k, w
				}
			}
			return append(k, gguf.KV{Key: key, Value: v}), w
		}
	}
	be := cpu.New(1)
	for _, tc := range []struct {
		name string
		path string
		want []string
	}{
		{"dream", rewrite("dream", set("general.architecture", gguf.String("dream"))), []string{"dream", "not run it yet"}},
		{"llada-moe", rewrite("moe", set("general.architecture", gguf.String("llada-moe"))), []string{"llada-moe", "not run it yet"}},
		{"qwen2", rewrite("qwen2", set("general.architecture", gguf.String("qwen2"))), []string{"qwen2", "not a diffusion"}},
		{"causal", rewrite("causal", set("llada.attention.causal", gguf.Bool(true))), []string{"llada.attention.causal"}},
		{"unknown pre-tokenizer", rewrite("pre", set("tokenizer.ggml.pre", gguf.String("chatglm-bpe"))), []string{"chatglm-bpe", "not supported"}},
		{"no mask", rewrite("nomask", func(k []gguf.KV, w []gguf.WriteTensor) ([]gguf.KV, []gguf.WriteTensor) {
			return slices.DeleteFunc(k, func(e gguf.KV) bool { return e.Key == gguf.KeyTokMask }), w
		}), []string{"mask_token_id"}},
		// A layer count no file of this size holds is refused before any
		// block is allocated (it once grew RSS by gigabytes).
		{"block_count 1e9", rewrite("layers1e9", set("llada.block_count", gguf.Uint32(1e9))), []string{"llada.block_count 1000000000", "tensors"}},
		{"block_count 2^31", rewrite("layers2e31", set("llada.block_count", gguf.Uint32(1<<31))), []string{"llada.block_count 2147483648", "tensors"}},
		{"missing layer", rewrite("nolayer", func(k []gguf.KV, w []gguf.WriteTensor) ([]gguf.KV, []gguf.WriteTensor) {
			return k, slices.DeleteFunc(w, func(t gguf.WriteTensor) bool { return t.Name == "blk.1.ffn_up.weight" })
		}), []string{"blk.1.ffn_up.weight", "not found"}},
	} {
		_, err := Load(tc.path, be)
		if err == nil {
			t.Errorf("%s: no error", tc.name)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q lacks %q", tc.name, err, w)
			}
		}
	}
	// diffusion.shift_logits true is the forward's ShiftLogits.
	m, err := Load(rewrite("shift", set("diffusion.shift_logits", gguf.Bool(true))), be)
	if err != nil {
		t.Fatal(err)
	}
	if !m.Config.ShiftLogits {
		t.Error("diffusion.shift_logits true: Config.ShiftLogits false")
	}
	m.Close()
	f.Close()

	// A truncated file.
	b, _ := os.ReadFile(src)
	trunc := filepath.Join(tmp, "trunc.gguf")
	os.WriteFile(trunc, b[:len(b)-100], 0o644)
	if _, err := Load(trunc, be); err == nil || !strings.Contains(err.Error(), "past the end") {
		t.Errorf("truncated: %v", err)
	}
	// Resolve takes a GGUF file and refuses another file.
	if p, err := Resolve(src); err != nil || p != src {
		t.Errorf("Resolve(%s) = %q, %v", src, p, err)
	}
	if _, err := Resolve(filepath.Join(bundledDir, "config.json")); err == nil || !strings.Contains(err.Error(), "not a GGUF") {
		t.Errorf("Resolve(config.json): %v", err)
	}
}

// plainBackend hides the CPU backend's optional interfaces, QuantWeighter
// among them, so that a Q8_0 or Q4_0 GGUF loads dequantized to float32 (as
// on the CUDA backend).
type plainBackend struct{ backend.Backend }

// TestGGUFQuantKeptQuantized loads the Q8_0 and Q4_0 conversions of the
// bundled model on the CPU backend, which keeps the weights quantized in
// the mapping, and dequantized to float32 at load. With float32
// activations (cpu.QuantF32) the logits agree to float32 rounding (the
// products sum in another order); with activations quantized per row
// (cpu.QuantInt8, the default) they move by what that rounding does to
// them, which is held under a bound a few times the measured one (Q8_0:
// 4.4e-3 of the largest logit, Q4_0: 5.8e-3, go test ./model -run
// TestGGUFQuantKeptQuantized -v).
func TestGGUFQuantKeptQuantized(t *testing.T) {
	for _, c := range []struct {
		typ       gguf.GGMLType
		int8Bound float64
	}{{gguf.Q8_0, 0.015}, {gguf.Q4_0, 0.02}} {
		p := filepath.Join(t.TempDir(), c.typ.String()+".gguf")
		if _, err := ToGGUF(bundledDir, p, c.typ); err != nil {
			t.Fatal(err)
		}
		deq, err := Load(p, plainBackend{cpu.New(1)})
		if err != nil {
			t.Fatal(err)
		}
		defer deq.Close()
		ids, want, scale := ggufReference(t, deq)
		for _, q := range []struct {
			impl  cpu.QuantImpl
			bound float64
		}{{cpu.QuantF32, 1e-5}, {cpu.QuantInt8, c.int8Bound}} {
			kept, err := Load(p, cpu.NewWithOptions(cpu.Options{Threads: 1, QuantProducts: q.impl}))
			if err != nil {
				t.Fatal(err)
			}
			defer kept.Close()
			for _, w := range []backend.Tensor{kept.Embed, kept.Blocks[0].Q, kept.Blocks[3].Down} {
				if s := fmt.Sprint(w); !strings.Contains(s, c.typ.String()) {
					t.Errorf("weight %s is not kept as %s", s, c.typ)
				}
			}
			d := maxAbsDiff(ggufLogits(t, kept, ids), want) / scale
			t.Logf("%s, %s products: logits differ from the dequantized model's by %.3g (relative)", c.typ, q.impl, d)
			if d > q.bound {
				t.Errorf("%s, %s products: logits differ from the dequantized model's by %.3g (relative; bound %g)", c.typ, q.impl, d, q.bound)
			}
		}
	}
}

// randomGGUF writes a random F32 checkpoint of c from seed and converts it
// to a GGUF file named name of type typ in a temporary folder: its path,
// and the file opened (closed when the test ends).
func randomGGUF(t *testing.T, c model.Config, seed uint64, name string, typ gguf.GGMLType) (string, *gguf.File) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "m")
	if err := WriteRandom(dir, c, seed, safetensors.F32); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), name)
	if _, err := ToGGUF(dir, p, typ); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return p, f
}

// TestGGUFWritesEmptyMerges: a checkpoint whose byte-level tokenizer has
// no merges (a random one's, as tools/benchckpt writes) converts to a
// file with tokenizer.ggml.merges, an empty array: llama.cpp refuses a
// "gpt2" tokenizer without the key. The file loads back.
func TestGGUFWritesEmptyMerges(t *testing.T) {
	c := model.Config{DModel: 64, NLayers: 1, NHeads: 4, NKVHeads: 4, MLPHiddenSize: 96, VocabSize: 300, RopeTheta: 10000, RMSNormEps: 1e-5}
	p, f := randomGGUF(t, c, 3, "m.gguf", gguf.F16)
	x, ok := f.Get(gguf.KeyTokMerges)
	if !ok {
		t.Fatalf("no %s written", gguf.KeyTokMerges)
	}
	if s, ok := x.Strings(); !ok || x.Elem != gguf.TypeString || len(s) != 0 {
		t.Errorf("%s is %v, want an empty array of strings", gguf.KeyTokMerges, x)
	}
	m, err := Load(p, cpu.New(1))
	if err != nil {
		t.Fatal(err)
	}
	m.Close()
}

// TestGGUFKQuants loads a file whose output head is Q6_K (as
// llama-quantize's Q4_0 leaves it), its token embedding and a query
// weight (rows permuted back) Q4_K, a down projection Q5_K, a gate
// projection Q3_K (as llama-quantize's Q3_K_S/M/L files hold it) and one
// IQ4_XS, and a key
// (rows permuted back), an up and a value projection in the types
// llama-quantize falls back to (Q5_0, Q5_1, Q4_1) — random blocks, on a
// random model of width 256 (the K-quants' block) — and the same file with
// those tensors F32, holding the values gguf decodes from the blocks. On
// the CPU backend the weights are kept as stored (this model's narrow
// matrices decoded at load for the panel kernel): the logits agree with
// the F32 file's to float32 rounding (1e-5 of the largest), as they do
// when the blocks are dequantized at load (a backend without
// QuantWeighter).
func TestGGUFKQuants(t *testing.T) {
	c := model.Config{DModel: 256, NLayers: 2, NHeads: 4, NKVHeads: 4, MLPHiddenSize: 512, VocabSize: 300, RopeTheta: 10000, RMSNormEps: 1e-5}
	_, f := randomGGUF(t, c, 7, "f32.gguf", gguf.F32)
	kq := map[string]gguf.GGMLType{"output.weight": gguf.Q6_K, "token_embd.weight": gguf.Q4_K,
		"blk.1.attn_q.weight": gguf.Q4_K, "blk.0.ffn_down.weight": gguf.Q5_K,
		"blk.0.attn_k.weight": gguf.Q5_0, "blk.1.ffn_up.weight": gguf.Q5_1, "blk.1.attn_v.weight": gguf.Q4_1,
		"blk.0.ffn_gate.weight": gguf.Q3_K, "blk.1.ffn_gate.weight": gguf.IQ4_XS}
	raws := map[string][]byte{}
	seed := uint32(1)
	for name, typ := range kq {
		ti, ok := f.Tensor(name)
		if !ok {
			t.Fatalf("no tensor %s", name)
		}
		n := ti.Shape[0] * ti.Shape[1]
		raw := make([]byte, typ.RowBytes(n))
		for i := range raw {
			seed = seed*1664525 + 1013904223
			raw[i] = byte(seed >> 24)
		}
		bb := typ.TypeSize()
		for o := 0; o < len(raw); o += bb {
			h := func(v float32) []byte { return safetensors.F32ToF16([]float32{v}) }
			sign := float32(1 - 2*int(raw[o+5]&1))
			switch typ {
			case gguf.Q6_K:
				copy(raw[o+208:], h(sign*float32(1+raw[o+3]%8)/8000))
			case gguf.Q3_K:
				copy(raw[o+108:], h(sign*float32(1+raw[o+3]%8)/2000))
			case gguf.IQ4_XS:
				copy(raw[o:], h(sign*float32(1+raw[o+3]%8)/60000))
			case gguf.Q5_0:
				copy(raw[o:], h(sign*float32(1+raw[o+3]%8)/4000))
			case gguf.Q4_1, gguf.Q5_1:
				copy(raw[o:], h(sign*float32(1+raw[o+3]%8)/4000))
				copy(raw[o+2:], h(-sign*float32(1+raw[o+7]%8)/500))
			default:
				copy(raw[o:], h(sign*float32(1+raw[o+3]%8)/4000))
				copy(raw[o+2:], h(float32(1+raw[o+7]%8)/500))
			}
		}
		raws[name] = raw
	}
	write := func(path string, asF32 bool) {
		var ts []gguf.WriteTensor
		for _, ti := range f.Tensors {
			typ := ti.Type
			if k, ok := kq[ti.Name]; ok && !asF32 {
				typ = k
			}
			ts = append(ts, gguf.WriteTensor{Name: ti.Name, Shape: ti.Shape, Type: typ})
		}
		err := gguf.Write(path, f.KV, ts, func(i int) ([]byte, error) {
			ti := f.Tensors[i]
			raw, ok := raws[ti.Name]
			if !ok {
				return f.Data(ti), nil
			}
			if !asF32 {
				return raw, nil
			}
			x, err := gguf.ToF32(kq[ti.Name], raw, ti.Shape[0]*ti.Shape[1])
			return safetensors.F32ToBytes(x), err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	kp, fp := filepath.Join(t.TempDir(), "kq.gguf"), filepath.Join(t.TempDir(), "ref.gguf")
	write(kp, false)
	write(fp, true)
	ref, err := Load(fp, cpu.New(1))
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	ids := []int32{5, 17, 250, 3, 99, 120, 7, 7, 280, 1}
	want := ggufLogits(t, ref, ids)
	var scale float64
	for _, v := range want {
		scale = max(scale, math.Abs(float64(v)))
	}
	for _, be := range []backend.Backend{cpu.New(2), plainBackend{cpu.New(1)}} {
		m, err := Load(kp, be)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		if _, plain := be.(plainBackend); !plain {
			for w, typ := range map[backend.Tensor]string{m.Head: "Q6_K", m.Embed: "Q4_K", m.Blocks[1].Q: "Q4_K", m.Blocks[0].Down: "Q5_K",
				m.Blocks[0].K: "Q5_0", m.Blocks[1].Up: "Q5_1", m.Blocks[1].V: "Q4_1"} {
				if s := fmt.Sprint(w); !strings.Contains(s, typ) {
					t.Errorf("weight %s is not kept as %s", s, typ)
				}
			}
		}
		if d := maxAbsDiff(ggufLogits(t, m, ids), want) / scale; !(d <= 1e-5) {
			t.Errorf("%T: logits differ from the F32 file's by %.3g (relative; bound 1e-5)", be, d)
		}
	}
}

// allRows is 0..n-1: the logits of every row.
func allRows(n int) []int32 {
	r := make([]int32, n)
	for i := range r {
		r[i] = int32(i)
	}
	return r
}

// declinePermute is the CPU backend without a row permuter that takes
// anything: the loader's reordered copies.
type declinePermute struct{ *cpu.Backend }

func (declinePermute) PermuteRows(backend.Tensor, []int32) bool { return false }

// TestGGUFQKMapped: a GGUF file whose q and k weights are too wide for
// the panel kernel (1,056 columns) keeps them in the memory map, stored
// in ggml's RoPE order (the CPU backend moves each product's columns
// instead of copying the weight), in every type; its logits are those of
// the reordered copies the loader made before, bit for bit, and F32's
// those of the safetensors checkpoint.
func TestGGUFQKMapped(t *testing.T) {
	c := model.Config{DModel: 1056, NLayers: 1, NHeads: 8, NKVHeads: 8, MLPHiddenSize: 64, VocabSize: 300, RopeTheta: 10000, RMSNormEps: 1e-5}
	dir := filepath.Join(t.TempDir(), "m")
	if err := WriteRandom(dir, c, 7, safetensors.F32); err != nil {
		t.Fatal(err)
	}
	ids := make([]int32, 24)
	for i := range ids {
		ids[i] = int32(i * 11 % c.VocabSize)
	}
	logits := func(t *testing.T, p string, b backend.Backend) ([]float32, *Model) {
		t.Helper()
		m, err := Load(p, b)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		return ggufLogits(t, m, ids), m
	}
	ref, _ := logits(t, dir, cpu.New(1))
	for _, typ := range []gguf.GGMLType{gguf.F32, gguf.F16, gguf.BF16, gguf.Q8_0, gguf.Q4_0} {
		t.Run(typ.String(), func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "m.gguf")
			if _, err := ToGGUF(dir, p, typ); err != nil {
				t.Fatal(err)
			}
			got, m := logits(t, p, cpu.New(1))
			if q, k := m.Blocks[0].Q.(*cpu.Tensor), m.Blocks[0].K.(*cpu.Tensor); !q.Permuted() && q.AliasesRaw() || !k.Permuted() && k.AliasesRaw() {
				t.Errorf("q or k in the map but not permuted")
			} else if typ != gguf.F16 && !q.Permuted() {
				t.Errorf("q not left in the map")
			}
			copied, _ := logits(t, p, declinePermute{cpu.New(1)})
			if !slices.Equal(got, copied) {
				t.Fatalf("logits differ from the reordered copies' by %g", maxAbsDiff(got, copied))
			}
			if typ == gguf.F32 && !slices.Equal(got, ref) {
				t.Fatalf("logits differ from the safetensors checkpoint's by %g", maxAbsDiff(got, ref))
			}
		})
	}
}
