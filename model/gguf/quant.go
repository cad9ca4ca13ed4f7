package gguf

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/dlmcache/dlmcache/model/safetensors"
)

// QK8_0 is the number of elements of a Q8_0 block: a float16 scale d and
// 32 int8 quants q, each element being q·d.
const QK8_0 = 32

// blockQ8_0 is the size of a Q8_0 block in bytes.
const blockQ8_0 = 2 + QK8_0

// QuantizeQ8_0 encodes src (a multiple of 32 values) as Q8_0 blocks, bit
// for bit as ggml's quantize_row_q8_0_ref and gguf-py do: d = max|x|/127 in
// float32, q = round-half-away(x·(1/d)), d stored as float16.
func QuantizeQ8_0(src []float32) ([]byte, error) {
	if len(src)%QK8_0 != 0 {
		return nil, fmt.Errorf("Q8_0: %d values is not a multiple of %d", len(src), QK8_0)
	}
	out := make([]byte, len(src)/QK8_0*blockQ8_0)
	var dh [1]float32
	for b := 0; b*QK8_0 < len(src); b++ {
		x := src[b*QK8_0 : (b+1)*QK8_0]
		var amax float32
		for _, v := range x {
			amax = max(amax, float32(math.Abs(float64(v))))
		}
		d := amax / 127
		var id float32
		if d != 0 {
			id = 1 / d
		}
		blk := out[b*blockQ8_0 : (b+1)*blockQ8_0]
		dh[0] = d
		copy(blk[:2], safetensors.F32ToF16(dh[:]))
		for i, v := range x {
			p := float32(v * id) // rounded to float32, never fused
			blk[2+i] = byte(int8(math.Round(float64(p))))
		}
	}
	return out, nil
}

// DequantizeQ8_0 decodes Q8_0 blocks into dst (len a multiple of 32).
func DequantizeQ8_0(src []byte, dst []float32) {
	var d [1]float32
	for b := 0; b*QK8_0 < len(dst); b++ {
		blk := src[b*blockQ8_0 : (b+1)*blockQ8_0]
		safetensors.F16ToF32(blk[:2], d[:])
		o := dst[b*QK8_0 : (b+1)*QK8_0]
		for i := range o {
			o[i] = float32(int8(blk[2+i])) * d[0]
		}
	}
}

// ToF32 decodes n elements of type t from src into a new slice. It supports
// F32, F16, BF16 and Q8_0.
func ToF32(t GGMLType, src []byte, n int) ([]float32, error) {
	if t.Known() && t.RowBytes(n) != len(src) || !t.Known() {
		return nil, fmt.Errorf("%d bytes do not hold %d %s values", len(src), n, t)
	}
	dst := make([]float32, n)
	switch t {
	case F32:
		safetensors.BytesToF32(src, dst)
	case F16:
		safetensors.F16ToF32(src, dst)
	case BF16:
		safetensors.BF16ToF32(src, dst)
	case Q8_0:
		DequantizeQ8_0(src, dst)
	default:
		return nil, fmt.Errorf("tensor type %s is not supported yet (supported: F32, F16, BF16, Q8_0)", t)
	}
	return dst, nil
}

// FromF32 encodes src as type t (F32, F16, BF16 or Q8_0).
func FromF32(t GGMLType, src []float32) ([]byte, error) {
	switch t {
	case F32:
		return safetensors.F32ToBytes(src), nil
	case F16:
		return safetensors.F32ToF16(src), nil
	case BF16:
		return safetensors.F32ToBF16(src), nil
	case Q8_0:
		return QuantizeQ8_0(src)
	}
	return nil, fmt.Errorf("writing tensor type %s is not supported (supported: F32, F16, BF16, Q8_0)", t)
}

// le is shorthand for the byte order of every GGUF field.
var le = binary.LittleEndian
