// Package testckpt writes checkpoints that tests of several packages derive
// from a fixture.
package testckpt

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dlmcache/dlmcache/model/safetensors"
)

// WriteBF16Copy writes the checkpoint in dir with every tensor rounded to
// BF16 (to nearest even) into a new directory, the other files copied.
func WriteBF16Copy(t *testing.T, dir string) string {
	t.Helper()
	out := t.TempDir()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.IsDir() || strings.HasSuffix(e.Name(), ".safetensors") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(out, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	set, err := safetensors.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	var ts []safetensors.WriteTensor
	for _, name := range set.Names() {
		x, err := set.Tensor(name)
		if err != nil {
			t.Fatal(err)
		}
		info, _, _ := set.Info(name)
		ts = append(ts, safetensors.WriteTensor{Name: name, DType: safetensors.BF16, Shape: info.Shape, Data: safetensors.F32ToBF16(x.Float32(nil))})
	}
	if err := safetensors.Write(filepath.Join(out, "model.safetensors"), ts, nil); err != nil {
		t.Fatal(err)
	}
	return out
}
