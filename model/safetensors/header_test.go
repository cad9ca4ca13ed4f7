package safetensors

import (
	"encoding/binary"
	"strings"
	"testing"

	"github.com/dlmcache/dlmcache/internal/testutil"
)

// rawFile builds a safetensors file from a literal JSON header (padded with
// spaces to 8 bytes) and a data region.
func rawFile(header string, data []byte) []byte {
	for len(header)%8 != 0 {
		header += " "
	}
	b := make([]byte, 8, 8+len(header)+len(data))
	binary.LittleEndian.PutUint64(b, uint64(len(header)))
	b = append(b, header...)
	return append(b, data...)
}

// lenPrefix builds a file whose length prefix is n, followed by rest.
func lenPrefix(n uint64, rest string) []byte {
	b := make([]byte, 8)
	binary.LittleEndian.PutUint64(b, n)
	return append(b, rest...)
}

func TestParseHeader(t *testing.T) {
	file := rawFile(`{"__metadata__":{"format":"pt"},"b":{"dtype":"BF16","shape":[2],"data_offsets":[8,12]},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"s":{"dtype":"I64","shape":[],"data_offsets":[12,20]},"z":{"dtype":"U8","shape":[0,3],"data_offsets":[20,20]}}`, make([]byte, 20))
	h, err := ParseHeader(file, int64(len(file)))
	if err != nil {
		t.Fatal(err)
	}
	if got := h.Metadata["format"]; got != "pt" {
		t.Errorf("metadata format = %q, want pt", got)
	}
	if got, want := strings.Join(h.Names(), ","), "a,b,s,z"; got != want {
		t.Errorf("names = %s, want %s", got, want)
	}
	if h.DataStart != int64(8+h.Len) || h.Len%8 != 0 {
		t.Errorf("DataStart %d, Len %d", h.DataStart, h.Len)
	}
	b := h.Tensors["b"]
	if b.DType != BF16 || len(b.Shape) != 1 || b.Shape[0] != 2 || b.Begin != 8 || b.End != 12 || b.Numel() != 2 {
		t.Errorf("b = %+v", b)
	}
	if s := h.Tensors["s"]; s.Numel() != 1 || len(s.Shape) != 0 {
		t.Errorf("scalar s = %+v", s)
	}
	if z := h.Tensors["z"]; z.Numel() != 0 {
		t.Errorf("empty z = %+v", z)
	}
}

func TestParseHeaderErrors(t *testing.T) {
	data := make([]byte, 64)
	for _, tc := range []struct {
		name string
		file []byte
		size int64 // 0: len(file)
		want []string
	}{
		{"empty", nil, 0, []string{"too short", "8-byte header length"}},
		{"seven bytes", []byte("1234567"), 0, []string{"too short"}},
		{"length beyond file", lenPrefix(1000, `{}`), 0, []string{"header length 1000", "file size 10"}},
		{"length beyond limit", lenPrefix(1<<40, `{}`), 0, []string{"exceeds", "limit"}},
		{"length huge uint64", lenPrefix(^uint64(0), `{}`), 0, []string{"exceeds"}},
		{"header not given", lenPrefix(8, `{}`), 100, []string{"only 2 header bytes"}},
		{"tiny header", lenPrefix(1, `{`), 0, []string{"too short for a JSON object"}},
		{"not an object", rawFile(`[1,2]`, nil), 0, []string{"does not start with '{'"}},
		{"bad json", rawFile(`{"a":`, nil), 0, []string{"not valid JSON"}},
		{"trailing data", rawFile(`{} {}`, nil), 0, []string{"trailing data"}},
		{"entry not object", rawFile(`{"a":3}`, nil), 0, []string{`tensor "a"`, "bad entry"}},
		{"unknown field", rawFile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}}`, data), 0, []string{`tensor "a"`, "unknown field"}},
		{"missing dtype", rawFile(`{"a":{"shape":[1],"data_offsets":[0,4]}}`, data), 0, []string{`tensor "a"`, "missing dtype"}},
		{"missing shape", rawFile(`{"a":{"dtype":"F32","data_offsets":[0,4]}}`, data), 0, []string{"missing shape"}},
		{"missing offsets", rawFile(`{"a":{"dtype":"F32","shape":[1]}}`, data), 0, []string{"missing data_offsets"}},
		{"unknown dtype", rawFile(`{"w":{"dtype":"Q4_K","shape":[1],"data_offsets":[0,4]}}`, data), 0, []string{`tensor "w"`, `unknown dtype "Q4_K"`}},
		{"lower-case dtype", rawFile(`{"w":{"dtype":"f32","shape":[1],"data_offsets":[0,4]}}`, data), 0, []string{`unknown dtype "f32"`}},
		{"negative dim", rawFile(`{"w":{"dtype":"F32","shape":[-1,2],"data_offsets":[0,4]}}`, data), 0, []string{"negative dimension -1"}},
		{"fractional dim", rawFile(`{"w":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}}`, data), 0, []string{"bad entry"}},
		{"huge shape", rawFile(`{"w":{"dtype":"F32","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,4]}}`, data), 0, []string{"needs more bytes than the data region"}},
		{"three offsets", rawFile(`{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}}`, data), 0, []string{"3 values"}},
		{"reversed offsets", rawFile(`{"w":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}}`, data), 0, []string{"not an interval"}},
		{"negative offset", rawFile(`{"w":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}}`, data), 0, []string{"not an interval"}},
		{"offsets past data", rawFile(`{"w":{"dtype":"F32","shape":[1],"data_offsets":[64,68]}}`, data), 0, []string{`tensor "w"`, "past the data region (64 bytes)"}},
		{"size mismatch", rawFile(`{"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}}`, data), 0, []string{`tensor "w"`, "hold 20 bytes", "F32 [2 3] needs 24"}},
		{"size mismatch dtype", rawFile(`{"w":{"dtype":"BF16","shape":[4],"data_offsets":[0,16]}}`, data), 0, []string{"BF16 [4] needs 8"}},
		{"overlap", rawFile(`{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[4],"data_offsets":[12,28]}}`, data), 0, []string{`"a" [0, 16)`, `"b" [12, 28)`, "overlap"}},
		{"same range", rawFile(`{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"I32","shape":[4],"data_offsets":[0,16]}}`, data), 0, []string{"overlap"}},
		{"metadata not strings", rawFile(`{"__metadata__":{"n":1}}`, nil), 0, []string{"__metadata__", "not an object of strings"}},
		{"null", rawFile(`null`, nil), 0, []string{"does not start with '{'"}},
		{"negative file size", rawFile(`{}`, nil), -1, []string{"too short"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			size := tc.size
			if size == 0 {
				size = int64(len(tc.file))
			}
			_, err := ParseHeader(tc.file, size)
			testutil.ErrorSays(t, err, tc.want...)
		})
	}
}

