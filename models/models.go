// Package models embeds the checkpoints that ship inside the dlmcache
// binary, so that every command has a real default model on any machine.
//
// Only the command imports this package: the weights are linked into the
// binary, and other packages should not pay for them. Embedded files are
// written once to a cache directory (the loader memory-maps files) named by
// a hash of their contents, atomically, so concurrent first runs are safe.
package models

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
)

// Default is the name of the model every command uses by default.
const Default = "llada-tiny"

//go:embed all:llada-tiny
var bundled embed.FS

// Names lists the bundled models.
func Names() []string {
	ents, _ := fs.ReadDir(bundled, ".")
	var r []string
	for _, e := range ents {
		if e.IsDir() {
			r = append(r, e.Name())
		}
	}
	sort.Strings(r)
	return r
}

// Dir returns a directory holding bundled model name, writing it under the
// user's cache directory on first use. ok is false when name is not bundled.
func Dir(name string) (dir string, ok bool, err error) {
	sub, err := fs.Sub(bundled, name)
	if err != nil {
		return "", false, nil
	}
	if _, err := fs.Stat(sub, "config.json"); err != nil {
		return "", false, nil
	}
	if _, err := fs.Stat(sub, "model.safetensors"); err != nil {
		return "", true, fmt.Errorf("bundled model %s has no weights in this build (train it: see tools/train)", name)
	}
	sum, err := digest(sub)
	if err != nil {
		return "", true, err
	}
	base, err := cacheRoot()
	if err != nil {
		return "", true, err
	}
	dir = filepath.Join(base, name+"-"+sum[:16])
	if _, err := os.Stat(filepath.Join(dir, ".complete")); err == nil {
		return dir, true, nil
	}
	if err := os.MkdirAll(base, 0o755); err != nil {
		return "", true, fmt.Errorf("bundled model %s: %w", name, err)
	}
	tmp, err := os.MkdirTemp(base, "."+name+"-*")
	if err != nil {
		return "", true, fmt.Errorf("bundled model %s: %w", name, err)
	}
	defer os.RemoveAll(tmp)
	err = fs.WalkDir(sub, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(sub, p)
		if err != nil {
			return err
		}
		dst := filepath.Join(tmp, p)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		return os.WriteFile(dst, b, 0o644)
	})
	if err == nil {
		err = os.WriteFile(filepath.Join(tmp, ".complete"), []byte(sum+"\n"), 0o644)
	}
	if err != nil {
		return "", true, fmt.Errorf("bundled model %s: writing to %s: %w", name, base, err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		// Another process may have won the race.
		if _, serr := os.Stat(filepath.Join(dir, ".complete")); serr == nil {
			return dir, true, nil
		}
		return "", true, fmt.Errorf("bundled model %s: %w", name, err)
	}
	return dir, true, nil
}

func digest(fsys fs.FS) (string, error) {
	h := sha256.New()
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", p, len(b))
		h.Write(b)
		return nil
	})
	return hex.EncodeToString(h.Sum(nil)), err
}

// cacheRoot is $DLMCACHE_CACHE, else the user cache dir, else the temp dir.
func cacheRoot() (string, error) {
	if d := os.Getenv("DLMCACHE_CACHE"); d != "" {
		return filepath.Join(d, "models"), nil
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "dlmcache", "models"), nil
	}
	return filepath.Join(os.TempDir(), "dlmcache-models"), nil
}
