package gguf

import (
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// kquantDir holds blocks of each K-quant and their values as an
// independent dequantizer (tools/kquants/make_golden.py, written from the
// public block layout) computes them.
const kquantDir = "../testdata/kquants"

// KQuantGolden reads the golden blocks of typ (Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS) and their
// float32 values.
func KQuantGolden(t testing.TB, dir string, typ GGMLType) ([]byte, []float32) {
	t.Helper()
	name := strings.ToLower(typ.String())
	raw, err := os.ReadFile(filepath.Join(dir, name+".bin"))
	if err != nil {
		t.Fatal(err)
	}
	vb, err := os.ReadFile(filepath.Join(dir, name+".f32"))
	if err != nil {
		t.Fatal(err)
	}
	vals := make([]float32, len(vb)/4)
	for i := range vals {
		vals[i] = math.Float32frombits(binary.LittleEndian.Uint32(vb[4*i:]))
	}
	if len(raw) != typ.RowBytes(len(vals)) {
		t.Fatalf("%s golden: %d bytes for %d values", typ, len(raw), len(vals))
	}
	return raw, vals
}

// TestKQuantsGolden: ToF32 reads Q3_K, Q4_K, Q5_K, Q6_K and IQ4_XS blocks, and Q4_1,
// Q5_0, Q5_1 and IQ4_NL ones (random bytes, scales normal, negative, subnormal and
// zero), bit for bit as the independent Python dequantizer does; FromF32
// refuses to write them.
func TestKQuantsGolden(t *testing.T) {
	for _, typ := range []GGMLType{Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS, Q4_1, Q5_0, Q5_1, IQ4_NL} {
		raw, want := KQuantGolden(t, kquantDir, typ)
		got, err := ToF32(typ, raw, len(want))
		if err != nil {
			t.Fatal(err)
		}
		bad := 0
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				if bad++; bad <= 5 {
					t.Errorf("%s: value %d is %g, the reference's %g", typ, i, got[i], want[i])
				}
			}
		}
		if bad > 0 {
			t.Errorf("%s: %d of %d values differ", typ, bad, len(want))
		}
		if _, err := ToF32(typ, raw[:len(raw)-1], len(want)); err == nil {
			t.Errorf("%s: short data, no error", typ)
		}
		if _, err := FromF32(typ, make([]float32, 256)); err == nil || !strings.Contains(err.Error(), typ.String()) {
			t.Errorf("%s: FromF32 gave %v, want a refusal", typ, err)
		}
		if !Supported(typ) || Writable(typ) {
			t.Errorf("%s: Supported %v, Writable %v", typ, Supported(typ), Writable(typ))
		}
	}
}
