package safetensors

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/dlmcache/dlmcache/model/backend"
)

func u16le(v uint16) []byte {
	b := make([]byte, 2)
	binary.LittleEndian.PutUint16(b, v)
	return b
}

func pow2(e int) float32 { return float32(math.Ldexp(1, e)) }

// roundTrip16 decodes every 16-bit pattern (little-endian, in order) into f
// with decode and encodes f again with encode.
func roundTrip16(decode func([]byte, []float32), encode func([]float32) []byte) (f []float32, back []byte) {
	src := make([]byte, 2*65536)
	for i := 0; i < 65536; i++ {
		binary.LittleEndian.PutUint16(src[2*i:], uint16(i))
	}
	f = make([]float32, 65536)
	decode(src, f)
	return f, encode(f)
}

// halfCase is a 16-bit pattern and the float32 it decodes to.
type halfCase struct {
	bits uint16
	want float32
}

// checkDecode decodes each case's bits alone with decode (named name).
func checkDecode(t *testing.T, name string, decode func([]byte, []float32), cases []halfCase) {
	t.Helper()
	for _, tc := range cases {
		dst := make([]float32, 1)
		decode(u16le(tc.bits), dst)
		if dst[0] != tc.want {
			t.Errorf("%s(%#04x) = %g, want %g", name, tc.bits, dst[0], tc.want)
		}
	}
}

func TestF16ToF32(t *testing.T) {
	checkDecode(t, "F16ToF32", F16ToF32, []halfCase{
		{0x0000, 0},
		{0x3c00, 1},
		{0xc000, -2},
		{0x3555, 0.333251953125},
		{0x7bff, 65504},
		{0x0400, pow2(-14)},             // smallest normal
		{0x0001, pow2(-24)},             // smallest subnormal
		{0x0002, pow2(-23)},             // subnormal
		{0x03ff, 1023 * pow2(-24)},      // largest subnormal
		{0x8001, -pow2(-24)},            // negative subnormal
		{0x0200, pow2(-15)},             // subnormal, one bit
		{0x7c00, float32(math.Inf(1))},  // +Inf
		{0xfc00, float32(math.Inf(-1))}, // -Inf
		{0x3bff, 1 - pow2(-11)},         // largest below one
		{0x4248, 3.140625},              // π in half
		{0x5640, 100},                   // integer
		{0xd640, -100},                  // negative integer
		{0x1400, pow2(-10)},             // a small normal
		{0x3800, 0.5},                   // exponent below bias
		{0x3e00, 1.5},                   // mantissa bit
		{0x7800, 32768},                 // large
		{0x0401, pow2(-14) + pow2(-24)}, // normal with low bit
		{0x0180, 384 * pow2(-24)},       // subnormal, two bits
		{0xbc00, -1},                    // minus one
		{0x2e66, 0.0999755859375},       // ≈ 0.1
		{0x6400, 1024},                  // 2^10
		{0x7bfe, 65472},                 // next below max
		{0x5bff, 255.875},               // mantissa all ones
		{0x3c01, 1 + pow2(-10)},         // one ulp above one
		{0x7a00, 49152},                 // large with mantissa
		{0x8400, -pow2(-14)},            // negative smallest normal
		{0x83ff, -1023 * pow2(-24)},     // negative largest subnormal
		{0x3a00, 0.75},                  // below one with mantissa
		{0x4900, 10},                    // ten
		{0x57d0, 125},                   // integer with mantissa
	})
	dst := make([]float32, 1)
	F16ToF32(u16le(0x8000), dst)
	if !math.Signbit(float64(dst[0])) || dst[0] != 0 {
		t.Errorf("F16ToF32(0x8000) = %g, want -0", dst[0])
	}
	for _, nan := range []uint16{0x7e00, 0x7c01, 0xfe00, 0x7fff} {
		F16ToF32(u16le(nan), dst)
		if !math.IsNaN(float64(dst[0])) {
			t.Errorf("F16ToF32(%#04x) = %g, want NaN", nan, dst[0])
		}
	}
}

