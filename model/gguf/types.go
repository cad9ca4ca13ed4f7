package gguf

import (
	"fmt"
	"strings"
)

// Magic is "GGUF" read as a little-endian uint32.
const Magic = 0x46554747

// Version is the GGUF version this package writes; it reads 2 and 3 (the
// two differ only in the byte order flag llama.cpp added, which this package
// does not support: big-endian files are refused).
const Version = 3

// DefaultAlignment is the alignment of tensor data when general.alignment is
// absent.
const DefaultAlignment = 32

// ValueType is the type of a metadata value.
type ValueType uint32

// Metadata value types, numbered as in the GGUF specification.
const (
	TypeUint8 ValueType = iota
	TypeInt8
	TypeUint16
	TypeInt16
	TypeUint32
	TypeInt32
	TypeFloat32
	TypeBool
	TypeString
	TypeArray
	TypeUint64
	TypeInt64
	TypeFloat64
)

var valueTypeNames = [...]string{"uint8", "int8", "uint16", "int16", "uint32", "int32",
	"float32", "bool", "string", "array", "uint64", "int64", "float64"}

func (t ValueType) String() string {
	if int(t) < len(valueTypeNames) {
		return valueTypeNames[t]
	}
	return fmt.Sprintf("ValueType(%d)", uint32(t))
}

// scalarSize is the encoded size of a fixed-size value type, 0 for string
// and array, -1 for an unknown type.
func (t ValueType) scalarSize() int {
	switch t {
	case TypeUint8, TypeInt8, TypeBool:
		return 1
	case TypeUint16, TypeInt16:
		return 2
	case TypeUint32, TypeInt32, TypeFloat32:
		return 4
	case TypeUint64, TypeInt64, TypeFloat64:
		return 8
	case TypeString, TypeArray:
		return 0
	}
	return -1
}

// GGMLType is the element type of a tensor (ggml_type).
type GGMLType uint32

// Tensor types, numbered as ggml numbers them. Only F32, F16, BF16, Q8_0,
// Q4_0, Q4_1, Q5_0, Q5_1, the K-quants Q3_K, Q4_K, Q5_K and Q6_K, IQ4_XS and IQ4_NL are decoded
// by this package (codecs; all but the first five are read only); the
// others are named so that an error can say what a file holds.
const (
	F32     GGMLType = 0
	F16     GGMLType = 1
	Q4_0    GGMLType = 2
	Q4_1    GGMLType = 3
	Q5_0    GGMLType = 6
	Q5_1    GGMLType = 7
	Q8_0    GGMLType = 8
	Q8_1    GGMLType = 9
	Q2_K    GGMLType = 10
	Q3_K    GGMLType = 11
	Q4_K    GGMLType = 12
	Q5_K    GGMLType = 13
	Q6_K    GGMLType = 14
	Q8_K    GGMLType = 15
	IQ2_XXS GGMLType = 16
	IQ2_XS  GGMLType = 17
	IQ3_XXS GGMLType = 18
	IQ1_S   GGMLType = 19
	IQ4_NL  GGMLType = 20
	IQ3_S   GGMLType = 21
	IQ2_S   GGMLType = 22
	IQ4_XS  GGMLType = 23
	I8      GGMLType = 24
	I16     GGMLType = 25
	I32     GGMLType = 26
	I64     GGMLType = 27
	F64     GGMLType = 28
	IQ1_M   GGMLType = 29
	BF16    GGMLType = 30
	TQ1_0   GGMLType = 34
	TQ2_0   GGMLType = 35
	MXFP4   GGMLType = 39
)

const qkK = 256 // elements of a K-quant super-block

