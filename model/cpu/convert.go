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
