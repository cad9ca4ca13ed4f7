package gguf

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math"
	"reflect"

	"github.com/dlmcache/dlmcache/internal/atomicfile"
)

// WriteTensor describes one tensor to write.
type WriteTensor struct {
	Name string
	// Shape in ggml's order (Shape[0] innermost), as TensorInfo.Shape.
	Shape []int
	Type  GGMLType
}

func (t WriteTensor) size() int64 { return int64(t.Type.RowBytes(numel(t.Shape))) }

// Write writes a GGUF v3 file the way gguf-py's GGUFWriter lays it out: the
// header, the metadata in the given order, the tensor infos in the given
// order with offsets padded to the alignment (general.alignment when kv
// sets it, else 32), zero padding to the alignment, then each tensor's data
// padded likewise. data(i) is asked for tensor i's bytes, in order, so only
// one tensor need be in memory. The file appears at path atomically, once
// complete.
func Write(path string, kv []KV, tensors []WriteTensor, data func(i int) ([]byte, error)) error {
	err := atomicfile.Write(path, 0o644, func(w io.Writer) error {
		bw := bufio.NewWriterSize(w, 1<<20)
		if err := encode(bw, kv, tensors, data); err != nil {
			return err
		}
		return bw.Flush()
	})
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// Encode returns the bytes of a GGUF file (see Write).
func Encode(kv []KV, tensors []WriteTensor, data func(i int) ([]byte, error)) ([]byte, error) {
	var b bytes.Buffer
	if err := encode(&b, kv, tensors, data); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func encode(w io.Writer, kv []KV, tensors []WriteTensor, data func(i int) ([]byte, error)) error {
	align := int64(DefaultAlignment)
	seen := map[string]bool{}
	var h bytes.Buffer
	put32 := func(v uint32) { h.Write(le.AppendUint32(nil, v)) }
	put64 := func(v uint64) { h.Write(le.AppendUint64(nil, v)) }
	putStr := func(s string) { put64(uint64(len(s))); h.WriteString(s) }
	put32(Magic)
	put32(Version)
	put64(uint64(len(tensors)))
	put64(uint64(len(kv)))
	for _, e := range kv {
		if seen[e.Key] {
			return fmt.Errorf("metadata key %q given twice", e.Key)
		}
		seen[e.Key] = true
		if e.Key == "general.alignment" {
			a, ok := e.Value.Uint()
			if !ok || e.Value.Type != TypeUint32 || a == 0 || a&(a-1) != 0 {
				return fmt.Errorf("general.alignment %v: want a uint32 power of two", e.Value)
			}
			align = int64(a)
		}
		putStr(e.Key)
		put32(uint32(e.Value.Type))
		if err := encodeValue(&h, e.Value); err != nil {
			return fmt.Errorf("metadata %q: %w", e.Key, err)
		}
	}
	names := map[string]bool{}
	var off int64
	for _, t := range tensors {
		switch {
		case names[t.Name]:
			return fmt.Errorf("tensor %q given twice", t.Name)
		case !t.Type.Known():
			return fmt.Errorf("tensor %q: unknown type %d", t.Name, uint32(t.Type))
		case len(t.Shape) == 0 || len(t.Shape) > maxDims:
			return fmt.Errorf("tensor %q: %d dimensions (want 1 to %d)", t.Name, len(t.Shape), maxDims)
		case t.Shape[0]%t.Type.BlockSize() != 0:
			return fmt.Errorf("tensor %q: row length %d is not a multiple of %s's block size %d", t.Name, t.Shape[0], t.Type, t.Type.BlockSize())
		}
		names[t.Name] = true
		putStr(t.Name)
		put32(uint32(len(t.Shape)))
		for _, d := range t.Shape {
			if d < 0 {
				return fmt.Errorf("tensor %q: negative dimension in %v", t.Name, t.Shape)
			}
			put64(uint64(d))
		}
		put32(uint32(t.Type))
		put64(uint64(off))
		off += pad(t.size(), align)
	}
	h.Write(make([]byte, pad(int64(h.Len()), align)-int64(h.Len())))
	if _, err := w.Write(h.Bytes()); err != nil {
		return err
	}
	zeros := make([]byte, align)
	for i, t := range tensors {
		b, err := data(i)
		if err != nil {
			return err
		}
		if int64(len(b)) != t.size() {
			return fmt.Errorf("tensor %q: %d bytes of data, but %s %v needs %d", t.Name, len(b), t.Type, t.Shape, t.size())
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
		if _, err := w.Write(zeros[:pad(t.size(), align)-t.size()]); err != nil {
			return err
		}
	}
	return nil
}

func pad(n, align int64) int64 { return (n + align - 1) / align * align }

func encodeValue(h *bytes.Buffer, v Value) error {
	switch v.Type {
	case TypeArray:
		h.Write(le.AppendUint32(nil, uint32(v.Elem)))
		rv := reflect.ValueOf(v.v)
		if rv.Kind() != reflect.Slice {
			return fmt.Errorf("array value holds %T", v.v)
		}
		h.Write(le.AppendUint64(nil, uint64(rv.Len())))
		for i := 0; i < rv.Len(); i++ {
			e := rv.Index(i).Interface()
			ev, ok := e.(Value)
			if !ok {
				ev = Value{Type: v.Elem, v: e}
			}
			if ev.Type != v.Elem {
				return fmt.Errorf("array of %s holds a %s", v.Elem, ev.Type)
			}
			if err := encodeValue(h, ev); err != nil {
				return err
			}
		}
		return nil
	case TypeString:
		s, ok := v.v.(string)
		if !ok {
			return fmt.Errorf("string value holds %T", v.v)
		}
		h.Write(le.AppendUint64(nil, uint64(len(s))))
		h.WriteString(s)
		return nil
	}
	if put, known := scalarWriters[v.Type]; known {
		if b, ok := put(nil, v.v); ok {
			h.Write(b)
			return nil
		}
	}
	return fmt.Errorf("a %s value holds %T", v.Type, v.v)
}

// scalarWriters is the table of the fixed-size value types: each appends
// the encoding of a value holding that type's Go type, and reports false
// for any other Go type.
var scalarWriters = map[ValueType]func([]byte, any) ([]byte, bool){
	TypeUint8:   scalar(func(b []byte, x uint8) []byte { return append(b, x) }),
	TypeInt8:    scalar(func(b []byte, x int8) []byte { return append(b, byte(x)) }),
	TypeBool:    scalar(func(b []byte, x bool) []byte { return append(b, map[bool]byte{true: 1}[x]) }),
	TypeUint16:  scalar(le.AppendUint16),
	TypeInt16:   scalar(func(b []byte, x int16) []byte { return le.AppendUint16(b, uint16(x)) }),
	TypeUint32:  scalar(le.AppendUint32),
	TypeInt32:   scalar(func(b []byte, x int32) []byte { return le.AppendUint32(b, uint32(x)) }),
	TypeFloat32: scalar(func(b []byte, x float32) []byte { return le.AppendUint32(b, math.Float32bits(x)) }),
	TypeUint64:  scalar(le.AppendUint64),
	TypeInt64:   scalar(func(b []byte, x int64) []byte { return le.AppendUint64(b, uint64(x)) }),
	TypeFloat64: scalar(func(b []byte, x float64) []byte { return le.AppendUint64(b, math.Float64bits(x)) }),
}

// scalar makes a scalarWriters entry from an appender of T.
func scalar[T any](put func([]byte, T) []byte) func([]byte, any) ([]byte, bool) {
	return func(b []byte, v any) ([]byte, bool) {
		x, ok := v.(T)
		if !ok {
			return b, false
		}
		return put(b, x), true
	}
}
