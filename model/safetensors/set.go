package safetensors

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"github.com/dlmcache/dlmcache/internal/mmapfile"
	"github.com/dlmcache/dlmcache/model/backend"
)

// File names of a Hugging Face model directory.
const (
	SingleFile = "model.safetensors"
	IndexFile  = "model.safetensors.index.json"
)

// File is one memory-mapped safetensors file.
type File struct {
	Path   string
	Header *Header
	size   int64
	data   []byte // the whole file, read-only mapping
	unmap  func() error
}

// Size is the file's size in bytes.
func (f *File) Size() int64 { return f.size }

// bytes returns the data of a tensor of this file.
func (f *File) bytes(in Info) []byte {
	lo, hi := f.Header.DataStart+in.Begin, f.Header.DataStart+in.End
	return f.data[lo:hi:hi]
}

// Set is the tensors of a checkpoint: one file, or the shards of an index.
// Tensor data are slices of read-only memory mappings, valid until Close.
// A Set may be read from several goroutines at once; Close must not race
// with reads.
type Set struct {
	// Dir is the model directory (the file's directory for OpenFile).
	Dir string
	// Source is the file that names the tensors: the single safetensors
	// file or the index. Errors about missing tensors cite it.
	Source string
	// Files are the mapped files, sorted by path.
	Files []*File

	where  map[string]*File
	closed bool
}

// Tensor is one tensor of a Set in a dtype a backend can use.
type Tensor struct {
	Name string
	// File is the path of the file that holds the tensor.
	File  string
	DType backend.DType
	Shape []int
	// Data are the raw little-endian bytes, len numel·DType.Size(). They
	// alias the file's mapping: read-only, valid until Set.Close.
	Data []byte
}

// Numel is the number of elements.
func (t Tensor) Numel() int { return numel(t.Shape) }

// Float32 decodes the tensor into dst (allocated when nil or too short) and
// returns it, len Numel.
func (t Tensor) Float32(dst []float32) []float32 {
	n := t.Numel()
	if cap(dst) < n {
		dst = make([]float32, n)
	}
	dst = dst[:n]
	if err := ToF32(t.DType, t.Data, dst); err != nil {
		panic(err) // Tensor only ever holds F32, F16 or BF16.
	}
	return dst
}

// Open opens the checkpoint of a Hugging Face model directory: shards listed
// in model.safetensors.index.json when that file exists, else
// model.safetensors. Every shard must exist and every tensor of the index
// must be in the shard the index names.
func Open(dir string) (*Set, error) {
	idx := filepath.Join(dir, IndexFile)
	if _, err := os.Stat(idx); err == nil {
		return openIndex(dir, idx)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	single := filepath.Join(dir, SingleFile)
	if _, err := os.Stat(single); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%s: no %s or %s in the model directory", dir, SingleFile, IndexFile)
		}
		return nil, err
	}
	return OpenFile(single)
}

// OpenFile opens a single safetensors file as a Set.
func OpenFile(path string) (*Set, error) {
	f, err := openFile(path)
	if err != nil {
		return nil, err
	}
	s := &Set{Dir: filepath.Dir(path), Source: path, Files: []*File{f}, where: make(map[string]*File, len(f.Header.Tensors))}
	for name := range f.Header.Tensors {
		s.where[name] = f
	}
	return s, nil
}

// index is model.safetensors.index.json.
type index struct {
	Metadata  map[string]any    `json:"metadata"`
	WeightMap map[string]string `json:"weight_map"`
}

func openIndex(dir, idxPath string) (*Set, error) {
	raw, err := os.ReadFile(idxPath)
	if err != nil {
		return nil, err
	}
	var idx index
	if err := json.Unmarshal(raw, &idx); err != nil {
		return nil, fmt.Errorf("%s: not a valid index: %v", idxPath, err)
	}
	if len(idx.WeightMap) == 0 {
		return nil, fmt.Errorf("%s: weight_map is missing or empty", idxPath)
	}
	shards := map[string][]string{} // file → tensor names
	for name, file := range idx.WeightMap {
		if file == "" || file == "." || file == ".." || filepath.Base(file) != file {
			return nil, fmt.Errorf("%s: tensor %q maps to %q, which is not a file name in the model directory", idxPath, name, file)
		}
		shards[file] = append(shards[file], name)
	}
	files := make([]string, 0, len(shards))
	for f := range shards {
		files = append(files, f)
	}
	sort.Strings(files)
	for _, f := range files {
		p := filepath.Join(dir, f)
		if _, err := os.Stat(p); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("%s: shard %s is missing (%s does not exist)", idxPath, f, p)
			}
			return nil, err
		}
	}

	s := &Set{Dir: dir, Source: idxPath, where: make(map[string]*File, len(idx.WeightMap))}
	for _, name := range files {
		f, err := openFile(filepath.Join(dir, name))
		if err != nil {
			s.Close()
			return nil, err
		}
		s.Files = append(s.Files, f)
		names := shards[name]
		sort.Strings(names)
		for _, t := range names {
			if _, ok := f.Header.Tensors[t]; !ok {
				s.Close()
				return nil, fmt.Errorf("%s: tensor %q is listed in %s but is not in the shard", f.Path, t, IndexFile)
			}
			s.where[t] = f
		}
	}
	return s, nil
}

