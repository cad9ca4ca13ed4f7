package safetensors

import (
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/dlmcache/dlmcache/internal/testutil"
	"github.com/dlmcache/dlmcache/model/backend"
)

// f32s returns n values that every dtype under test holds exactly.
func f32s(n int, scale float32) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = scale * float32(i-n/2) / 4
	}
	return v
}

func writeFile(t *testing.T, path string, ts []WriteTensor, meta map[string]string) {
	t.Helper()
	if err := Write(path, ts, meta); err != nil {
		t.Fatal(err)
	}
}

func writeIndex(t *testing.T, dir string, weightMap map[string]string) {
	t.Helper()
	b, err := json.Marshal(map[string]any{"metadata": map[string]any{"total_size": 123}, "weight_map": weightMap})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, IndexFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestRoundTrip(t *testing.T) {
	vals := f32s(12, 1)
	for _, tc := range []struct {
		st  DType
		bt  backend.DType
		enc func([]float32) []byte
	}{
		{F32, backend.F32, F32ToBytes},
		{F16, backend.F16, F32ToF16},
		{BF16, backend.BF16, F32ToBF16},
	} {
		t.Run(string(tc.st), func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, SingleFile)
			writeFile(t, path, []WriteTensor{
				{Name: "w", DType: tc.st, Shape: []int{3, 4}, Data: tc.enc(vals)},
				{Name: "norm", DType: tc.st, Shape: []int{4}, Data: tc.enc(vals[:4])},
				{Name: "ids", DType: I64, Shape: []int{2}, Data: make([]byte, 16)},
			}, map[string]string{"format": "pt"})

			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if n := binary.LittleEndian.Uint64(raw); n%8 != 0 || raw[8+n-1] != ' ' && raw[8+n-1] != '}' {
				t.Errorf("header length %d not padded to 8 with spaces", n)
			}
			entries, _ := os.ReadDir(dir)
			if len(entries) != 1 {
				t.Errorf("Write left %d files in the directory, want 1", len(entries))
			}

			s, err := Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if got := s.Names(); !reflect.DeepEqual(got, []string{"ids", "norm", "w"}) {
				t.Errorf("Names = %v", got)
			}
			if s.Metadata()["format"] != "pt" {
				t.Errorf("Metadata = %v", s.Metadata())
			}
			w, err := s.Matrix("w", 3, 4)
			if err != nil {
				t.Fatal(err)
			}
			if w.DType != tc.bt || w.File != path || w.Name != "w" || !reflect.DeepEqual(w.Shape, []int{3, 4}) {
				t.Errorf("tensor = %+v", w)
			}
			if got := w.Float32(nil); !reflect.DeepEqual(got, vals) {
				t.Errorf("values = %v, want %v", got, vals)
			}
			n, err := s.Matrix("norm", 1, 4)
			if err != nil {
				t.Fatal(err)
			}
			if got := n.Float32(make([]float32, 0, 10)); !reflect.DeepEqual(got, vals[:4]) {
				t.Errorf("norm = %v, want %v", got, vals[:4])
			}
			if in, file, ok := s.Info("ids"); !ok || in.DType != I64 || file != path {
				t.Errorf("Info(ids) = %+v %s %v", in, file, ok)
			}
		})
	}
}