// TestParseHeaderAccepts covers headers that are unusual but valid.
func TestParseHeaderAccepts(t *testing.T) {
	for _, tc := range []struct {
		name string
		file []byte
	}{
		{"empty object", rawFile(`{}`, nil)},
		{"metadata only", rawFile(`{"__metadata__":{}}`, nil)},
		{"null metadata", rawFile(`{"__metadata__":null}`, nil)},
		{"gap between tensors", rawFile(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"b":{"dtype":"U8","shape":[1],"data_offsets":[8,9]}}`, make([]byte, 16))},
		{"empty tensors share an offset", rawFile(`{"a":{"dtype":"F32","shape":[0],"data_offsets":[4,4]},"b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, make([]byte, 8))},
		{"every dtype", rawFile(`{"a":{"dtype":"BOOL","shape":[1],"data_offsets":[0,1]},"b":{"dtype":"F8_E4M3","shape":[1],"data_offsets":[1,2]},"c":{"dtype":"F8_E5M2","shape":[1],"data_offsets":[2,3]},"d":{"dtype":"I8","shape":[1],"data_offsets":[3,4]},"e":{"dtype":"U16","shape":[1],"data_offsets":[4,6]},"f":{"dtype":"I16","shape":[1],"data_offsets":[6,8]},"g":{"dtype":"U32","shape":[1],"data_offsets":[8,12]},"h":{"dtype":"F64","shape":[1],"data_offsets":[16,24]},"i":{"dtype":"U64","shape":[1],"data_offsets":[24,32]}}`, make([]byte, 32))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ParseHeader(tc.file, int64(len(tc.file))); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func FuzzParseHeader(f *testing.F) {
	good, err := Encode([]WriteTensor{
		{Name: "a", DType: F32, Shape: []int{2, 2}, Data: make([]byte, 16)},
		{Name: "b", DType: BF16, Shape: []int{3}, Data: make([]byte, 6)},
	}, map[string]string{"format": "pt"})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good, int64(len(good)))
	f.Add(good[:len(good)-3], int64(len(good)))
	f.Add(rawFile(`{}`, nil), int64(16))
	f.Add(lenPrefix(1<<40, `{}`), int64(10))
	f.Add(rawFile(`{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[4],"data_offsets":[12,28]}}`, make([]byte, 32)), int64(200))
	f.Add(rawFile(`{"w":{"dtype":"F32","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,4]}}`, make([]byte, 4)), int64(100))
	f.Add(rawFile(`{"w":{"dtype":"F32","shape":[0,-1],"data_offsets":[0,0]}}`, nil), int64(100))
	f.Add([]byte{}, int64(0))
	f.Fuzz(func(t *testing.T, b []byte, size int64) {
		h, err := ParseHeader(b, size)
		if err != nil {
			return
		}
		// Whatever was accepted must be sliceable within the file.
		if h.DataStart < 8 || h.DataStart > size {
			t.Fatalf("DataStart %d outside file of %d bytes", h.DataStart, size)
		}
		for name, in := range h.Tensors {
			if in.Begin < 0 || in.End < in.Begin || h.DataStart+in.End > size {
				t.Fatalf("tensor %q [%d, %d) outside the file", name, in.Begin, in.End)
			}
			if in.End-in.Begin != in.Numel()*int64(in.DType.Size()) {
				t.Fatalf("tensor %q byte count disagrees with its shape", name)
			}
		}
	})
}
