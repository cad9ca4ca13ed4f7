package gguf

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/dlmcache/dlmcache/internal/testutil"
	"github.com/dlmcache/dlmcache/model/safetensors"
)

// fixtureDir holds a GGUF written by llama.cpp's gguf-py and what gguf-py's
// own reader saw in it (tools/ggufpy/make_fixture.py).
const fixtureDir = "../testdata/ggufpy"

type pyGolden struct {
	File       string `json:"file"`
	Alignment  int    `json:"alignment"`
	DataOffset int64  `json:"data_offset"`
	Metadata   []struct {
		Key   string          `json:"key"`
		Type  string          `json:"type"`
		Elem  string          `json:"elem"`
		Value json.RawMessage `json:"value"`
	} `json:"metadata"`
	Tensors []struct {
		Name      string `json:"name"`
		Type      string `json:"type"`
		Shape     []int  `json:"shape"`
		Offset    int64  `json:"offset"`
		SHA256Raw string `json:"sha256_raw"`
		SHA256F32 string `json:"sha256_f32"`
	} `json:"tensors"`
}

// TestGGUFPyFixture reads the gguf-py fixture and checks every metadata
// entry (type and value) and every tensor (type, shape, offset, raw bytes,
// dequantized values) against what gguf-py's reader and dequantizer give.
func TestGGUFPyFixture(t *testing.T) {
	var g pyGolden
	testutil.ReadJSON(t, filepath.Join(fixtureDir, "golden.json"), &g)
	f, err := Open(filepath.Join(fixtureDir, g.File))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Alignment != g.Alignment || f.DataOffset != g.DataOffset || f.Version != 3 {
		t.Errorf("alignment %d, data offset %d, version %d; gguf-py: %d, %d, 3", f.Alignment, f.DataOffset, f.Version, g.Alignment, g.DataOffset)
	}
	if len(f.KV) != len(g.Metadata) {
		t.Errorf("%d metadata entries, gguf-py %d", len(f.KV), len(g.Metadata))
	}
	for i, m := range g.Metadata {
		if i >= len(f.KV) {
			break
		}
		kv := f.KV[i]
		if kv.Key != m.Key || !strings.EqualFold(kv.Value.Type.String(), m.Type) {
			t.Errorf("entry %d: %s (%s), gguf-py %s (%s)", i, kv.Key, kv.Value.Type, m.Key, m.Type)
			continue
		}
		if m.Type == "ARRAY" && !strings.EqualFold(kv.Value.Elem.String(), m.Elem) {
			t.Errorf("%s: array of %s, gguf-py %s", m.Key, kv.Value.Elem, m.Elem)
		}
		// Compare through JSON: gguf-py's value decoded into the Go type
		// this reader chose.
		want := reflect.New(reflect.TypeOf(kv.Value.Any()))
		if err := json.Unmarshal(m.Value, want.Interface()); err != nil {
			t.Errorf("%s: gguf-py value %.60s does not decode as %T: %v", m.Key, m.Value, kv.Value.Any(), err)
			continue
		}
		if w := want.Elem().Interface(); !reflect.DeepEqual(w, kv.Value.Any()) {
			t.Errorf("%s = %v, gguf-py %v", m.Key, kv.Value, w)
		}
	}
	if len(f.Tensors) != len(g.Tensors) {
		t.Fatalf("%d tensors, gguf-py %d", len(f.Tensors), len(g.Tensors))
	}
	types := map[string]bool{}
	for i, gt := range g.Tensors {
		ti := f.Tensors[i]
		types[gt.Type] = true
		if ti.Name != gt.Name || ti.Type.String() != gt.Type || !reflect.DeepEqual(ti.Shape, gt.Shape) || ti.Offset != gt.Offset {
			t.Errorf("tensor %d: %s %s %v at %d; gguf-py %s %s %v at %d", i, ti.Name, ti.Type, ti.Shape, ti.Offset, gt.Name, gt.Type, gt.Shape, gt.Offset)
			continue
		}
		data := f.Data(ti)
		if h := sha256.Sum256(data); hex.EncodeToString(h[:]) != gt.SHA256Raw {
			t.Errorf("%s: raw bytes differ from gguf-py's", ti.Name)
		}
		x, err := ToF32(ti.Type, data, ti.Numel())
		if err != nil {
			t.Errorf("%s: %v", ti.Name, err)
			continue
		}
		if h := sha256.Sum256(safetensors.F32ToBytes(x)); hex.EncodeToString(h[:]) != gt.SHA256F32 {
			t.Errorf("%s (%s): dequantized values differ from gguf-py's", ti.Name, ti.Type)
		}
	}
	for _, ty := range []string{"F32", "F16", "BF16", "Q8_0"} {
		if !types[ty] {
			t.Errorf("the fixture holds no %s tensor", ty)
		}
	}
	v, _ := f.Get("llada.attention.layer_norm_rms_epsilon")
	if x, _ := v.Float(); math.Abs(x-1e-5) > 1e-12 {
		t.Errorf("rms eps %v", x)
	}
}

