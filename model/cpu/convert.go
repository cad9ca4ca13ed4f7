package cpu

import (
	"encoding/binary"
	"math"
	"unsafe"
)

// littleEndian reports whether the machine stores float32 little-endian, so
// that F32 checkpoint bytes can be used in place.
var littleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// decodeF32 converts little-endian float32 bytes: len(src) = 4·len(dst).
func decodeF32(dst []float32, src []byte) {
	_ = src[4*len(dst)-1]
	for i := range dst {
		dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
	}
}

// decodeF16 converts little-endian IEEE half-precision bytes:
// len(src) = 2·len(dst). Every half value, subnormals, infinities and NaNs
// included, is exactly representable as a float32.
func decodeF16(dst []float32, src []byte) {
	_ = src[2*len(dst)-1]
	for i := range dst {
		dst[i] = f16ToF32(binary.LittleEndian.Uint16(src[2*i:]))
	}
}

// f16ToF32 converts one IEEE 754 binary16 value.
func f16ToF32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f: // Inf, NaN (payload kept)
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp != 0: // normal: rebias 15 → 127
		return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
	default: // zero or subnormal: mant · 2⁻²⁴
		f := float32(mant) * (1.0 / (1 << 24))
		if sign != 0 {
			f = -f
		}
		return f
	}
}
