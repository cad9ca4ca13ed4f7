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
	// The K-quants are read only (no encoder: FromF32 refuses them), as
	// are the 32-value types llama-quantize falls back to where a row is
	// no whole super-block (Q4_K → Q5_0, Q5_K → Q5_1, and Q4_1).
	Q4_K: blockCodec(Q4_K, decodeQ4_K, nil),
	Q5_K: blockCodec(Q5_K, decodeQ5_K, nil),
	Q6_K: blockCodec(Q6_K, decodeQ6_K, nil),
	Q3_K: blockCodec(Q3_K, decodeQ3_K, nil),
	// IQ4_XS: super-blocks of 256 as the K-quants', read only too.
	IQ4_XS: blockCodec(IQ4_XS, decodeIQ4_XS, nil),
	Q4_1:   blockCodec(Q4_1, decodeQ4_1, nil),
	Q5_0:   blockCodec(Q5_0, decodeQ5_0, nil),
	Q5_1:   blockCodec(Q5_1, decodeQ5_1, nil),
	// IQ4_NL: IQ4_XS's fallback where a row is no whole super-block.
	IQ4_NL: blockCodec(IQ4_NL, decodeIQ4_NL, nil),
}

// blockCodec lifts a block type's functions of one block (its bytes, its
// elements) to runs of blocks; enc nil: a type that is read only.
func blockCodec(t GGMLType, dec func(blk []byte, dst []float32), enc func(blk []byte, src []float32)) codec {
	n, size := t.BlockSize(), t.TypeSize()
	if enc == nil {
		return codec{decode: func(src []byte, dst []float32) {
			for b := 0; b*n < len(dst); b++ {
				dec(src[b*size:(b+1)*size], dst[b*n:(b+1)*n])
			}
		}}
	}
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

// Q4_1 (20 bytes): d, m (float16), qs[16]; value q·d + m, q the low
// nibbles of qs (values 0 … 15), then the high ones. Q5_0 (22 bytes): d,
// qh (uint32: value j's fifth bit is bit j), qs[16]; value (q − 16)·d.
// Q5_1 (24 bytes): d, m, qh, qs; value q·d + m. The products are exact
// in float32; the one rounding is the sum with m.
func decodeQ4_1(blk []byte, dst []float32) {
	d, m := halfAt(blk, 0), halfAt(blk, 2)
	for j := range 16 {
		dst[j] = float32(d*float32(blk[4+j]&0x0f)) + m
		dst[j+16] = float32(d*float32(blk[4+j]>>4)) + m
	}
}

func decodeQ5_0(blk []byte, dst []float32) {
	d, qh := halfAt(blk, 0), le.Uint32(blk[2:])
	for j := range 16 {
		lo := int(blk[6+j]&0x0f) | int(qh>>j&1)<<4
		hi := int(blk[6+j]>>4) | int(qh>>(j+16)&1)<<4
		dst[j], dst[j+16] = float32(lo-16)*d, float32(hi-16)*d
	}
}

func decodeQ5_1(blk []byte, dst []float32) {
	d, m, qh := halfAt(blk, 0), halfAt(blk, 2), le.Uint32(blk[4:])
	for j := range 16 {
		lo := blk[8+j]&0x0f | byte(qh>>j&1)<<4
		hi := blk[8+j]>>4 | byte(qh>>(j+16)&1)<<4
		dst[j], dst[j+16] = float32(d*float32(lo))+m, float32(d*float32(hi))+m
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

// The K-quants (ggml's block_q3_K, block_q4_K, block_q5_K, block_q6_K): super-blocks
// of 256 values in sub-blocks with their own scales, read exactly as
// ggml's dequantize_row_q*_K computes them (and gguf-py's quants.py): the
// products of the float16 scales, the sub-block scales and the quants are
// exact in float32 (at most 23 significant bits), so the one rounding is
// Q4_K's and Q5_K's subtraction of the minimum, fused or not.
//
// Q4_K (144 bytes): float16 d and dmin, 12 bytes of eight 6-bit sub-block
// scales sc and minima m (kScaleMin), 128 bytes of 4-bit quants q. Values
// come in four runs of 64, each two sub-blocks of 32: the low nibbles of
// 32 bytes, then their high nibbles; a value is (d·sc)·q − dmin·m.
//
// Q5_K (176 bytes): d, dmin and the 12 bytes as Q4_K, then 32 bytes qh of
// high bits, then the 128 bytes of low nibbles; sub-block s (of 8) takes
// its fifth bit from bit s of qh[l], l its index in the sub-block.
//
// Q6_K (210 bytes): 128 bytes ql of low nibbles, 64 bytes qh of 2-bit
// highs, 16 int8 sub-block scales (sub-blocks of 16), float16 d last. Each
// half of 128 values takes 64 bytes of ql, 32 of qh and 8 scales; in a
// half, value l + 32·r (l < 32, r < 4) is ql[l + 32·(r&1)]'s low (r < 2)
// or high nibble with bits 2r, 2r+1 of qh[l] above, minus 32, times
// d·scale[l/16 + 2r].
//
// Q3_K (110 bytes): 32 bytes hmask of high bits, 64 bytes qs of 2-bit
// lows, 12 bytes of sixteen 6-bit sub-block scales (sub-blocks of 16),
// float16 d last. Value v's low bits are bits 2·(v%128/32) of
// qs[32·(v/128) + v%32], its high bit bit v/32 of hmask[v%32]; q is the
// low bits less 4 where that bit is clear, and the value d·(sc − 32)·q,
// sc the scale of sub-block v/16 (q3Scales).
const qK = qkK

// kScaleMin returns sub-block j's 6-bit scale and minimum from a Q4_K or
// Q5_K block's 12 bytes (ggml's get_scale_min_k4).
func kScaleMin(j int, q []byte) (sc, m uint8) {
	if j < 4 {
		return q[j] & 63, q[j+4] & 63
	}
	return q[j+4]&0xf | q[j-4]>>6<<4, q[j+4]>>4 | q[j]>>6<<4
}

// halfAt is the float16 at blk[i:i+2].
func halfAt(blk []byte, i int) float32 { return blockScale(blk[i:]) }

// kSubScales is the scales and minimums of sub-blocks 2j and 2j+1 of a
// Q4_K or Q5_K super-block whose scale is d and minimum's scale dmin.
func kSubScales(d, dmin float32, sc []byte, j int) (d1, mm1, d2, mm2 float32) {
	s1, m1 := kScaleMin(2*j, sc)
	s2, m2 := kScaleMin(2*j+1, sc)
	return d * float32(s1), dmin * float32(m1), d * float32(s2), dmin * float32(m2)
}

func decodeQ4_K(blk []byte, dst []float32) {
	d, dmin := halfAt(blk, 0), halfAt(blk, 2)
	sc, qs := blk[4:16], blk[16:144]
	for j := range 4 {
		d1, mm1, d2, mm2 := kSubScales(d, dmin, sc, j)
		q, y := qs[32*j:32*j+32], dst[64*j:64*j+64]
		for l, v := range q {
			y[l] = float32(d1*float32(v&0xf)) - mm1
			y[l+32] = float32(d2*float32(v>>4)) - mm2
		}
	}
}

func decodeQ5_K(blk []byte, dst []float32) {
	d, dmin := halfAt(blk, 0), halfAt(blk, 2)
	sc, qh, qs := blk[4:16], blk[16:48], blk[48:176]
	for j := range 4 {
		d1, mm1, d2, mm2 := kSubScales(d, dmin, sc, j)
		q, y := qs[32*j:32*j+32], dst[64*j:64*j+64]
		for l, v := range q {
			lo, hi := v&0xf|(qh[l]>>(2*j)&1)<<4, v>>4|(qh[l]>>(2*j+1)&1)<<4
			y[l] = float32(d1*float32(lo)) - mm1
			y[l+32] = float32(d2*float32(hi)) - mm2
		}
	}
}

func decodeQ6_K(blk []byte, dst []float32) {
	d := halfAt(blk, 208)
	for n := range 2 {
		ql, qh, sc := blk[64*n:64*n+64], blk[128+32*n:128+32*n+32], blk[192+8*n:192+8*n+8]
		y := dst[128*n : 128*n+128]
		for l := range 32 {
			i := l / 16
			q1 := int(ql[l]&0xf|(qh[l]>>0&3)<<4) - 32
			q2 := int(ql[l+32]&0xf|(qh[l]>>2&3)<<4) - 32
			q3 := int(ql[l]>>4|(qh[l]>>4&3)<<4) - 32
			q4 := int(ql[l+32]>>4|(qh[l]>>6&3)<<4) - 32
			y[l] = float32(d*float32(int8(sc[i]))) * float32(q1)
			y[l+32] = float32(d*float32(int8(sc[i+2]))) * float32(q2)
			y[l+64] = float32(d*float32(int8(sc[i+4]))) * float32(q3)
			y[l+96] = float32(d*float32(int8(sc[i+6]))) * float32(q4)
		}
	}
}

// q3Scales unpacks a Q3_K block's twelve scale bytes: scale j's low four
// bits are byte j%8's low (j < 8) or high nibble, its top two bits bits
// 2·(j/4), 2·(j/4)+1 of byte 8 + j%4.
func q3Scales(sc []byte) (s [16]int) {
	for j := range s {
		s[j] = int(sc[j%8]>>(4*(j/8))&0xf|(sc[8+j%4]>>(2*(j/4))&3)<<4) - 32
	}
	return s
}

func decodeQ3_K(blk []byte, dst []float32) {
	hm, qs, d := blk[0:32], blk[32:96], halfAt(blk, 108)
	sc := q3Scales(blk[96:108])
	for v := range qK {
		l := v % 32
		q := int(qs[32*(v/128)+l]>>(2*(v%128/32))&3) - 4
		if hm[l]>>(v/32)&1 != 0 {
			q += 4
		}
		dst[v] = float32(d*float32(sc[v/16])) * float32(q)
	}
}

// IQ4Levels are IQ4_NL's and IQ4_XS's sixteen int8 levels: a 4-bit
// quant q stands for IQ4Levels[q] (ggml's kvalues_iq4nl).
var IQ4Levels = [16]int8{-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}

// decodeIQ4_NL reads an IQ4_NL block (18 bytes): float16 d, then Q4_0's
// 16 bytes of nibbles (value t the low nibble of byte t, value t+16 its
// high one), each value d·IQ4Levels[q] (exact in float32).
func decodeIQ4_NL(blk []byte, dst []float32) { iq4Run(blk[2:18], halfAt(blk, 0), dst) }

// iq4Run decodes 32 values from the 16 bytes qs, each dl·IQ4Levels[q]:
// the bytes' low nibbles, then their high ones.
func iq4Run(qs []byte, dl float32, y []float32) {
	for j, v := range qs[:16] {
		y[j] = dl * float32(IQ4Levels[v&0xf])
		y[j+16] = dl * float32(IQ4Levels[v>>4])
	}
}

// decodeIQ4_XS reads an IQ4_XS block (136 bytes): float16 d, a uint16
// scales_h (bits 2s, 2s+1: sub-block s's scale's top two bits), 4 bytes
// scales_l (sub-block s's low four bits in byte s/2, low nibble for even
// s), 128 bytes of 4-bit quants; eight sub-blocks of 32, each the low
// nibbles of its 16 bytes then their high nibbles, value
// d·(ls − 32)·IQ4Levels[q] (exact in float32).
func decodeIQ4_XS(blk []byte, dst []float32) {
	d, sh := halfAt(blk, 0), binary.LittleEndian.Uint16(blk[2:])
	sl, qs := blk[4:8], blk[8:136]
	for ib := range 8 {
		ls := int(sl[ib/2]>>(4*(ib%2))&0xf | byte(sh>>(2*ib)&3)<<4)
		iq4Run(qs[16*ib:], d*float32(ls-32), dst[32*ib:32*ib+32])
	}
}

// QuantizeQ8_0 encodes src (a multiple of 32 values) as Q8_0 blocks, bit
// for bit as ggml's quantize_row_q8_0_ref and gguf-py do.
func QuantizeQ8_0(src []float32) ([]byte, error) { return FromF32(Q8_0, src) }

// DequantizeQ8_0 decodes Q8_0 blocks into dst (len a multiple of 32).
func DequantizeQ8_0(src []byte, dst []float32) { codecs[Q8_0].decode(src, dst) }

// ToF32 decodes n elements of type t from src into a new slice, for the
// types of codecs (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q3_K,
// Q4_K, Q5_K, Q6_K, IQ4_XS, IQ4_NL).
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
	if !ok || c.encode == nil {
		return nil, fmt.Errorf("writing tensor type %s is not supported (supported: %s)", t, encoderNames())
	}
	if len(src)%t.BlockSize() != 0 {
		return nil, fmt.Errorf("%s: %d values is not a multiple of %d", t, len(src), t.BlockSize())
	}
	return c.encode(src), nil
}

// Supported reports whether ToF32 takes type t.
func Supported(t GGMLType) bool { _, ok := codecs[t]; return ok }

// Writable reports whether FromF32 takes type t.
func Writable(t GGMLType) bool { c, ok := codecs[t]; return ok && c.encode != nil }

// codecNames lists codecs' types, for errors.
func codecNames() string { return typeNames(Supported) }

// encoderNames lists the types FromF32 writes, for errors.
func encoderNames() string { return typeNames(Writable) }

func typeNames(keep func(GGMLType) bool) string {
	var names []string
	for t := range codecs {
		if keep(t) {
			names = append(names, t.String())
		}
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// le is shorthand for the byte order of every GGUF field.
var le = binary.LittleEndian