// TestQ8_0MatchesGGUFPy re-quantizes the fixture's Q8_0 tensors from their
// own dequantized values: ggml's Q8_0 is idempotent on its output, so
// QuantizeQ8_0 must give gguf-py's bytes back exactly.
func TestQ8_0MatchesGGUFPy(t *testing.T) {
	f, err := Open(filepath.Join(fixtureDir, "tiny-llada-mixed.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	for _, ti := range f.Tensors {
		if ti.Type != Q8_0 {
			continue
		}
		n++
		x, _ := ToF32(Q8_0, f.Data(ti), ti.Numel())
		b, err := QuantizeQ8_0(x)
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != string(f.Data(ti)) {
			t.Errorf("%s: re-quantized bytes differ from gguf-py's", ti.Name)
		}
	}
	if n == 0 {
		t.Fatal("no Q8_0 tensor in the fixture")
	}
}

// TestQuantProbe quantizes the probe's F32 values (random, Q8_0 and Q4_0
// rounding ties, a zero block) and compares with gguf-py's Q8_0 ("q") and
// Q4_0 ("q4") of them, block by block, bit for bit; the Q4_0 blocks also
// decode as gguf-py's dequantize does ((q − 8)·d).
func TestQuantProbe(t *testing.T) {
	f, err := Open(filepath.Join(fixtureDir, "quant_probe.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	xi, ok := f.Tensor("x")
	if !ok || xi.Type != F32 {
		t.Fatalf("probe tensor x: %+v", xi)
	}
	x, _ := ToF32(F32, f.Data(xi), xi.Numel())
	for _, c := range []struct {
		name string
		typ  GGMLType
	}{{"q", Q8_0}, {"q4", Q4_0}} {
		qi, ok := f.Tensor(c.name)
		if !ok || qi.Type != c.typ {
			t.Fatalf("probe tensor %s: %+v", c.name, qi)
		}
		b, err := FromF32(c.typ, x)
		if err != nil {
			t.Fatal(err)
		}
		want, size := f.Data(qi), c.typ.TypeSize()
		for blk := 0; blk*size < len(want); blk++ {
			lo, hi := blk*size, (blk+1)*size
			if string(b[lo:hi]) != string(want[lo:hi]) {
				t.Errorf("%s block %d: % x, gguf-py % x", c.typ, blk, b[lo:hi], want[lo:hi])
			}
		}
		// Decoding: the quantized values are within d/2 (Q8_0) or d
		// (Q4_0, whose −8 end is exact and whose +7 end clips) of x.
		y, err := ToF32(c.typ, want, len(x))
		if err != nil {
			t.Fatal(err)
		}
		for blk := 0; blk*32 < len(x); blk++ {
			d := math.Abs(float64(blockScale(want[blk*size:])))
			for i := blk * 32; i < blk*32+32; i++ {
				if e := math.Abs(float64(y[i] - x[i])); e > d*1.0001+1e-6 {
					t.Errorf("%s block %d element %d: %g decodes to %g (d %g)", c.typ, blk, i, x[i], y[i], d)
				}
			}
		}
	}
}