func openFile(path string) (*File, error) {
	data, unmap, err := mmapfile.Open(path)
	if err != nil {
		return nil, err
	}
	size := int64(len(data))
	if size < 8 {
		unmap()
		return nil, fmt.Errorf("%s: file is %d bytes, too short for the 8-byte header length (truncated?)", path, size)
	}
	h, err := ParseHeader(data, size)
	if err != nil {
		unmap()
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	return &File{Path: path, Header: h, size: size, data: data, unmap: unmap}, nil
}

// Close unmaps every file. Tensor data handed out before become invalid.
// Close is idempotent.
func (s *Set) Close() error {
	if s.closed {
		return nil
	}
	s.closed = true
	var first error
	for _, f := range s.Files {
		if err := f.unmap(); err != nil && first == nil {
			first = fmt.Errorf("%s: unmap: %v", f.Path, err)
		}
		f.data = nil
	}
	return first
}

// Release tells the kernel that the process will not read b, tensor data
// from one of s's files, again soon (mmapfile.Release): a loader calls it
// for a tensor its backend copied.
func (s *Set) Release(b []byte) {
	if s.closed {
		return
	}
	for _, f := range s.Files {
		mmapfile.Release(f.data, b)
	}
}

// Names returns every tensor name, sorted.
func (s *Set) Names() []string {
	names := make([]string, 0, len(s.where))
	for n := range s.where {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Info returns the header entry of a tensor (any dtype) and the path of its
// file.
func (s *Set) Info(name string) (Info, string, bool) {
	f, ok := s.where[name]
	if !ok {
		return Info{}, "", false
	}
	return f.Header.Tensors[name], f.Path, true
}

// Metadata returns the __metadata__ of the set's files merged (a later file
// in path order wins on a conflicting key).
func (s *Set) Metadata() map[string]string {
	m := map[string]string{}
	for _, f := range s.Files {
		for k, v := range f.Header.Metadata {
			m[k] = v
		}
	}
	return m
}

// Tensor returns a tensor by name. It fails if the tensor is missing or its
// dtype is not F32, F16 or BF16.
func (s *Set) Tensor(name string) (Tensor, error) {
	if s.closed {
		return Tensor{}, fmt.Errorf("%s: tensor %q requested after Close", s.Source, name)
	}
	f, ok := s.where[name]
	if !ok {
		return Tensor{}, fmt.Errorf("%s: tensor %q not found", s.Source, name)
	}
	in := f.Header.Tensors[name]
	var dt backend.DType
	switch in.DType {
	case F32:
		dt = backend.F32
	case F16:
		dt = backend.F16
	case BF16:
		dt = backend.BF16
	default:
		return Tensor{}, fmt.Errorf("%s: tensor %q has dtype %s; only F32, F16 and BF16 are supported", f.Path, name, in.DType)
	}
	return Tensor{Name: name, File: f.Path, DType: dt, Shape: append([]int(nil), in.Shape...), Data: f.bytes(in)}, nil
}

// Matrix returns the tensor name after checking that its shape is exactly
// [rows, cols]. When rows is 1 (a norm weight or bias) the shape [cols] is
// accepted as well.
func (s *Set) Matrix(name string, rows, cols int) (Tensor, error) {
	t, err := s.Tensor(name)
	if err != nil {
		return Tensor{}, err
	}
	sh := t.Shape
	if len(sh) == 2 && sh[0] == rows && sh[1] == cols {
		return t, nil
	}
	if rows == 1 && len(sh) == 1 && sh[0] == cols {
		return t, nil
	}
	want := fmt.Sprint([]int{rows, cols})
	if rows == 1 {
		want = fmt.Sprint([]int{cols})
	}
	return Tensor{}, fmt.Errorf("tensor %q in %s has shape %v, config.json implies %s", name, t.File, sh, want)
}