func TestShardedSetReadsEachTensorFromTheFileTheIndexNames(t *testing.T) {
	dir := t.TempDir()
	a, b := f32s(6, 1), f32s(4, 2)
	writeFile(t, filepath.Join(dir, "model-00001-of-00002.safetensors"), []WriteTensor{
		{Name: "x.weight", DType: BF16, Shape: []int{2, 3}, Data: F32ToBF16(a)},
	}, nil)
	writeFile(t, filepath.Join(dir, "model-00002-of-00002.safetensors"), []WriteTensor{
		{Name: "y.weight", DType: F32, Shape: []int{4}, Data: F32ToBytes(b)},
		{Name: "unlisted", DType: F32, Shape: []int{1}, Data: make([]byte, 4)},
	}, nil)
	writeIndex(t, dir, map[string]string{
		"x.weight": "model-00001-of-00002.safetensors",
		"y.weight": "model-00002-of-00002.safetensors",
	})
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if len(s.Files) != 2 || s.Source != filepath.Join(dir, IndexFile) {
		t.Errorf("files %d, source %s", len(s.Files), s.Source)
	}
	if got := s.Names(); !reflect.DeepEqual(got, []string{"x.weight", "y.weight"}) {
		t.Errorf("Names = %v (the index decides)", got)
	}
	x, err := s.Matrix("x.weight", 2, 3)
	if err != nil {
		t.Fatal(err)
	}
	if x.File != filepath.Join(dir, "model-00001-of-00002.safetensors") || !reflect.DeepEqual(x.Float32(nil), a) {
		t.Errorf("x = %+v", x)
	}
	y, err := s.Tensor("y.weight")
	if err != nil {
		t.Fatal(err)
	}
	if y.File != filepath.Join(dir, "model-00002-of-00002.safetensors") || !reflect.DeepEqual(y.Float32(nil), b) {
		t.Errorf("y = %+v", y)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := s.Tensor("x.weight"); err == nil || !strings.Contains(err.Error(), "after Close") {
		t.Errorf("Tensor after Close: %v", err)
	}
}

// TestOpenErrors checks that every bad checkpoint is refused with an error
// naming the file and the problem. Each case builds a model directory; "$D"
// in want stands for it.
func TestOpenErrors(t *testing.T) {
	good := []WriteTensor{{Name: "w", DType: F32, Shape: []int{2, 2}, Data: make([]byte, 16)}}
	single := func(dir string) string { return filepath.Join(dir, SingleFile) }
	putRaw := func(t *testing.T, path string, b []byte) {
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name  string
		build func(t *testing.T, dir string)
		want  []string
	}{
		{"empty dir", func(t *testing.T, dir string) {}, []string{"$D", "no model.safetensors or model.safetensors.index.json"}},
		{"truncated data", func(t *testing.T, dir string) {
			writeFile(t, single(dir), good, nil)
			b, _ := os.ReadFile(single(dir))
			putRaw(t, single(dir), b[:len(b)-5])
		}, []string{"$D/model.safetensors", `tensor "w"`, "past the data region"}},
		{"truncated header", func(t *testing.T, dir string) {
			writeFile(t, single(dir), good, nil)
			b, _ := os.ReadFile(single(dir))
			putRaw(t, single(dir), b[:20])
		}, []string{"$D/model.safetensors", "exceeds the file size 20", "truncated"}},
		{"shorter than the length prefix", func(t *testing.T, dir string) {
			putRaw(t, single(dir), []byte{1, 2, 3})
		}, []string{"$D/model.safetensors", "3 bytes", "too short"}},
		{"empty file", func(t *testing.T, dir string) {
			putRaw(t, single(dir), nil)
		}, []string{"$D/model.safetensors", "0 bytes"}},
		{"lying header length", func(t *testing.T, dir string) {
			putRaw(t, single(dir), lenPrefix(4096, `{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}    `))
		}, []string{"$D/model.safetensors", "header length 4096 exceeds the file size"}},
		{"offsets out of range", func(t *testing.T, dir string) {
			putRaw(t, single(dir), rawFile(`{"w":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}}`, make([]byte, 8)))
		}, []string{"$D/model.safetensors", `tensor "w"`, "data_offsets [8, 16] run past the data region (8 bytes)"}},
		{"overlapping tensors", func(t *testing.T, dir string) {
			putRaw(t, single(dir), rawFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}`, make([]byte, 16)))
		}, []string{"$D/model.safetensors", `"a"`, `"b"`, "overlap"}},
		{"size mismatch", func(t *testing.T, dir string) {
			putRaw(t, single(dir), rawFile(`{"w":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,16]}}`, make([]byte, 16)))
		}, []string{"$D/model.safetensors", `tensor "w"`, "hold 16 bytes", "BF16 [2 3] needs 12"}},
		{"unknown dtype", func(t *testing.T, dir string) {
			putRaw(t, single(dir), rawFile(`{"w":{"dtype":"Q8_0","shape":[2],"data_offsets":[0,8]}}`, make([]byte, 8)))
		}, []string{"$D/model.safetensors", `tensor "w"`, `unknown dtype "Q8_0"`}},
		{"not json", func(t *testing.T, dir string) {
			putRaw(t, single(dir), rawFile(`{"w":{"dtype":"F32",`, nil))
		}, []string{"$D/model.safetensors", "not valid JSON"}},
		{"missing shard", func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, "a.safetensors"), good, nil)
			writeIndex(t, dir, map[string]string{"w": "a.safetensors", "v": "b.safetensors"})
		}, []string{"$D/model.safetensors.index.json", "shard b.safetensors is missing", "$D/b.safetensors"}},
		{"tensor not in its shard", func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, "a.safetensors"), good, nil)
			writeFile(t, filepath.Join(dir, "b.safetensors"), []WriteTensor{{Name: "v", DType: F32, Shape: []int{1}, Data: make([]byte, 4)}}, nil)
			writeIndex(t, dir, map[string]string{"w": "b.safetensors", "v": "b.safetensors"})
		}, []string{"$D/b.safetensors", `tensor "w"`, "listed in model.safetensors.index.json but is not in the shard"}},
		{"bad shard", func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, "a.safetensors"), good, nil)
			putRaw(t, filepath.Join(dir, "b.safetensors"), lenPrefix(1<<20, `{}`))
			writeIndex(t, dir, map[string]string{"w": "a.safetensors", "v": "b.safetensors"})
		}, []string{"$D/b.safetensors", "exceeds the file size"}},
		{"shard path escapes", func(t *testing.T, dir string) {
			writeIndex(t, dir, map[string]string{"w": "../a.safetensors"})
		}, []string{"$D/model.safetensors.index.json", `"../a.safetensors"`, "not a file name"}},
		{"index not json", func(t *testing.T, dir string) {
			putRaw(t, filepath.Join(dir, IndexFile), []byte(`{"weight_map":`))
		}, []string{"$D/model.safetensors.index.json", "not a valid index"}},
		{"index without weight_map", func(t *testing.T, dir string) {
			putRaw(t, filepath.Join(dir, IndexFile), []byte(`{"metadata":{}}`))
		}, []string{"$D/model.safetensors.index.json", "weight_map is missing or empty"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tc.build(t, dir)
			s, err := Open(dir)
			if err == nil {
				s.Close()
				t.Fatalf("no error")
			}
			for _, w := range tc.want {
				w = strings.ReplaceAll(w, "$D", dir)
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// TestTensorErrors covers errors raised after a successful Open.
func TestTensorErrors(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, SingleFile)
	writeFile(t, path, []WriteTensor{
		{Name: "w", DType: F32, Shape: []int{2, 3}, Data: make([]byte, 24)},
		{Name: "n", DType: BF16, Shape: []int{3}, Data: make([]byte, 6)},
		{Name: "ids", DType: I64, Shape: []int{3}, Data: make([]byte, 24)},
		{Name: "e", DType: F8E4M3, Shape: []int{3}, Data: make([]byte, 3)},
		{Name: "row", DType: F16, Shape: []int{1, 3}, Data: make([]byte, 6)},
	}, nil)
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, tc := range []struct {
		name string
		get  func() (Tensor, error)
		want []string
	}{
		{"missing tensor", func() (Tensor, error) { return s.Tensor("model.transformer.wte.weight") }, []string{path, `"model.transformer.wte.weight" not found`}},
		{"missing via Matrix", func() (Tensor, error) { return s.Matrix("q", 2, 3) }, []string{path, `"q" not found`}},
		{"int dtype", func() (Tensor, error) { return s.Tensor("ids") }, []string{path, `tensor "ids"`, "dtype I64", "only F32, F16 and BF16"}},
		{"fp8 dtype", func() (Tensor, error) { return s.Tensor("e") }, []string{path, `tensor "e"`, "dtype F8_E4M3"}},
		{"transposed", func() (Tensor, error) { return s.Matrix("w", 3, 2) }, []string{`tensor "w" in ` + path, "has shape [2 3], config.json implies [3 2]"}},
		{"wrong rows", func() (Tensor, error) { return s.Matrix("w", 4, 3) }, []string{"has shape [2 3], config.json implies [4 3]"}},
		{"vector wrong length", func() (Tensor, error) { return s.Matrix("n", 1, 4) }, []string{`tensor "n" in ` + path, "has shape [3], config.json implies [4]"}},
		{"vector as matrix", func() (Tensor, error) { return s.Matrix("n", 3, 1) }, []string{"has shape [3], config.json implies [3 1]"}},
		{"matrix as vector", func() (Tensor, error) { return s.Matrix("w", 1, 6) }, []string{"has shape [2 3], config.json implies [6]"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.get()
			testutil.ErrorSays(t, err, tc.want...)
		})
	}
	for _, ok := range []struct {
		name       string
		rows, cols int
	}{{"w", 2, 3}, {"n", 1, 3}, {"row", 1, 3}} {
		if _, err := s.Matrix(ok.name, ok.rows, ok.cols); err != nil {
			t.Errorf("Matrix(%s, %d, %d): %v", ok.name, ok.rows, ok.cols, err)
		}
	}
}

func TestWriteErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		ts   []WriteTensor
		want string
	}{
		{"empty name", []WriteTensor{{DType: F32, Shape: []int{1}, Data: make([]byte, 4)}}, "empty name"},
		{"metadata name", []WriteTensor{{Name: "__metadata__", DType: F32, Shape: []int{1}, Data: make([]byte, 4)}}, "may not be named"},
		{"duplicate", []WriteTensor{{Name: "a", DType: U8, Shape: []int{1}, Data: []byte{1}}, {Name: "a", DType: U8, Shape: []int{1}, Data: []byte{1}}}, `"a" given twice`},
		{"unknown dtype", []WriteTensor{{Name: "a", DType: "F128", Shape: []int{1}, Data: make([]byte, 16)}}, `unknown dtype "F128"`},
		{"negative dim", []WriteTensor{{Name: "a", DType: U8, Shape: []int{-1}}}, "negative dimension"},
		{"short data", []WriteTensor{{Name: "a", DType: F16, Shape: []int{2, 2}, Data: make([]byte, 6)}}, "6 bytes of data, but F16 [2 2] needs 8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, "x.safetensors")
			err := Write(path, tc.ts, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), path) {
				t.Fatalf("error %v, want %q naming %s", err, tc.want, path)
			}
			if _, err := os.Stat(path); err == nil {
				t.Errorf("a failed Write left %s", path)
			}
		})
	}
	if err := Write(filepath.Join(dir, "no", "such", "dir.safetensors"), nil, nil); err == nil {
		t.Errorf("Write into a missing directory succeeded")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("failed Writes left %d files", len(entries))
	}
}

// TestEncodeReference checks the exact bytes of a small file against the
// layout the reference implementation produces: length prefix, compact JSON
// header with __metadata__ first, space padding to 8 bytes, data in order.
func TestEncodeReference(t *testing.T) {
	b, err := Encode([]WriteTensor{
		{Name: "b", DType: U8, Shape: []int{2}, Data: []byte{7, 8}},
		{Name: "a", DType: I16, Shape: []int{}, Data: []byte{1, 2}},
	}, map[string]string{"k": "v"})
	if err != nil {
		t.Fatal(err)
	}
	hdr := `{"__metadata__":{"k":"v"},"b":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"a":{"dtype":"I16","shape":[],"data_offsets":[2,4]}}`
	for len(hdr)%8 != 0 {
		hdr += " "
	}
	want := lenPrefix(uint64(len(hdr)), hdr)
	want = append(want, 7, 8, 1, 2)
	if string(b) != string(want) {
		t.Errorf("Encode =\n%q\nwant\n%q", b, want)
	}
	h, err := ParseHeader(b, int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	if got := h.Names(); !reflect.DeepEqual(got, []string{"b", "a"}) {
		t.Errorf("file order %v, want the given order [b a]", got)
	}
}

// TestWriteFunc: the streamed file is the bytes Encode makes; data of the
// wrong size, or an error from data, leaves no file.
func TestWriteFunc(t *testing.T) {
	dir := t.TempDir()
	ts := []WriteTensor{
		{Name: "w", DType: BF16, Shape: []int{2, 3}, Data: F32ToBF16(f32s(6, 1))},
		{Name: "n", DType: F32, Shape: []int{3}, Data: F32ToBytes(f32s(3, 2))},
		{Name: "s", DType: U8, Shape: []int{}, Data: []byte{9}},
	}
	meta := map[string]string{"format": "pt"}
	want, err := Encode(ts, meta)
	if err != nil {
		t.Fatal(err)
	}
	// The header comes from names, dtypes and shapes alone.
	bare := make([]WriteTensor, len(ts))
	for i, x := range ts {
		bare[i] = WriteTensor{Name: x.Name, DType: x.DType, Shape: x.Shape}
	}
	path := filepath.Join(dir, "x.safetensors")
	asked := 0
	if err := WriteFunc(path, bare, meta, func(i int) ([]byte, error) {
		if i != asked {
			t.Errorf("asked for tensor %d, want %d", i, asked)
		}
		asked++
		return ts[i].Data, nil
	}); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(path); string(got) != string(want) {
		t.Errorf("streamed file differs from Encode's bytes")
	}
	for name, data := range map[string]func(int) ([]byte, error){
		"short": func(i int) ([]byte, error) { return ts[i].Data[1:], nil },
		"error": func(int) ([]byte, error) { return nil, os.ErrInvalid },
	} {
		p := filepath.Join(dir, name+".safetensors")
		if err := WriteFunc(p, bare, meta, data); err == nil {
			t.Errorf("%s: no error", name)
		}
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s: a failed WriteFunc left %s", name, p)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("%d files in the directory, want 1", len(entries))
	}
}
