package gguf

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func sampleFile(t testing.TB, align uint32) ([]KV, []WriteTensor, [][]byte) {
	kv := []KV{
		{"general.architecture", String("llada")},
		{"u8", Value{Type: TypeUint8, v: uint8(200)}},
		{"i8", Value{Type: TypeInt8, v: int8(-3)}},
		{"u16", Value{Type: TypeUint16, v: uint16(60000)}},
		{"i16", Value{Type: TypeInt16, v: int16(-30000)}},
		{"u32", Uint32(4000000000)},
		{"i32", Int32(-7)},
		{"f32", Float32(1e-5)},
		{"b", Bool(true)},
		{"s", String("héllo")},
		{"u64", Uint64(1 << 60)},
		{"i64", Value{Type: TypeInt64, v: int64(-1 << 60)}},
		{"f64", Value{Type: TypeFloat64, v: math.Pi}},
		{"strs", Strings([]string{"a", "", "Ġb c"})},
		{"i32s", Int32s([]int32{1, -2, 3})},
		{"f32s", Float32s([]float32{0.5, -1})},
		{"nested", Value{Type: TypeArray, Elem: TypeArray, v: []Value{Int32s([]int32{1}), Int32s([]int32{2, 3})}}},
	}
	if align != 0 {
		kv = append(kv, KV{"general.alignment", Uint32(align)})
	}
	x := make([]float32, 64)
	for i := range x {
		x[i] = float32(i-30) / 7
	}
	q, err := QuantizeQ8_0(x)
	if err != nil {
		t.Fatal(err)
	}
	f32, _ := FromF32(F32, x[:5])
	f16, _ := FromF32(F16, x[:32])
	bf16, _ := FromF32(BF16, x[:6])
	ts := []WriteTensor{
		{"vec", []int{5}, F32},
		{"half", []int{16, 2}, F16},
		{"q", []int{32, 2}, Q8_0},
		{"bf", []int{3, 2}, BF16},
	}
	return kv, ts, [][]byte{f32, f16, q, bf16}
}

func TestWriteRead(t *testing.T) {
	for _, align := range []uint32{0, 64} {
		kv, ts, data := sampleFile(t, align)
		p := filepath.Join(t.TempDir(), "x.gguf")
		if err := Write(p, kv, ts, func(i int) ([]byte, error) { return data[i], nil }); err != nil {
			t.Fatal(err)
		}
		f, err := Open(p)
		if err != nil {
			t.Fatal(err)
		}
		wantAlign := int(max(align, DefaultAlignment))
		if f.Alignment != wantAlign || f.Version != Version || f.DataOffset%int64(wantAlign) != 0 {
			t.Errorf("alignment %d, version %d, data at %d", f.Alignment, f.Version, f.DataOffset)
		}
		if len(f.KV) != len(kv) {
			t.Fatalf("%d keys, want %d", len(f.KV), len(kv))
		}
		for i, e := range kv {
			if f.KV[i].Key != e.Key || !f.KV[i].Value.Equal(e.Value) {
				t.Errorf("key %d: %s = %v (%s), want %s = %v", i, f.KV[i].Key, f.KV[i].Value, f.KV[i].Value.Type, e.Key, e.Value)
			}
		}
		for i, w := range ts {
			ti, ok := f.Tensor(w.Name)
			if !ok || ti.Type != w.Type || len(ti.Shape) != len(w.Shape) || ti.Offset%int64(wantAlign) != 0 {
				t.Fatalf("tensor %s: %+v", w.Name, ti)
			}
			if !bytes.Equal(f.Data(ti), data[i]) {
				t.Errorf("tensor %s: data differ", w.Name)
			}
		}
		if v, _ := f.Get("u64"); func() bool { u, ok := v.Uint(); return !ok || u != 1<<60 }() {
			t.Errorf("Uint of u64: %v", v)
		}
		if v, _ := f.Get("i8"); func() bool { i, ok := v.Int(); return !ok || i != -3 }() {
			t.Errorf("Int of i8: %v", v)
		}
		if v, _ := f.Get("i32s"); func() bool { s, ok := v.Ints(); return !ok || len(s) != 3 || s[1] != -2 }() {
			t.Errorf("Ints: %v", v)
		}
		fp := f.Fingerprint()
		if len(fp) != 16 {
			t.Errorf("fingerprint %q", fp)
		}
		f.Close()
		f.Close()
	}
}

func TestWriteRefuses(t *testing.T) {
	kv, ts, data := sampleFile(t, 0)
	get := func(i int) ([]byte, error) { return data[i], nil }
	for name, tc := range map[string]struct {
		kv   []KV
		ts   []WriteTensor
		want string
	}{
		"duplicate key":     {append(kv, kv[0]), ts, "twice"},
		"duplicate tensor":  {kv, append(ts, ts[0]), "twice"},
		"bad alignment":     {append(kv, KV{"general.alignment", Uint32(48)}), ts, "power of two"},
		"q8_0 row of 16":    {kv, []WriteTensor{{"q", []int{16, 4}, Q8_0}}, "multiple"},
		"mistyped value":    {[]KV{{"x", Value{Type: TypeUint32, v: "no"}}}, nil, "holds"},
		"wrong data length": {kv, []WriteTensor{{"vec", []int{6}, F32}}, "needs"},
	} {
		_, err := Encode(tc.kv, tc.ts, get)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want %q", name, err, tc.want)
		}
	}
}

