package atomicfile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "x.json")
	if err := WriteFile(p, []byte("one"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(p, []byte("two"), 0o644); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	st, _ := os.Stat(p)
	if string(b) != "two" || st.Mode().Perm() != 0o644 {
		t.Errorf("content %q mode %v", b, st.Mode())
	}
	// A directory that does not exist: an error, nothing written.
	if err := WriteFile(filepath.Join(dir, "no", "x"), []byte("x"), 0o644); err == nil {
		t.Error("missing directory: no error")
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Errorf("temporary files left: %v", ents)
	}
}

func TestWriteStreamsAndCleansUp(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "x.bin")
	if err := Write(p, 0o644, func(w io.Writer) error {
		_, err := io.WriteString(w, "streamed")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); string(b) != "streamed" {
		t.Errorf("content %q", b)
	}
	// A failing writer leaves the old content and no temporary file.
	boom := errors.New("boom")
	if err := Write(p, 0o644, func(w io.Writer) error {
		io.WriteString(w, "partial")
		return boom
	}); !errors.Is(err, boom) {
		t.Errorf("error %v, want boom", err)
	}
	if b, _ := os.ReadFile(p); string(b) != "streamed" {
		t.Errorf("after a failed write: %q", b)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("temporary files left: %v", ents)
	}
}

// The umask applies as os.WriteFile applies it.
func TestWriteFileAppliesUmaskLikeOSWriteFile(t *testing.T) {
	dir := t.TempDir()
	ref := filepath.Join(dir, "ref")
	if err := os.WriteFile(ref, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "x")
	if err := WriteFile(p, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	a, _ := os.Stat(ref)
	b, _ := os.Stat(p)
	if a.Mode().Perm() != b.Mode().Perm() {
		t.Errorf("mode %v, os.WriteFile gives %v", b.Mode().Perm(), a.Mode().Perm())
	}
}
