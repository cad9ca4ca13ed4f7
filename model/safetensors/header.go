package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// DType is an element type as a safetensors header spells it ("F32",
// "BF16", …). It is distinct from backend.DType, which names only the types a
// backend can compute with.
type DType string

// The dtypes of the safetensors format.
const (
	BOOL    DType = "BOOL"
	U8      DType = "U8"
	I8      DType = "I8"
	I16     DType = "I16"
	U16     DType = "U16"
	I32     DType = "I32"
	U32     DType = "U32"
	I64     DType = "I64"
	U64     DType = "U64"
	F16     DType = "F16"
	BF16    DType = "BF16"
	F32     DType = "F32"
	F64     DType = "F64"
	F8E4M3  DType = "F8_E4M3"
	F8E5M2  DType = "F8_E5M2"
	unknown DType = ""
)

var dtypeSize = map[DType]int{
	BOOL: 1, U8: 1, I8: 1, F8E4M3: 1, F8E5M2: 1,
	I16: 2, U16: 2, F16: 2, BF16: 2,
	I32: 4, U32: 4, F32: 4,
	I64: 8, U64: 8, F64: 8,
}

// Size is the number of bytes of one element, or 0 for an unknown dtype.
func (d DType) Size() int { return dtypeSize[d] }

// Known reports whether d is one of the format's dtypes.
func (d DType) Known() bool { return dtypeSize[d] != 0 }

// MaxHeaderLen bounds the JSON header (the reference implementation uses
// 100 MB); a larger length prefix is taken as a corrupt or hostile file.
const MaxHeaderLen = 100 << 20

// metadataKey is the header entry that holds free-form string metadata.
const metadataKey = "__metadata__"

// Info describes one tensor of a file.
type Info struct {
	DType DType
	Shape []int
	// Begin and End are byte offsets into the data region, End exclusive.
	Begin, End int64
}

// Numel is the number of elements (1 for a scalar, shape []).
func (i Info) Numel() int64 {
	n := int64(1)
	for _, s := range i.Shape {
		n *= int64(s)
	}
	return n
}

// Header is a parsed and validated safetensors header.
type Header struct {
	Tensors  map[string]Info
	Metadata map[string]string
	// Len is the JSON header's length N from the 8-byte prefix; the data
	// region starts at byte DataStart = 8+N of the file.
	Len       int
	DataStart int64
}

// Names returns the tensor names in order of their data offsets (the order
// in which they lie in the file), ties broken by name.
func (h *Header) Names() []string {
	names := make([]string, 0, len(h.Tensors))
	for n := range h.Tensors {
		names = append(names, n)
	}
	sort.Slice(names, func(a, b int) bool {
		ia, ib := h.Tensors[names[a]], h.Tensors[names[b]]
		if ia.Begin != ib.Begin {
			return ia.Begin < ib.Begin
		}
		return names[a] < names[b]
	})
	return names
}

// rawInfo is a tensor entry as JSON has it. Pointers tell a missing field
// from a zero one.
type rawInfo struct {
	DType       *string  `json:"dtype"`
	Shape       *[]int64 `json:"shape"`
	DataOffsets *[]int64 `json:"data_offsets"`
}

