package gguf

import (
	"errors"
	"fmt"
	"math"

	"github.com/cespare/xxhash/v2"

	"github.com/dlmcache/dlmcache/internal/mmapfile"
)

// maxDims is ggml's GGML_MAX_DIMS.
const maxDims = 4

// KV is one metadata entry.
type KV struct {
	Key   string
	Value Value
}

// TensorInfo describes one tensor of a file.
type TensorInfo struct {
	Name string
	// Shape in ggml's order: Shape[0] is the innermost (contiguous)
	// dimension, so a PyTorch [rows, cols] matrix has Shape [cols, rows].
	Shape []int
	Type  GGMLType
	// Offset is the data's offset from the start of the data section.
	Offset int64
	// Size is the data's size in bytes.
	Size int64
}

// Numel is the number of elements.
func (t TensorInfo) Numel() int { return numel(t.Shape) }

// numel is the number of elements of a tensor of this shape.
func numel(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// Rows and Cols view the tensor as a matrix of Cols = Shape[0] contiguous
// elements per row (a 1-D tensor is one row).
func (t TensorInfo) Rows() int { return t.Numel() / max(1, t.Cols()) }

// Cols is Shape[0] (0 for a tensor without dimensions).
func (t TensorInfo) Cols() int {
	if len(t.Shape) == 0 {
		return 1
	}
	return t.Shape[0]
}

// File is a GGUF file, memory-mapped read-only. Tensor data returned by Data
// alias the mapping and are valid until Close. A File may be read from
// several goroutines; Close must not race with reads.
type File struct {
	Path    string
	Version uint32
	// KV are the metadata entries in file order.
	KV []KV
	// Tensors are the tensor infos in file order.
	Tensors []TensorInfo
	// Alignment is general.alignment, or DefaultAlignment.
	Alignment int
	// DataOffset is where the data section starts in the file.
	DataOffset int64

	data   []byte
	mapped bool // data is Open's mapping (Release may drop its pages)
	unmap  func() error
	kv     map[string]int
	byName map[string]int
	closed bool
}

// Open maps and parses a GGUF file.
func Open(path string) (*File, error) {
	data, unmap, err := mmapfile.Open(path)
	if err != nil {
		return nil, err
	}
	f, err := parse(data)
	if err != nil {
		unmap()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	f.Path, f.unmap, f.mapped = path, unmap, true
	return f, nil
}

// Release tells the kernel that the process will not read b, tensor data
// of f's mapping, again soon (mmapfile.Release): a loader calls it for a
// tensor its backend copied. It does nothing for a File from Parse.
func (f *File) Release(b []byte) {
	if f.mapped && !f.closed {
		mmapfile.Release(f.data, b)
	}
}

// Parse reads a GGUF file held in memory; its tensor data alias b.
func Parse(b []byte) (*File, error) {
	f, err := parse(b)
	if err != nil {
		return nil, err
	}
	f.unmap = func() error { return nil }
	return f, nil
}

// Close releases the mapping. Close is idempotent.
func (f *File) Close() error {
	if f.closed {
		return nil
	}
	f.closed = true
	f.data = nil
	if f.unmap != nil {
		return f.unmap()
	}
	return nil
}

// Get returns the value of a metadata key.
func (f *File) Get(key string) (Value, bool) {
	i, ok := f.kv[key]
	if !ok {
		return Value{}, false
	}
	return f.KV[i].Value, true
}

// Tensor returns a tensor's info.
func (f *File) Tensor(name string) (TensorInfo, bool) {
	i, ok := f.byName[name]
	if !ok {
		return TensorInfo{}, false
	}
	return f.Tensors[i], true
}

// Data returns a tensor's bytes (read-only, valid until Close).
func (f *File) Data(t TensorInfo) []byte {
	if f.closed {
		panic("gguf: Data after Close")
	}
	lo := f.DataOffset + t.Offset
	hi := lo + t.Size
	return f.data[lo:hi:hi]
}

// Fingerprint identifies the file cheaply: xxHash64 over the header (the
// metadata and tensor infos) and the first, middle and last KiB of every
// tensor's data, as 16 hex digits.
func (f *File) Fingerprint() string {
	h := xxhash.New()
	h.Write([]byte("dlmcache.fingerprint/gguf/v1"))
	h.Write(f.data[:f.DataOffset])
	const n = 1024
	for _, t := range f.Tensors {
		d := f.Data(t)
		if len(d) <= 3*n {
			h.Write(d)
			continue
		}
		mid := (len(d) - n) / 2
		h.Write(d[:n])
		h.Write(d[mid : mid+n])
		h.Write(d[len(d)-n:])
	}
	return fmt.Sprintf("%016x", h.Sum64())
}

// reader decodes the little-endian header.
type reader struct {
	b   []byte
	off int
	err error
}

var errShort = errors.New("unexpected end of file")

func (r *reader) need(n int) bool {
	if r.err != nil {
		return false
	}
	if n < 0 || n > len(r.b)-r.off {
		r.err = fmt.Errorf("at byte %d: %w (need %d more bytes)", r.off, errShort, n)
		return false
	}
	return true
}

// take returns the next n bytes and moves past them; nil when fewer than
// n are left or an earlier read failed (the reader then holds the error).
func (r *reader) take(n int) []byte {
	if !r.need(n) {
		return nil
	}
	b := r.b[r.off : r.off+n]
	r.off += n
	return b
}

// uint reads an n-byte little-endian unsigned integer; 0 after an error.
func (r *reader) uint(n int) uint64 {
	var v uint64
	b := r.take(n)
	for i := len(b) - 1; i >= 0; i-- {
		v = v<<8 | uint64(b[i])
	}
	return v
}

func (r *reader) u8() uint8   { return uint8(r.uint(1)) }
func (r *reader) u16() uint16 { return uint16(r.uint(2)) }
func (r *reader) u32() uint32 { return uint32(r.uint(4)) }
func (r *reader) u64() uint64 { return r.uint(8) }

func (r *reader) str() string {
	n := r.u64()
	if r.err != nil {
		return ""
	}
	if n > uint64(len(r.b)-r.off) {
		r.err = fmt.Errorf("at byte %d: string of %d bytes runs past the end of the file", r.off-8, n)
		return ""
	}
	s := string(r.b[r.off : r.off+int(n)])
	r.off += int(n)
	return s
}

// count reads an element count and checks that count elements of at least
// minSize bytes each can still follow.
func (r *reader) count(what string, minSize int) int {
	at := r.off
	n := r.u64()
	if r.err != nil {
		return 0
	}
	if minSize < 1 {
		minSize = 1
	}
	if n > uint64(len(r.b)-r.off)/uint64(minSize) {
		r.err = fmt.Errorf("at byte %d: %s count %d cannot fit in the file", at, what, n)
		return 0
	}
	return int(n)
}

func (r *reader) scalar(t ValueType) any {
	switch t {
	case TypeUint8:
		return r.u8()
	case TypeInt8:
		return int8(r.u8())
	case TypeUint16:
		return r.u16()
	case TypeInt16:
		return int16(r.u16())
	case TypeUint32:
		return r.u32()
	case TypeInt32:
		return int32(r.u32())
	case TypeFloat32:
		return math.Float32frombits(r.u32())
	case TypeBool:
		at := r.off
		b := r.u8()
		if b > 1 && r.err == nil {
			r.err = fmt.Errorf("at byte %d: bool value %d", at, b)
		}
		return b == 1
	case TypeString:
		return r.str()
	case TypeUint64:
		return r.u64()
	case TypeInt64:
		return int64(r.u64())
	case TypeFloat64:
		return math.Float64frombits(r.u64())
	}
	if r.err == nil {
		r.err = fmt.Errorf("at byte %d: unknown value type %d", r.off, uint32(t))
	}
	return nil
}

func (r *reader) value(t ValueType, depth int) Value {
	if t != TypeArray {
		return Value{Type: t, v: r.scalar(t)}
	}
	if depth > 8 {
		r.err = fmt.Errorf("at byte %d: arrays nested too deeply", r.off)
		return Value{}
	}
	et := ValueType(r.u32())
	if r.err != nil {
		return Value{}
	}
	size := et.scalarSize()
	if size < 0 {
		r.err = fmt.Errorf("at byte %d: array of unknown value type %d", r.off-4, uint32(et))
		return Value{}
	}
	minSize := size
	if et == TypeString {
		minSize = 8
	} else if et == TypeArray {
		minSize = 12
	}
	n := r.count("array", minSize)
	v := Value{Type: TypeArray, Elem: et}
	switch et {
	case TypeString:
		s := make([]string, n)
		for i := range s {
			s[i] = r.str()
		}
		v.v = s
	case TypeArray:
		s := make([]Value, n)
		for i := range s {
			s[i] = r.value(TypeArray, depth+1)
		}
		v.v = s
	default:
		v.v = r.scalarArray(et, n)
	}
	return v
}

// scalarArray decodes n fixed-size values into a typed slice.
func (r *reader) scalarArray(t ValueType, n int) any {
	size := t.scalarSize()
	b := r.take(n * size)
	if r.err != nil {
		return nil
	}
	switch t {
	case TypeUint8:
		return append([]uint8(nil), b...)
	case TypeInt8:
		return decodeEach(b, 1, func(b []byte) int8 { return int8(b[0]) })
	case TypeBool:
		return decodeEach(b, 1, func(b []byte) bool { return b[0] != 0 })
	case TypeUint16:
		return decodeEach(b, 2, le.Uint16)
	case TypeInt16:
		return decodeEach(b, 2, func(b []byte) int16 { return int16(le.Uint16(b)) })
	case TypeUint32:
		return decodeEach(b, 4, le.Uint32)
	case TypeInt32:
		return decodeEach(b, 4, func(b []byte) int32 { return int32(le.Uint32(b)) })
	case TypeFloat32:
		return decodeEach(b, 4, func(b []byte) float32 { return math.Float32frombits(le.Uint32(b)) })
	case TypeUint64:
		return decodeEach(b, 8, le.Uint64)
	case TypeInt64:
		return decodeEach(b, 8, func(b []byte) int64 { return int64(le.Uint64(b)) })
	case TypeFloat64:
		return decodeEach(b, 8, func(b []byte) float64 { return math.Float64frombits(le.Uint64(b)) })
	}
	return nil
}

// decodeEach decodes b as consecutive values of size bytes with get.
func decodeEach[T any](b []byte, size int, get func([]byte) T) []T {
	s := make([]T, len(b)/size)
	for i := range s {
		s[i] = get(b[size*i:])
	}
	return s
}

func parse(b []byte) (*File, error) {
	r := &reader{b: b}
	magic := r.u32()
	if r.err != nil {
		return nil, fmt.Errorf("not a GGUF file: %d bytes", len(b))
	}
	if magic != Magic {
		if magic == 0x47475546 {
			return nil, errors.New("big-endian GGUF files are not supported")
		}
		return nil, fmt.Errorf("not a GGUF file (magic %q)", b[:4])
	}
	f := &File{Version: r.u32(), data: b, kv: map[string]int{}, byName: map[string]int{}}
	switch {
	case r.err != nil:
		return nil, r.err
	case f.Version == 1:
		return nil, errors.New("GGUF version 1 is not supported (convert the file again with a current llama.cpp)")
	case f.Version > 0xffff:
		return nil, fmt.Errorf("GGUF version %#x: a big-endian file? Only little-endian files are supported", f.Version)
	case f.Version != 2 && f.Version != 3:
		return nil, fmt.Errorf("GGUF version %d is not supported (want 2 or 3)", f.Version)
	}
	nt := r.u64()
	nkv := r.count("metadata", 13)
	if nt > uint64(len(b))/24 {
		return nil, fmt.Errorf("tensor count %d cannot fit in the file", nt)
	}
	for i := 0; i < nkv && r.err == nil; i++ {
		k := r.str()
		t := ValueType(r.u32())
		v := r.value(t, 0)
		if r.err != nil {
			return nil, fmt.Errorf("metadata %q: %w", k, r.err)
		}
		if _, dup := f.kv[k]; dup {
			return nil, fmt.Errorf("metadata key %q appears twice", k)
		}
		f.kv[k] = len(f.KV)
		f.KV = append(f.KV, KV{Key: k, Value: v})
	}
	if r.err != nil {
		return nil, r.err
	}
	f.Alignment = DefaultAlignment
	if v, ok := f.Get("general.alignment"); ok {
		a, ok := v.Uint()
		if !ok || a == 0 || a&(a-1) != 0 || a > 1<<20 {
			return nil, fmt.Errorf("general.alignment %v: want a power of two (uint32)", v)
		}
		f.Alignment = int(a)
	}
	for i := 0; i < int(nt); i++ {
		t := TensorInfo{Name: r.str()}
		nd := r.u32()
		if r.err != nil {
			return nil, fmt.Errorf("tensor info %d: %w", i, r.err)
		}
		if nd > maxDims {
			return nil, fmt.Errorf("tensor %q has %d dimensions (at most %d)", t.Name, nd, maxDims)
		}
		numel := uint64(1)
		for j := uint32(0); j < nd; j++ {
			d := r.u64()
			if d > math.MaxInt32*uint64(64) || (d != 0 && numel > math.MaxInt64/8/d) {
				return nil, fmt.Errorf("tensor %q: dimension %d is %d, too large", t.Name, j, d)
			}
			numel *= d
			t.Shape = append(t.Shape, int(d))
		}
		t.Type = GGMLType(r.u32())
		off := r.u64()
		if r.err != nil {
			return nil, fmt.Errorf("tensor %q: %w", t.Name, r.err)
		}
		if !t.Type.Known() {
			return nil, fmt.Errorf("tensor %q has unknown type %d", t.Name, uint32(t.Type))
		}
		if len(t.Shape) > 0 && t.Shape[0]%t.Type.BlockSize() != 0 {
			return nil, fmt.Errorf("tensor %q: row length %d is not a multiple of %s's block size %d", t.Name, t.Shape[0], t.Type, t.Type.BlockSize())
		}
		if off%uint64(f.Alignment) != 0 {
			return nil, fmt.Errorf("tensor %q: data offset %d is not a multiple of the alignment %d", t.Name, off, f.Alignment)
		}
		if off > uint64(len(b)) {
			return nil, fmt.Errorf("tensor %q: data offset %d is past the end of the file", t.Name, off)
		}
		t.Offset = int64(off)
		t.Size = int64(numel) / int64(t.Type.BlockSize()) * int64(t.Type.TypeSize())
		if _, dup := f.byName[t.Name]; dup {
			return nil, fmt.Errorf("tensor %q appears twice", t.Name)
		}
		f.byName[t.Name] = len(f.Tensors)
		f.Tensors = append(f.Tensors, t)
	}
	a := int64(f.Alignment)
	f.DataOffset = (int64(r.off) + a - 1) / a * a
	for _, t := range f.Tensors {
		if end := f.DataOffset + t.Offset + t.Size; end > int64(len(b)) {
			return nil, fmt.Errorf("tensor %q (%s %v) ends at byte %d, past the end of the file (%d bytes; truncated?)",
				t.Name, t.Type, t.Shape, end, len(b))
		}
	}
	return f, nil
}