func TestF32ToF16(t *testing.T) {
	inf := float32(math.Inf(1))
	for _, tc := range []struct {
		v    float32
		want uint16
	}{
		{0, 0x0000},
		{float32(math.Copysign(0, -1)), 0x8000},
		{1, 0x3c00},
		{-2, 0xc000},
		{1.0 / 3, 0x3555},
		{65504, 0x7bff},
		{65519, 0x7bff},                     // below the midpoint to Inf
		{65520, 0x7c00},                     // midpoint to Inf: ties to even (Inf)
		{1e10, 0x7c00},                      // overflow
		{-1e10, 0xfc00},                     // negative overflow
		{inf, 0x7c00},                       // +Inf
		{-inf, 0xfc00},                      // -Inf
		{pow2(-14), 0x0400},                 // smallest normal
		{pow2(-24), 0x0001},                 // smallest subnormal
		{pow2(-25), 0x0000},                 // half the smallest subnormal: tie to even 0
		{1.5 * pow2(-25), 0x0001},           // above the tie
		{3 * pow2(-25), 0x0002},             // 1.5 subnormal ulps: tie to even 2
		{5 * pow2(-25), 0x0002},             // 2.5 ulps: tie to even 2
		{1023.5 * pow2(-24), 0x0400},        // rounds up into the smallest normal
		{-pow2(-24), 0x8001},                // negative subnormal
		{1e-10, 0x0000},                     // underflow
		{-1e-10, 0x8000},                    // negative underflow
		{1 + pow2(-11), 0x3c00},             // tie to even (down)
		{1 + 3*pow2(-11), 0x3c02},           // tie to even (up)
		{1 + pow2(-11) + pow2(-20), 0x3c01}, // just above the tie
		{2047.0 / 1024 * 32768, 0x7bff},     // 65504 spelled differently
		{3.14159265, 0x4248},
		{0.1, 0x2e66},
	} {
		b := F32ToF16([]float32{tc.v})
		if got := binary.LittleEndian.Uint16(b); got != tc.want {
			t.Errorf("F32ToF16(%g) = %#04x, want %#04x", tc.v, got, tc.want)
		}
	}
	for _, nan := range []uint32{0x7fc00000, 0x7f800001, 0xffc00000, 0x7f802000} {
		got := binary.LittleEndian.Uint16(F32ToF16([]float32{math.Float32frombits(nan)}))
		if got&0x7c00 != 0x7c00 || got&0x3ff == 0 {
			t.Errorf("F32ToF16(NaN %#08x) = %#04x, not a NaN", nan, got)
		}
		if (got>>15 == 1) != (nan>>31 == 1) {
			t.Errorf("F32ToF16(NaN %#08x) = %#04x lost the sign", nan, got)
		}
	}
}

// TestF16RoundTrip checks every half value survives f16 → f32 → f16.
func TestF16RoundTrip(t *testing.T) {
	f, back := roundTrip16(F16ToF32, F32ToF16)
	for i := 0; i < 65536; i++ {
		got := binary.LittleEndian.Uint16(back[2*i:])
		h := uint16(i)
		if h&0x7c00 == 0x7c00 && h&0x3ff != 0 { // NaN: must stay NaN with its sign
			if got&0x7c00 != 0x7c00 || got&0x3ff == 0 || got&0x8000 != h&0x8000 {
				t.Fatalf("NaN %#04x came back as %#04x", h, got)
			}
			continue
		}
		if got != h {
			t.Fatalf("%#04x → %g → %#04x", h, f[i], got)
		}
	}
}

// TestF32ToF16Nearest checks F32ToF16 against a float64 nearest search on
// values between and around half-precision neighbours.
func TestF32ToF16Nearest(t *testing.T) {
	dec := func(h uint16) float64 { return float64(math.Float32frombits(f16ToF32Bits(h))) }
	for h := uint16(0); h < 0x7bff; h += 7 {
		lo, hi := dec(h), dec(h+1)
		for _, frac := range []float64{0.1, 0.49, 0.5, 0.51, 0.9} {
			v := float32(lo + frac*(hi-lo))
			got := f32ToF16Bits(v)
			d := math.Abs(float64(v) - dec(got))
			dlo, dhi := math.Abs(float64(v)-lo), math.Abs(float64(v)-hi)
			best := math.Min(dlo, dhi)
			if d != best {
				t.Fatalf("F32ToF16(%g) = %#04x (%g), not nearest of %#04x/%#04x", v, got, dec(got), h, h+1)
			}
			if dlo == dhi && got&1 != 0 {
				t.Fatalf("F32ToF16(%g) = %#04x: tie not to even", v, got)
			}
		}
	}
}