// ParseHeader parses and validates the header of a safetensors file. b holds
// the file's first bytes (at least the 8-byte length prefix and the JSON
// header; the whole file is fine), fileSize is the size of the whole file.
// Errors describe the problem; callers add the file name.
func ParseHeader(b []byte, fileSize int64) (*Header, error) {
	if fileSize < 8 || len(b) < 8 {
		return nil, fmt.Errorf("file is %d bytes, too short for the 8-byte header length", fileSize)
	}
	n := binary.LittleEndian.Uint64(b[:8])
	if n > MaxHeaderLen {
		return nil, fmt.Errorf("header length %d exceeds the %d-byte limit (corrupt or not a safetensors file)", n, MaxHeaderLen)
	}
	if int64(n) > fileSize-8 {
		return nil, fmt.Errorf("header length %d exceeds the file size %d (truncated file or lying header)", n, fileSize)
	}
	if uint64(len(b)-8) < n {
		return nil, fmt.Errorf("header length %d but only %d header bytes given", n, len(b)-8)
	}
	if n < 2 {
		return nil, fmt.Errorf("header length %d is too short for a JSON object", n)
	}
	js := b[8 : 8+n]
	// The reference writer pads with spaces; it requires the header to
	// start with '{'.
	if js[0] != '{' {
		return nil, fmt.Errorf("header does not start with '{' (got %q): not a safetensors file", js[0])
	}
	dataStart := int64(8 + n)
	dataLen := fileSize - dataStart

	var entries map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(js))
	if err := dec.Decode(&entries); err != nil {
		return nil, fmt.Errorf("header is not valid JSON: %v", err)
	}
	if rest := bytes.TrimRight(js[dec.InputOffset():], " \t\r\n\x00"); len(rest) > 0 {
		return nil, fmt.Errorf("header has %d bytes of trailing data after the JSON object", len(rest))
	}
	if entries == nil {
		return nil, fmt.Errorf("header is JSON null, want an object")
	}

	h := &Header{Tensors: make(map[string]Info, len(entries)), Len: int(n), DataStart: dataStart}
	for name, raw := range entries {
		if name == metadataKey {
			if err := json.Unmarshal(raw, &h.Metadata); err != nil {
				return nil, fmt.Errorf("header %s is not an object of strings: %v", metadataKey, err)
			}
			continue
		}
		info, err := parseInfo(raw, dataLen)
		if err != nil {
			return nil, fmt.Errorf("tensor %q: %v", name, err)
		}
		h.Tensors[name] = info
	}

	// No two non-empty tensors may share bytes.
	names := h.Names()
	var prev string
	var prevEnd int64
	for _, name := range names {
		in := h.Tensors[name]
		if in.Begin == in.End {
			continue
		}
		if prev != "" && in.Begin < prevEnd {
			pi := h.Tensors[prev]
			return nil, fmt.Errorf("tensors %q [%d, %d) and %q [%d, %d) overlap", prev, pi.Begin, pi.End, name, in.Begin, in.End)
		}
		prev, prevEnd = name, in.End
	}
	return h, nil
}

func parseInfo(raw json.RawMessage, dataLen int64) (Info, error) {
	var ri rawInfo
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ri); err != nil {
		return Info{}, fmt.Errorf("bad entry: %v", err)
	}
	switch {
	case ri.DType == nil:
		return Info{}, fmt.Errorf("missing dtype")
	case ri.Shape == nil:
		return Info{}, fmt.Errorf("missing shape")
	case ri.DataOffsets == nil:
		return Info{}, fmt.Errorf("missing data_offsets")
	}
	dt := DType(*ri.DType)
	if !dt.Known() {
		return Info{}, fmt.Errorf("unknown dtype %q (known: %s)", *ri.DType, knownDTypes())
	}
	shape := make([]int, len(*ri.Shape))
	zero := false
	for i, s := range *ri.Shape {
		if s < 0 {
			return Info{}, fmt.Errorf("negative dimension %d in shape %v", s, *ri.Shape)
		}
		shape[i] = int(s)
		zero = zero || s == 0
	}
	numel := int64(0)
	if !zero {
		numel = 1
		for _, s := range *ri.Shape {
			if numel > dataLen/s {
				return Info{}, fmt.Errorf("shape %v needs more bytes than the data region holds (%d)", shape, dataLen)
			}
			numel *= s
		}
	}
	off := *ri.DataOffsets
	if len(off) != 2 {
		return Info{}, fmt.Errorf("data_offsets has %d values, want [begin, end]", len(off))
	}
	begin, end := off[0], off[1]
	if begin < 0 || end < begin {
		return Info{}, fmt.Errorf("data_offsets [%d, %d] are not an interval", begin, end)
	}
	if end > dataLen {
		return Info{}, fmt.Errorf("data_offsets [%d, %d] run past the data region (%d bytes)", begin, end, dataLen)
	}
	want := numel * int64(dt.Size())
	if end-begin != want {
		return Info{}, fmt.Errorf("data_offsets [%d, %d] hold %d bytes, but %s %v needs %d", begin, end, end-begin, dt, shape, want)
	}
	return Info{DType: dt, Shape: shape, Begin: begin, End: end}, nil
}

func knownDTypes() string {
	var s []string
	for d := range dtypeSize {
		s = append(s, string(d))
	}
	sort.Strings(s)
	return strings.Join(s, ", ")
}