// TestParseDamaged cuts and corrupts a valid file: every prefix and a set
// of corrupted headers must give an error, never a panic or a file whose
// tensors run past the end.
func TestParseDamaged(t *testing.T) {
	kv, ts, data := sampleFile(t, 0)
	b, err := Encode(kv, ts, func(i int) ([]byte, error) { return data[i], nil })
	if err != nil {
		t.Fatal(err)
	}
	g, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	last := g.Tensors[len(g.Tensors)-1]
	end := int(g.DataOffset + last.Offset + last.Size) // the padding after may go
	for n := 0; n < end; n++ {
		if _, err := Parse(b[:n]); err == nil {
			t.Fatalf("prefix of %d of %d bytes parsed", n, len(b))
		}
	}
	corrupt := func(off int, v []byte) []byte {
		c := bytes.Clone(b)
		copy(c[off:], v)
		return c
	}
	for name, tc := range map[string]struct {
		b    []byte
		want string
	}{
		"magic":        {corrupt(0, []byte("GGML")), "not a GGUF"},
		"big-endian":   {corrupt(0, []byte("FUGG")), "big-endian"},
		"version 1":    {corrupt(4, []byte{1, 0, 0, 0}), "version 1"},
		"version 9":    {corrupt(4, []byte{9, 0, 0, 0}), "version 9"},
		"tensor count": {corrupt(8, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0}), "tensor count"},
		"kv count":     {corrupt(16, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0}), "metadata count"},
		"key length":   {corrupt(24, []byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0}), "runs past"},
	} {
		_, err := Parse(tc.b)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want %q", name, err, tc.want)
		}
	}
}

func FuzzParse(f *testing.F) {
	kv, ts, data := sampleFile(f, 0)
	b, _ := Encode(kv, ts, func(i int) ([]byte, error) { return data[i], nil })
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		g, err := Parse(b)
		if err != nil {
			return
		}
		for _, ti := range g.Tensors {
			_ = g.Data(ti) // must not panic: extents were checked
		}
	})
}

func TestQ8_0(t *testing.T) {
	// One block 0..31: amax 31, d = 31/127 (float16 0.2441), q = round(i/d).
	x := make([]float32, 32)
	for i := range x {
		x[i] = float32(i)
	}
	b, err := QuantizeQ8_0(x)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != 34 {
		t.Fatalf("%d bytes", len(b))
	}
	d := float32(31) / 127
	id := 1 / d
	for i, v := range x {
		want := int8(math.Round(float64(float32(v * id))))
		if int8(b[2+i]) != want {
			t.Errorf("q[%d] = %d, want %d", i, int8(b[2+i]), want)
		}
	}
	if int8(b[2+31]) != 127 {
		t.Errorf("the largest value quantizes to %d, want 127", int8(b[2+31]))
	}
	// Round half away from zero, as roundf: 2.5 → 3, -2.5 → -3.
	y := make([]float32, 32)
	y[0], y[1], y[2] = 127, 2.5, -2.5
	b, _ = QuantizeQ8_0(y)
	if b[2] != 127 || int8(b[3]) != 3 || int8(b[4]) != -3 {
		t.Errorf("half rounding: %d %d %d", int8(b[2]), int8(b[3]), int8(b[4]))
	}
	// All zeros: d = 0, q = 0.
	b, _ = QuantizeQ8_0(make([]float32, 32))
	if !bytes.Equal(b, make([]byte, 34)) {
		t.Errorf("zeros: %v", b)
	}
	// Round trip error at most d/2 plus 127 times float16's rounding of d
	// (2⁻¹¹ d): 0.57 d.
	z := make([]float32, 96)
	for i := range z {
		z[i] = float32(math.Sin(float64(i))) * 3
	}
	b, _ = QuantizeQ8_0(z)
	back, err := ToF32(Q8_0, b, len(z))
	if err != nil {
		t.Fatal(err)
	}
	for i := range z {
		if e := math.Abs(float64(back[i] - z[i])); e > 3.0/127*0.57 {
			t.Errorf("element %d: %g back as %g", i, z[i], back[i])
		}
	}
	if _, err := QuantizeQ8_0(make([]float32, 33)); err == nil {
		t.Error("33 values: no error")
	}
	if _, err := ToF32(Q2_K, make([]byte, 84), 256); err == nil || !strings.Contains(err.Error(), "Q2_K") {
		t.Errorf("Q2_K: %v", err)
	}
}

func TestOpenNotGGUF(t *testing.T) {
	p := filepath.Join(t.TempDir(), "x")
	os.WriteFile(p, []byte("{}"), 0o644)
	if _, err := Open(p); err == nil || !strings.Contains(err.Error(), p) {
		t.Errorf("err %v", err)
	}
	if _, err := Open(t.TempDir()); err == nil {
		t.Error("directory: no error")
	}
}
