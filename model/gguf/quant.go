package gguf

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/dlmcache/dlmcache/model/safetensors"
)

// QK8_0 is the number of elements of a Q8_0 block: a float16 scale d and
// 32 int8 quants q, each element being q·d.
const QK8_0 = 32

// QK4_0 is the number of elements of a Q4_0 block: a float16 scale d and
// 32 4-bit quants q (16 bytes: q[j] in the low nibble of byte j, q[j+16]
// in its high nibble), each element being (q − 8)·d.
const QK4_0 = 32

// codec is one tensor type ToF32 and FromF32 take: decode fills dst from
// the bytes of len(dst) elements; encode returns the bytes of src, whose
// length is a multiple of the type's block size.
type codec struct {
	decode func(src []byte, dst []float32)
	encode func(src []float32) []byte
}

// codecs is the table of the tensor types this package reads and writes.
// The block types' encoders are ggml's reference quantizers
// (quantize_row_*_ref) as gguf-py's quants.py computes them, bit for bit.
var codecs = map[GGMLType]codec{
	F32:  {safetensors.BytesToF32, safetensors.F32ToBytes},
	F16:  {safetensors.F16ToF32, safetensors.F32ToF16},
	BF16: {safetensors.BF16ToF32, safetensors.F32ToBF16},
	Q8_0: blockCodec(Q8_0, decodeQ8_0, encodeQ8_0),
	Q4_0: blockCodec(Q4_0, decodeQ4_0, encodeQ4_0),
}

// blockCodec lifts a block type's functions of one block (its bytes, its
// elements) to runs of blocks.
func blockCodec(t GGMLType, dec func(blk []byte, dst []float32), enc func(blk []byte, src []float32)) codec {
	n, size := t.BlockSize(), t.TypeSize()
	return codec{
		decode: func(src []byte, dst []float32) {
			for b := 0; b*n < len(dst); b++ {
				dec(src[b*size:(b+1)*size], dst[b*n:(b+1)*n])
			}
		},
		encode: func(src []float32) []byte {
			out := make([]byte, len(src)/n*size)
			for b := 0; b*n < len(src); b++ {
				enc(out[b*size:(b+1)*size], src[b*n:(b+1)*n])
			}
			return out
		},
	}
}

// blockScale returns a block's float16 scale d.
func blockScale(blk []byte) float32 {
	var d [1]float32
	safetensors.F16ToF32(blk[:2], d[:])
	return d[0]
}

// putScale stores d in a block as float16 (rounded to nearest, ties even).
func putScale(blk []byte, d float32) { copy(blk[:2], safetensors.F32ToF16([]float32{d})) }

func decodeQ8_0(blk []byte, dst []float32) {
	d := blockScale(blk)
	for i := range dst {
		dst[i] = float32(int8(blk[2+i])) * d
	}
}

// encodeQ8_0 is quantize_row_q8_0_ref: d = max|x|/127 in float32,
// q = round-half-away(x·(1/d)), d stored as float16.
func encodeQ8_0(blk []byte, x []float32) {
	var amax float32
	for _, v := range x {
		amax = max(amax, float32(math.Abs(float64(v))))
	}
	d := amax / 127
	var id float32
	if d != 0 {
		id = 1 / d
	}
	putScale(blk, d)
	for i, v := range x {
		p := float32(v * id) // rounded to float32, never fused
		blk[2+i] = byte(int8(math.Round(float64(p))))
	}
}

func decodeQ4_0(blk []byte, dst []float32) {
	d := blockScale(blk)
	for j := range QK4_0 / 2 {
		dst[j] = float32(int(blk[2+j]&0x0f)-8) * d
		dst[j+QK4_0/2] = float32(int(blk[2+j]>>4)-8) * d
	}
}

// encodeQ4_0 is quantize_row_q4_0_ref: m is the element of largest
// magnitude (the first such), d = m/−8, q = min(15, trunc(x·(1/d) + 8.5)),
// the product and the sum each rounded to float32, as gguf-py computes
// them (and ggml's C where its compiler does not fuse the two).
func encodeQ4_0(blk []byte, x []float32) {
	var amax, m float32
	for _, v := range x {
		if a := float32(math.Abs(float64(v))); a > amax {
			amax, m = a, v
		}
	}
	d := m / -8
	var id float32
	if d != 0 {
		id = 1 / d
	}
	putScale(blk, d)
	q := func(v float32) byte {
		p := float32(v * id) // each step rounded to float32, never fused
		return byte(min(15, max(0, int(float32(p+8.5)))))
	}
	for j := range QK4_0 / 2 {
		blk[2+j] = q(x[j]) | q(x[j+QK4_0/2])<<4
	}
}

// QuantizeQ8_0 encodes src (a multiple of 32 values) as Q8_0 blocks, bit
// for bit as ggml's quantize_row_q8_0_ref and gguf-py do.
func QuantizeQ8_0(src []float32) ([]byte, error) { return FromF32(Q8_0, src) }

// DequantizeQ8_0 decodes Q8_0 blocks into dst (len a multiple of 32).
func DequantizeQ8_0(src []byte, dst []float32) { codecs[Q8_0].decode(src, dst) }

// ToF32 decodes n elements of type t from src into a new slice, for the
// types of codecs (F32, F16, BF16, Q8_0, Q4_0).
func ToF32(t GGMLType, src []byte, n int) ([]float32, error) {
	if !t.Known() || n%t.BlockSize() != 0 || t.RowBytes(n) != len(src) {
		return nil, fmt.Errorf("%d bytes do not hold %d %s values", len(src), n, t)
	}
	c, ok := codecs[t]
	if !ok {
		return nil, fmt.Errorf("tensor type %s is not supported yet (supported: %s)", t, codecNames())
	}
	dst := make([]float32, n)
	c.decode(src, dst)
	return dst, nil
}

// FromF32 encodes src as type t, one of codecs' types; src's length must
// be a multiple of t's block size.
func FromF32(t GGMLType, src []float32) ([]byte, error) {
	c, ok := codecs[t]
	if !ok {
		return nil, fmt.Errorf("writing tensor type %s is not supported (supported: %s)", t, codecNames())
	}
	if len(src)%t.BlockSize() != 0 {
		return nil, fmt.Errorf("%s: %d values is not a multiple of %d", t, len(src), t.BlockSize())
	}
	return c.encode(src), nil
}

// Supported reports whether ToF32 and FromF32 take type t.
func Supported(t GGMLType) bool { _, ok := codecs[t]; return ok }

// codecNames lists codecs' types, for errors.
func codecNames() string {
	var names []string
	for t := range codecs {
		names = append(names, t.String())
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// le is shorthand for the byte order of every GGUF field.
var le = binary.LittleEndian
