package cgocheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// preambleLines returns the non-blank lines of the cgo preamble of the Go
// source src (0 where it does not import "C").
func preambleLines(t *testing.T, name string, src any) int {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), name, src, parser.ImportsOnly|parser.ParseComments)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	n := 0
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.IMPORT {
			continue
		}
		for _, s := range g.Specs {
			is := s.(*ast.ImportSpec)
			if is.Path.Value != `"C"` {
				continue
			}
			doc := is.Doc
			if doc == nil {
				doc = g.Doc
			}
			if doc == nil {
				continue
			}
			for _, l := range strings.Split(doc.Text(), "\n") {
				if strings.TrimSpace(l) != "" {
					n++
				}
			}
		}
	}
	return n
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		up := filepath.Dir(dir)
		if up == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = up
	}
}

func TestNoGoFileHoldsMoreThan50LinesOfC(t *testing.T) {
	root := moduleRoot(t)
	files := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (strings.HasPrefix(name, ".") || name == "node_modules" || name == "vendor" || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		n := preambleLines(t, path, nil)
		if n > 0 {
			files++
		}
		if n > MaxPreambleLines {
			rel, _ := filepath.Rel(root, path)
			t.Errorf("%s: its cgo preamble holds %d lines of C (at most %d): move the C into a .c file beside it and declare what Go binds in a header", rel, n, MaxPreambleLines)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files == 0 {
		t.Fatal("no Go file imports \"C\": the walk missed the backends")
	}
}

// TestPreambleLinesCountsTheCommentAboveImportC: the counter sees a
// preamble in either place Go allows it and skips blank lines.
func TestPreambleLinesCountsTheCommentAboveImportC(t *testing.T) {
	long := "package p\n\n/*\n" + strings.Repeat("int f(void);\n\n", 51) + "*/\nimport \"C\"\n"
	if got := preambleLines(t, "long.go", long); got != 51 {
		t.Errorf("a 51-line preamble counted %d", got)
	}
	grouped := "package p\n\nimport (\n\t\"fmt\"\n\n\t// #include <stdio.h>\n\t// #include <stdlib.h>\n\t\"C\"\n)\n"
	if got := preambleLines(t, "grouped.go", grouped); got != 2 {
		t.Errorf("a 2-line preamble inside an import group counted %d", got)
	}
	if got := preambleLines(t, "none.go", "package p\n\n// a comment\nimport \"fmt\"\n"); got != 0 {
		t.Errorf("a file without import \"C\" counted %d", got)
	}
}
