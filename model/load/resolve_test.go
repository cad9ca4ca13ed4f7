package load

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// mkModel creates dir (and parents) holding a config.json.
func mkModel(t *testing.T, dir string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{}`), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// mkSnapshot creates hub/models--<repo>/snapshots/<rev> modified at mod,
// with config.json when withConfig. The config is a symlink into blobs, as
// the Hugging Face cache lays it out.
func mkSnapshot(t *testing.T, hub, repo, rev string, mod time.Time, withConfig bool) string {
	t.Helper()
	entry := filepath.Join(hub, "models--"+repo)
	snap := filepath.Join(entry, "snapshots", rev)
	if err := os.MkdirAll(snap, 0o755); err != nil {
		t.Fatal(err)
	}
	if withConfig {
		blobs := filepath.Join(entry, "blobs")
		if err := os.MkdirAll(blobs, 0o755); err != nil {
			t.Fatal(err)
		}
		blob := filepath.Join(blobs, "cfg-"+rev)
		if err := os.WriteFile(blob, []byte(`{}`), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join("..", "..", "blobs", "cfg-"+rev), filepath.Join(snap, "config.json")); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chtimes(snap, mod, mod); err != nil {
		t.Fatal(err)
	}
	return snap
}

// isolate points every lookup location into a fresh temp dir and returns
// (models root, hub).
func isolate(t *testing.T) (string, string) {
	t.Helper()
	base := t.TempDir()
	t.Setenv("HOME", filepath.Join(base, "home"))
	t.Setenv("XDG_CACHE_HOME", "")
	t.Setenv("HF_HUB_CACHE", "")
	t.Setenv("HUGGINGFACE_HUB_CACHE", "")
	t.Setenv("HF_HOME", filepath.Join(base, "hf"))
	t.Setenv("DLMCACHE_MODELS", "")
	return filepath.Join(base, "models"), filepath.Join(base, "hf", "hub")
}

// resolveCase is one lookup Resolve must find: setup lays out the models
// root and the hub and returns the argument and the path it resolves to.
type resolveCase struct {
	name  string
	setup func(t *testing.T, models, hub string) (arg, want string)
}

// resolvePathCases are the lookups by path and in $DLMCACHE_MODELS.
func resolvePathCases(t0 time.Time) []resolveCase {
	return []resolveCase{
		{"directory", func(t *testing.T, models, hub string) (string, string) {
			d := mkModel(t, filepath.Join(models, "x"))
			return d, d
		}},
		{"relative directory", func(t *testing.T, models, hub string) (string, string) {
			d := mkModel(t, filepath.Join(models, "rel"))
			t.Chdir(models)
			return "rel", d
		}},
		{"cache entry given as a directory", func(t *testing.T, models, hub string) (string, string) {
			s := mkSnapshot(t, hub, "org--m", "abc", t0, true)
			return filepath.Join(hub, "models--org--m"), s
		}},
		{"DLMCACHE_MODELS", func(t *testing.T, models, hub string) (string, string) {
			other := filepath.Join(filepath.Dir(models), "other")
			d := mkModel(t, filepath.Join(models, "tiny"))
			t.Setenv("DLMCACHE_MODELS", other+":"+models)
			return "tiny", d
		}},
		{"DLMCACHE_MODELS first root wins", func(t *testing.T, models, hub string) (string, string) {
			other := filepath.Join(filepath.Dir(models), "other")
			first := mkModel(t, filepath.Join(other, "tiny"))
			mkModel(t, filepath.Join(models, "tiny"))
			t.Setenv("DLMCACHE_MODELS", other+"::"+models)
			return "tiny", first
		}},
		{"DLMCACHE_MODELS nested ORG/NAME", func(t *testing.T, models, hub string) (string, string) {
			d := mkModel(t, filepath.Join(models, "GSAI-ML", "LLaDA-8B-Instruct"))
			t.Setenv("DLMCACHE_MODELS", models)
			return "GSAI-ML/LLaDA-8B-Instruct", d
		}},
		{"DLMCACHE_MODELS substring", func(t *testing.T, models, hub string) (string, string) {
			d := mkModel(t, filepath.Join(models, "LLaDA-tiny"))
			mkModel(t, filepath.Join(models, "dream"))
			if err := os.MkdirAll(filepath.Join(models, "llada-empty"), 0o755); err != nil { // no config.json: not a candidate
				t.Fatal(err)
			}
			t.Setenv("DLMCACHE_MODELS", models)
			return "llada", d
		}},
	}
}

// hubRepos is a lookup of arg in a hub cache that holds one snapshot ("r1",
// made at t0) of the repository want, the one it finds, and of each other.
func hubRepos(t0 time.Time, arg, want string, others ...string) func(t *testing.T, models, hub string) (string, string) {
	return func(t *testing.T, models, hub string) (string, string) {
		s := mkSnapshot(t, hub, want, "r1", t0, true)
		for _, o := range others {
			mkSnapshot(t, hub, o, "r1", t0, true)
		}
		return arg, s
	}
}

// resolveHubCases are the lookups in the Hugging Face hub cache (and its
// precedence under $DLMCACHE_MODELS).
func resolveHubCases(t0 time.Time) []resolveCase {
	return []resolveCase{
		{"DLMCACHE_MODELS exact beats the cache", func(t *testing.T, models, hub string) (string, string) {
			d := mkModel(t, filepath.Join(models, "LLaDA-8B-Instruct"))
			mkSnapshot(t, hub, "GSAI-ML--LLaDA-8B-Instruct", "r1", t0, true)
			t.Setenv("DLMCACHE_MODELS", models)
			return "LLaDA-8B-Instruct", d
		}},
		{"cache exact name", hubRepos(t0, "LLaDA-8B-Instruct", "GSAI-ML--LLaDA-8B-Instruct")},
		{"cache repo id", hubRepos(t0, "GSAI-ML/LLaDA-8B-Instruct", "GSAI-ML--LLaDA-8B-Instruct", "other--LLaDA-8B-Instruct")},
		{"cache bare substring", func(t *testing.T, models, hub string) (string, string) {
			s := mkSnapshot(t, hub, "GSAI-ML--LLaDA-8B-Instruct", "r1", t0, true)
			mkSnapshot(t, hub, "Dream-org--Dream-v0-Instruct-7B", "r1", t0, true)
			if err := os.MkdirAll(filepath.Join(hub, "datasets--x--llada-data"), 0o755); err != nil {
				t.Fatal(err)
			}
			return "llada", s
		}},
		{"cache case-insensitive equality beats substring", hubRepos(t0, "llada", "someone--LLaDA", "GSAI-ML--LLaDA-8B-Instruct")},
		{"cache exact beats case-insensitive", hubRepos(t0, "llada", "a--llada", "b--LLaDA")},
		{"cache entry without org", hubRepos(t0, "gpt2", "gpt2")},
		{"newest snapshot", func(t *testing.T, models, hub string) (string, string) {
			mkSnapshot(t, hub, "GSAI-ML--LLaDA-8B-Instruct", "zzz-old", t0, true)
			s := mkSnapshot(t, hub, "GSAI-ML--LLaDA-8B-Instruct", "aaa-new", t0.Add(time.Hour), true)
			return "llada", s
		}},
		{"newest snapshot with config.json", func(t *testing.T, models, hub string) (string, string) {
			s := mkSnapshot(t, hub, "GSAI-ML--LLaDA-8B-Instruct", "old", t0, true)
			mkSnapshot(t, hub, "GSAI-ML--LLaDA-8B-Instruct", "new-partial", t0.Add(time.Hour), false)
			return "llada", s
		}},
		{"HF_HUB_CACHE overrides HF_HOME", func(t *testing.T, models, hub string) (string, string) {
			mkSnapshot(t, hub, "a--llada", "r1", t0, true)
			other := filepath.Join(filepath.Dir(models), "elsewhere")
			s := mkSnapshot(t, other, "b--llada", "r1", t0, true)
			t.Setenv("HF_HUB_CACHE", other)
			return "llada", s
		}},
		{"HF_HOME defaults to ~/.cache/huggingface", func(t *testing.T, models, hub string) (string, string) {
			t.Setenv("HF_HOME", "")
			home, _ := os.UserHomeDir()
			s := mkSnapshot(t, filepath.Join(home, ".cache", "huggingface", "hub"), "a--llada", "r1", t0, true)
			return "llada", s
		}},
		{"HF_HOME with a tilde", func(t *testing.T, models, hub string) (string, string) {
			home, _ := os.UserHomeDir()
			t.Setenv("HF_HOME", "~/hf")
			s := mkSnapshot(t, filepath.Join(home, "hf", "hub"), "a--llada", "r1", t0, true)
			return "llada", s
		}},
	}
}

func TestResolveFindsModelsByPathNameAndHubCache(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range append(resolvePathCases(t0), resolveHubCases(t0)...) {
		t.Run(tc.name, func(t *testing.T) {
			models, hub := isolate(t)
			arg, want := tc.setup(t, models, hub)
			got, err := Resolve(arg)
			if err != nil {
				t.Fatal(err)
			}
			wantAbs, _ := filepath.Abs(want)
			if got != wantAbs {
				t.Errorf("Resolve(%q) = %s, want %s", arg, got, wantAbs)
			}
		})
	}
}

func TestResolveErrors(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, models, hub string) string
		want  []string // $M is the models root, $H the hub
	}{
		{"empty", func(t *testing.T, models, hub string) string { return "" }, []string{"empty model name"}},
		{"nothing anywhere", func(t *testing.T, models, hub string) string { return "llada" },
			[]string{`"llada"`, "$DLMCACHE_MODELS is unset", "$H, which does not exist"}},
		{"not found says where it looked", func(t *testing.T, models, hub string) string {
			mkModel(t, filepath.Join(models, "dream"))
			mkSnapshot(t, hub, "Dream-org--Dream-v0", "r1", t0, true)
			t.Setenv("DLMCACHE_MODELS", models)
			return "llada"
		}, []string{`"llada"`, "$DLMCACHE_MODELS ($M)", "Hugging Face cache ($H)"}},
		{"directory without config.json", func(t *testing.T, models, hub string) string {
			if err := os.MkdirAll(filepath.Join(models, "empty"), 0o755); err != nil {
				t.Fatal(err)
			}
			return filepath.Join(models, "empty")
		}, []string{"$M/empty", "without config.json"}},
		{"missing path", func(t *testing.T, models, hub string) string { return filepath.Join(models, "nope") },
			[]string{"$M/nope", "no such model directory"}},
		{"missing relative path", func(t *testing.T, models, hub string) string { return "./nope" },
			[]string{"./nope", "no such model directory"}},
		{"ambiguous substring", func(t *testing.T, models, hub string) string {
			mkSnapshot(t, hub, "GSAI-ML--LLaDA-8B-Base", "r1", t0, true)
			mkSnapshot(t, hub, "GSAI-ML--LLaDA-8B-Instruct", "r1", t0, true)
			return "llada"
		}, []string{`"llada" is ambiguous`, "GSAI-ML/LLaDA-8B-Base", "GSAI-ML/LLaDA-8B-Instruct", "ORG/NAME"}},
		{"ambiguous across sources", func(t *testing.T, models, hub string) string {
			mkModel(t, filepath.Join(models, "llada-tiny"))
			mkSnapshot(t, hub, "GSAI-ML--LLaDA-8B-Instruct", "r1", t0, true)
			t.Setenv("DLMCACHE_MODELS", models)
			return "llada"
		}, []string{"ambiguous", "$M/llada-tiny", "GSAI-ML/LLaDA-8B-Instruct"}},
		{"ambiguous exact name in two orgs", func(t *testing.T, models, hub string) string {
			mkSnapshot(t, hub, "a--llada", "r1", t0, true)
			mkSnapshot(t, hub, "b--llada", "r1", t0, true)
			return "llada"
		}, []string{"ambiguous", "a/llada", "b/llada"}},
		{"incomplete download", func(t *testing.T, models, hub string) string {
			mkSnapshot(t, hub, "GSAI-ML--LLaDA-8B-Instruct", "r1", t0, false)
			return "llada"
		}, []string{"$H", "incomplete download", "$H/models--GSAI-ML--LLaDA-8B-Instruct"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			models, hub := isolate(t)
			arg := tc.setup(t, models, hub)
			got, err := Resolve(arg)
			if err == nil {
				t.Fatalf("Resolve(%q) = %s, want an error", arg, got)
			}
			for _, w := range tc.want {
				w = strings.NewReplacer("$M", models, "$H", hub).Replace(w)
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}