func TestBF16(t *testing.T) {
	checkDecode(t, "BF16ToF32", BF16ToF32, []halfCase{
		{0x0000, 0},
		{0x3f80, 1},
		{0xc000, -2},
		{0x4049, 3.140625},
		{0x7f7f, math.Float32frombits(0x7f7f0000)}, // largest finite
		{0x0001, math.Float32frombits(0x00010000)}, // subnormal
		{0x0080, pow2(-126)},                       // smallest normal
		{0x7f80, float32(math.Inf(1))},
		{0xff80, float32(math.Inf(-1))},
	})
	for _, tc := range []struct {
		v    float32
		want uint16
	}{
		{0, 0x0000},
		{1, 0x3f80},
		{-2, 0xc000},
		{math.Pi, 0x4049},
		{1 + pow2(-8), 0x3f80},             // tie to even (down)
		{1 + 3*pow2(-8), 0x3f82},           // tie to even (up)
		{1 + pow2(-8) + pow2(-20), 0x3f81}, // above the tie
		{math.MaxFloat32, 0x7f80},          // rounds to Inf
		{float32(math.Inf(-1)), 0xff80},
		{math.Float32frombits(0x00010000), 0x0001}, // subnormal kept
		{math.Float32frombits(0x00008000), 0x0000}, // tie to even 0
		{math.Float32frombits(0x00018000), 0x0002}, // tie to even 2
	} {
		if got := binary.LittleEndian.Uint16(F32ToBF16([]float32{tc.v})); got != tc.want {
			t.Errorf("F32ToBF16(%g) = %#04x, want %#04x", tc.v, got, tc.want)
		}
	}
	for _, nan := range []uint32{0x7fc00000, 0x7f800001, 0xff800001, 0x7fffffff} {
		got := binary.LittleEndian.Uint16(F32ToBF16([]float32{math.Float32frombits(nan)}))
		if got&0x7f80 != 0x7f80 || got&0x7f == 0 || got>>15 != uint16(nan>>31) {
			t.Errorf("F32ToBF16(NaN %#08x) = %#04x, not a NaN of the same sign", nan, got)
		}
	}
	// Every bf16 value survives bf16 → f32 → bf16.
	f, back := roundTrip16(BF16ToF32, F32ToBF16)
	for i := 0; i < 65536; i++ {
		got, h := binary.LittleEndian.Uint16(back[2*i:]), uint16(i)
		if h&0x7f80 == 0x7f80 && h&0x7f != 0 {
			if got&0x7f80 != 0x7f80 || got&0x7f == 0 {
				t.Fatalf("NaN %#04x came back as %#04x", h, got)
			}
			continue
		}
		if got != h {
			t.Fatalf("%#04x → %g → %#04x", h, f[i], got)
		}
	}
}

func TestToF32(t *testing.T) {
	vals := []float32{1, -2.5, 0.375, 1024}
	for _, tc := range []struct {
		dt  backend.DType
		raw []byte
	}{
		{backend.F32, F32ToBytes(vals)},
		{backend.F16, F32ToF16(vals)},
		{backend.BF16, F32ToBF16(vals)},
	} {
		dst := make([]float32, len(vals))
		if err := ToF32(tc.dt, tc.raw, dst); err != nil {
			t.Fatal(err)
		}
		for i := range vals {
			if dst[i] != vals[i] {
				t.Errorf("%v: got %v, want %v", tc.dt, dst, vals)
				break
			}
		}
	}
	if err := ToF32(backend.DType(9), nil, nil); err == nil {
		t.Errorf("ToF32 accepted an unknown dtype")
	}
	// Empty destinations are fine with empty sources.
	BF16ToF32(nil, nil)
	F16ToF32(nil, nil)
	BytesToF32(nil, nil)
}
