package safetensors

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/dlmcache/dlmcache/model/backend"
)

// BF16ToF32 decodes len(dst) little-endian bfloat16 values from b into dst.
// It panics if b holds fewer than 2·len(dst) bytes. The conversion is exact.
func BF16ToF32(b []byte, dst []float32) {
	b = b[:2*len(dst)]
	for i := range dst {
		dst[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(b[2*i:])) << 16)
	}
}

// F16ToF32 decodes len(dst) little-endian IEEE half-precision values from b
// into dst. It panics if b holds fewer than 2·len(dst) bytes. The conversion
// is exact, subnormals, infinities and NaNs included.
func F16ToF32(b []byte, dst []float32) {
	b = b[:2*len(dst)]
	for i := range dst {
		dst[i] = math.Float32frombits(f16ToF32Bits(binary.LittleEndian.Uint16(b[2*i:])))
	}
}

func f16ToF32Bits(h uint16) uint32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	man := uint32(h) & 0x3ff
	switch exp {
	case 0:
		if man == 0 {
			return sign
		}
		// Subnormal: man·2⁻²⁴. Normalise so that bit 10 is the implicit one.
		e := int32(-14)
		for man&0x400 == 0 {
			man <<= 1
			e--
		}
		return sign | uint32(e+127)<<23 | (man&0x3ff)<<13
	case 0x1f:
		return sign | 0x7f800000 | man<<13
	}
	return sign | (exp+127-15)<<23 | man<<13
}

// BytesToF32 decodes len(dst) little-endian float32 values from b into dst.
// It panics if b holds fewer than 4·len(dst) bytes.
func BytesToF32(b []byte, dst []float32) {
	b = b[:4*len(dst)]
	for i := range dst {
		dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
}

// F32ToBytes encodes src as little-endian float32 bytes.
func F32ToBytes(src []float32) []byte {
	b := make([]byte, 4*len(src))
	for i, v := range src {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return b
}

// F32ToBF16 encodes src as little-endian bfloat16, rounding to nearest even.
// Values too large for bfloat16 become ±Inf; NaNs stay (quiet) NaNs.
func F32ToBF16(src []float32) []byte { return encode16(src, f32ToBF16Bits) }

// encode16 encodes src as little-endian 16-bit values conv(v). It is
// inlined into its callers, so conv is a direct call there, inlined too
// where it is small (go build -gcflags=-m): no indirect call per value.
func encode16(src []float32, conv func(float32) uint16) []byte {
	b := make([]byte, 2*len(src))
	for i, v := range src {
		binary.LittleEndian.PutUint16(b[2*i:], conv(v))
	}
	return b
}

func f32ToBF16Bits(v float32) uint16 {
	bits := math.Float32bits(v)
	if bits&0x7fffffff > 0x7f800000 { // NaN: truncating could make it Inf.
		return uint16(bits>>16) | 0x40
	}
	bits += 0x7fff + (bits>>16)&1
	return uint16(bits >> 16)
}

// F32ToF16 encodes src as little-endian IEEE half precision, rounding to
// nearest even. Values above the half range become ±Inf, tiny values become
// subnormals or ±0, NaNs stay (quiet) NaNs.
func F32ToF16(src []float32) []byte { return encode16(src, f32ToF16Bits) }

func f32ToF16Bits(v float32) uint16 {
	bits := math.Float32bits(v)
	sign := uint16(bits>>16) & 0x8000
	exp := int32(bits>>23) & 0xff
	man := bits & 0x7fffff
	if exp == 0xff {
		if man != 0 {
			return sign | 0x7e00 | uint16(man>>13)
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15
	switch {
	case e >= 0x1f:
		return sign | 0x7c00
	case e <= 0:
		if e < -10 {
			return sign
		}
		// Subnormal half: value = M·2⁻²⁴ with M = m24·2^(e-14).
		m := man | 0x800000
		shift := uint32(14 - e)
		r := m >> shift
		rem := m & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rem > half || (rem == half && r&1 == 1) {
			r++ // may carry into the smallest normal, whose encoding is 0x400
		}
		return sign | uint16(r)
	}
	r := man >> 13
	rem := man & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && r&1 == 1) {
		r++
	}
	// The carry of r may overflow into the exponent, up to Inf: still right.
	return sign | (uint16(e)<<10 + uint16(r))
}

// ToF32 decodes len(dst) values of dtype dt from b into dst. It panics if b
// is too short.
func ToF32(dt backend.DType, b []byte, dst []float32) error {
	switch dt {
	case backend.F32:
		BytesToF32(b, dst)
	case backend.F16:
		F16ToF32(b, dst)
	case backend.BF16:
		BF16ToF32(b, dst)
	default:
		return fmt.Errorf("safetensors: cannot convert %v to float32", dt)
	}
	return nil
}