// typeInfo is a tensor type's name, elements per block and bytes per block
// (ggml's GGML_QUANT_SIZES).
var typeInfo = map[GGMLType]struct {
	name       string
	block, siz int
}{
	F32: {"F32", 1, 4}, F16: {"F16", 1, 2},
	Q4_0: {"Q4_0", 32, 2 + 16}, Q4_1: {"Q4_1", 32, 2 + 2 + 16},
	Q5_0: {"Q5_0", 32, 2 + 4 + 16}, Q5_1: {"Q5_1", 32, 2 + 2 + 4 + 16},
	Q8_0: {"Q8_0", 32, 2 + 32}, Q8_1: {"Q8_1", 32, 4 + 4 + 32},
	Q2_K:    {"Q2_K", qkK, 2 + 2 + qkK/16 + qkK/4},
	Q3_K:    {"Q3_K", qkK, 2 + qkK/4 + qkK/8 + 12},
	Q4_K:    {"Q4_K", qkK, 2 + 2 + qkK/2 + 12},
	Q5_K:    {"Q5_K", qkK, 2 + 2 + qkK/2 + qkK/8 + 12},
	Q6_K:    {"Q6_K", qkK, 2 + qkK/2 + qkK/4 + qkK/16},
	Q8_K:    {"Q8_K", qkK, 4 + qkK + qkK/8},
	IQ2_XXS: {"IQ2_XXS", qkK, 2 + qkK/4},
	IQ2_XS:  {"IQ2_XS", qkK, 2 + qkK/4 + qkK/32},
	IQ3_XXS: {"IQ3_XXS", qkK, 2 + qkK/4 + qkK/8},
	IQ1_S:   {"IQ1_S", qkK, 2 + qkK/8 + qkK/16},
	IQ4_NL:  {"IQ4_NL", 32, 2 + 16},
	IQ3_S:   {"IQ3_S", qkK, 2 + qkK/4 + qkK/8 + qkK/32 + 4},
	IQ2_S:   {"IQ2_S", qkK, 2 + qkK/4 + qkK/16},
	IQ4_XS:  {"IQ4_XS", qkK, 2 + 2 + qkK/2 + qkK/64},
	I8:      {"I8", 1, 1}, I16: {"I16", 1, 2}, I32: {"I32", 1, 4}, I64: {"I64", 1, 8},
	F64:   {"F64", 1, 8},
	IQ1_M: {"IQ1_M", qkK, qkK/8 + qkK/16 + qkK/32},
	BF16:  {"BF16", 1, 2},
	TQ1_0: {"TQ1_0", qkK, 2 + 4*13}, TQ2_0: {"TQ2_0", qkK, 2 + 64},
	MXFP4: {"MXFP4", 32, 1 + 16},
}

func (t GGMLType) String() string {
	if i, ok := typeInfo[t]; ok {
		return i.name
	}
	return fmt.Sprintf("ggml_type(%d)", uint32(t))
}

// Known reports whether t is a type this package can size.
func (t GGMLType) Known() bool { _, ok := typeInfo[t]; return ok }

// BlockSize is the number of elements one block of t holds (1 for the float
// and integer types).
func (t GGMLType) BlockSize() int { return typeInfo[t].block }

// TypeSize is the number of bytes of one block of t.
func (t GGMLType) TypeSize() int { return typeInfo[t].siz }

// RowBytes is the size of n elements of t; n must be a multiple of the block
// size.
func (t GGMLType) RowBytes(n int) int { return n / t.BlockSize() * t.TypeSize() }

// ParseGGMLType turns a name (F32, f16, bf16, q8_0, …) into a type.
func ParseGGMLType(s string) (GGMLType, error) {
	for t, i := range typeInfo {
		if strings.EqualFold(i.name, s) {
			return t, nil
		}
	}
	return 0, fmt.Errorf("unknown tensor type %q", s)
}

// Token types of tokenizer.ggml.token_type (llama.cpp's llama_token_type).
const (
	TokenNormal      = 1
	TokenUnknown     = 2
	TokenControl     = 3
	TokenUserDefined = 4
	TokenUnused      = 5
	TokenByte        = 6
)

// File types of general.file_type (llama.cpp's llama_ftype) for the
// encodings this package writes.
const (
	FileTypeF32  = 0
	FileTypeF16  = 1
	FileTypeQ4_0 = 2
	FileTypeQ8_0 = 7
	FileTypeBF16 = 32
)

// QuantizationVersion is general.quantization_version as llama.cpp writes it
// (GGML_QNT_VERSION).
const QuantizationVersion = 2
