package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sort"

	"github.com/dlmcache/dlmcache/internal/atomicfile"
)

// WriteTensor is one tensor to write: Data holds numel·DType.Size()
// little-endian bytes.
type WriteTensor struct {
	Name  string
	DType DType
	Shape []int
	Data  []byte
}

// Write writes tensors, in the given order, and metadata (may be nil) to a
// safetensors file at path. The header is padded with spaces to a multiple
// of 8 bytes, as the reference implementation does. The file is written to a
// temporary file in the same directory and renamed into place, so a reader
// never sees a partial file.
func Write(path string, tensors []WriteTensor, metadata map[string]string) error {
	b, err := Encode(tensors, metadata)
	if err != nil {
		return fmt.Errorf("%s: %v", path, err)
	}
	return writeAtomic(path, b)
}

// WriteFunc writes a safetensors file like Write, streaming it: the
// header is built from the tensors' names, dtypes and shapes (their Data is
// not read), then data(i) is asked for tensor i's bytes, in order, and
// written before data(i+1) is asked, so that only one tensor need be in
// memory. The file appears at path, atomically, only when every tensor is
// written.
func WriteFunc(path string, tensors []WriteTensor, metadata map[string]string, data func(i int) ([]byte, error)) error {
	hdr, _, err := header(tensors, metadata, false)
	if err != nil {
		return fmt.Errorf("%s: %v", path, err)
	}
	return atomicfile.Write(path, 0o644, func(w io.Writer) error {
		if _, err := w.Write(hdr); err != nil {
			return err
		}
		for i, t := range tensors {
			b, err := data(i)
			if err != nil {
				return err
			}
			if want := numel(t.Shape) * t.DType.Size(); len(b) != want {
				return fmt.Errorf("%s: tensor %q: %d bytes of data, but %s %v needs %d", path, t.Name, len(b), t.DType, t.Shape, want)
			}
			if _, err := w.Write(b); err != nil {
				return err
			}
		}
		return nil
	})
}

// Encode returns the bytes of a safetensors file holding tensors (in the
// given order) and metadata.
func Encode(tensors []WriteTensor, metadata map[string]string) ([]byte, error) {
	hdr, size, err := header(tensors, metadata, true)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, int64(len(hdr))+size)
	out = append(out, hdr...)
	for _, t := range tensors {
		out = append(out, t.Data...)
	}
	return out, nil
}

// numel is the number of elements of a tensor of this shape.
func numel(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// header returns a file's first bytes, the header length and the header
// (padded), and the size of the data that follows. checkData: the tensors'
// Data must have the sizes their shapes give.
func header(tensors []WriteTensor, metadata map[string]string, checkData bool) ([]byte, int64, error) {
	var hdr bytes.Buffer
	hdr.WriteByte('{')
	first := true
	if len(metadata) > 0 {
		keys := make([]string, 0, len(metadata))
		for k := range metadata {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		hdr.WriteString(`"__metadata__":{`)
		for i, k := range keys {
			if i > 0 {
				hdr.WriteByte(',')
			}
			writeJSON(&hdr, k)
			hdr.WriteByte(':')
			writeJSON(&hdr, metadata[k])
		}
		hdr.WriteByte('}')
		first = false
	}
	seen := make(map[string]bool, len(tensors))
	var off int64
	for _, t := range tensors {
		switch {
		case t.Name == "":
			return nil, 0, fmt.Errorf("tensor with an empty name")
		case t.Name == metadataKey:
			return nil, 0, fmt.Errorf("tensor may not be named %s", metadataKey)
		case seen[t.Name]:
			return nil, 0, fmt.Errorf("tensor %q given twice", t.Name)
		case !t.DType.Known():
			return nil, 0, fmt.Errorf("tensor %q: unknown dtype %q", t.Name, string(t.DType))
		}
		seen[t.Name] = true
		if slices.ContainsFunc(t.Shape, func(d int) bool { return d < 0 }) {
			return nil, 0, fmt.Errorf("tensor %q: negative dimension in shape %v", t.Name, t.Shape)
		}
		size := numel(t.Shape) * t.DType.Size()
		if checkData && len(t.Data) != size {
			return nil, 0, fmt.Errorf("tensor %q: %d bytes of data, but %s %v needs %d", t.Name, len(t.Data), t.DType, t.Shape, size)
		}
		if !first {
			hdr.WriteByte(',')
		}
		first = false
		writeJSON(&hdr, t.Name)
		shape := t.Shape
		if shape == nil {
			shape = []int{}
		}
		fmt.Fprintf(&hdr, `:{"dtype":"%s","shape":`, t.DType)
		writeJSON(&hdr, shape)
		fmt.Fprintf(&hdr, `,"data_offsets":[%d,%d]}`, off, off+int64(size))
		off += int64(size)
	}
	hdr.WriteByte('}')
	for hdr.Len()%8 != 0 {
		hdr.WriteByte(' ')
	}
	out := make([]byte, 8, 8+hdr.Len())
	binary.LittleEndian.PutUint64(out, uint64(hdr.Len()))
	return append(out, hdr.Bytes()...), off, nil
}

func writeJSON(buf *bytes.Buffer, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // strings and int slices always marshal
	}
	buf.Write(b)
}

// writeAtomic writes b to path atomically (internal/atomicfile), 0644.
func writeAtomic(path string, b []byte) error {
	return atomicfile.WriteFile(path, b, 0o644)
}
