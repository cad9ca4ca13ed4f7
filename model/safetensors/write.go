package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
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

// Encode returns the bytes of a safetensors file holding tensors (in the
// given order) and metadata.
func Encode(tensors []WriteTensor, metadata map[string]string) ([]byte, error) {
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
			return nil, fmt.Errorf("tensor with an empty name")
		case t.Name == metadataKey:
			return nil, fmt.Errorf("tensor may not be named %s", metadataKey)
		case seen[t.Name]:
			return nil, fmt.Errorf("tensor %q given twice", t.Name)
		case !t.DType.Known():
			return nil, fmt.Errorf("tensor %q: unknown dtype %q", t.Name, string(t.DType))
		}
		seen[t.Name] = true
		numel := 1
		for _, d := range t.Shape {
			if d < 0 {
				return nil, fmt.Errorf("tensor %q: negative dimension in shape %v", t.Name, t.Shape)
			}
			numel *= d
		}
		if want := numel * t.DType.Size(); len(t.Data) != want {
			return nil, fmt.Errorf("tensor %q: %d bytes of data, but %s %v needs %d", t.Name, len(t.Data), t.DType, t.Shape, want)
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
		fmt.Fprintf(&hdr, `,"data_offsets":[%d,%d]}`, off, off+int64(len(t.Data)))
		off += int64(len(t.Data))
	}
	hdr.WriteByte('}')
	for hdr.Len()%8 != 0 {
		hdr.WriteByte(' ')
	}

	out := make([]byte, 8, 8+int64(hdr.Len())+off)
	binary.LittleEndian.PutUint64(out, uint64(hdr.Len()))
	out = append(out, hdr.Bytes()...)
	for _, t := range tensors {
		out = append(out, t.Data...)
	}
	return out, nil
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
