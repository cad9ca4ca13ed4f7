package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The command reference in docs/cli/ is what gen-docs writes from the
// command tree: a flag or command added, removed or reworded without
// `make docs` fails here.
func TestCLIReferenceIsCurrent(t *testing.T) {
	dir := t.TempDir()
	var out, errOut bytes.Buffer
	if code := execute(context.Background(), []string{"gen-docs", "--dir", dir}, strings.NewReader(""), &out, &errOut); code != 0 {
		t.Fatalf("gen-docs: exit %d: %s", code, errOut.String())
	}
	want, err := filepath.Glob(filepath.Join(dir, "*.md"))
	if err != nil || len(want) == 0 {
		t.Fatalf("gen-docs wrote no pages (%v)", err)
	}
	committed := filepath.Join("..", "..", "docs", "cli")
	have, _ := filepath.Glob(filepath.Join(committed, "*.md"))
	stale := false
	seen := map[string]bool{}
	for _, p := range want {
		name := filepath.Base(p)
		seen[name] = true
		gen, _ := os.ReadFile(p)
		cur, err := os.ReadFile(filepath.Join(committed, name))
		switch {
		case err != nil:
			t.Errorf("docs/cli/%s is missing", name)
			stale = true
		case !bytes.Equal(gen, cur):
			t.Errorf("docs/cli/%s differs from the command tree", name)
			stale = true
		}
	}
	for _, p := range have {
		if !seen[filepath.Base(p)] {
			t.Errorf("docs/cli/%s documents a command that no longer exists", filepath.Base(p))
			stale = true
		}
	}
	if stale {
		t.Log("regenerate the reference with `make docs` (go run ./cmd/dlmcache gen-docs --dir docs/cli) and commit docs/cli/")
	}
}

// gen-docs removes the page of a command that no longer exists and leaves
// other files alone.
func TestGenDocsRemovesPagesOfGoneCommands(t *testing.T) {
	dir := t.TempDir()
	gone := filepath.Join(dir, "dlmcache_gone.md")
	keep := filepath.Join(dir, "README.txt")
	os.WriteFile(gone, []byte("old"), 0o644)
	os.WriteFile(keep, []byte("keep"), 0o644)
	if _, errOut, code := run(t, "gen-docs", "--dir", dir); code != 0 {
		t.Fatalf("gen-docs: exit %d: %s", code, errOut)
	}
	if _, err := os.Stat(gone); !os.IsNotExist(err) {
		t.Errorf("the page of a gone command survived (%v)", err)
	}
	if _, err := os.Stat(keep); err != nil {
		t.Errorf("a non-page file was removed: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "dlmcache_lut_build.md")); err != nil {
		t.Errorf("no page for lut build: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "dlmcache_gen-docs.md")); !os.IsNotExist(err) {
		t.Errorf("the hidden gen-docs command got a page")
	}
}
