package load

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dlmcache/dlmcache/internal/testutil"
	"github.com/dlmcache/dlmcache/model/cpu"
)

// copyFixture copies testdata/name into a temp dir that a test may damage.
func copyFixture(t *testing.T, name string) string {
	t.Helper()
	src := filepath.Join(testdata, name)
	dst := t.TempDir()
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

func editConfig(t *testing.T, dir string, edit func(map[string]any)) {
	t.Helper()
	p := filepath.Join(dir, "config.json")
	var m map[string]any
	testutil.ReadJSON(t, p, &m)
	edit(m)
	raw, _ := json.Marshal(m)
	if err := os.WriteFile(p, raw, 0o644); err != nil {
		t.Fatal(err)
	}
}

// setConfig returns a change to a model directory that sets its
// config.json's key to v.
func setConfig(key string, v any) func(t *testing.T, dir string) {
	return func(t *testing.T, dir string) {
		editConfig(t, dir, func(m map[string]any) { m[key] = v })
	}
}

func TestLoadBadInput(t *testing.T) {
	for _, tc := range []struct {
		name   string
		break_ func(t *testing.T, dir string)
		want   []string // substrings of the error
	}{
		{"more layers than the checkpoint", setConfig("n_layers", 4.0), []string{"blocks.3"}},
		{"a layer count no checkpoint of this size holds", setConfig("n_layers", 1e9), []string{"config.json", "n_layers 1000000000", "tensors"}},
		{"fewer layers than the checkpoint", setConfig("n_layers", 2.0), []string{"blocks.2", "n_layers 2"}},
		{"config/tensor shape disagreement", setConfig("mlp_hidden_size", 128.0), []string{"model.safetensors", "ff_proj", "shape"}},
		{"zero heads", setConfig("n_heads", 0.0), []string{"config.json", "n_heads"}},
		{"config not JSON", func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, "config.json"), []byte("{d_model: 3"), 0o644)
		}, []string{"config.json", "JSON"}},
		{"truncated safetensors", func(t *testing.T, dir string) {
			p := filepath.Join(dir, "model.safetensors")
			b, _ := os.ReadFile(p)
			os.WriteFile(p, b[:len(b)/2], 0o644)
		}, []string{"model.safetensors"}},
		{"missing safetensors", func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, "model.safetensors"))
		}, []string{"model.safetensors"}},
		{"tokenizer with an unknown model type", func(t *testing.T, dir string) {
			p := filepath.Join(dir, "tokenizer.json")
			b, _ := os.ReadFile(p)
			os.WriteFile(p, []byte(strings.Replace(string(b), `"BPE"`, `"Unigram"`, 1)), 0o644)
		}, []string{"tokenizer.json", "Unigram"}},
		{"missing tokenizer", func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, "tokenizer.json"))
		}, []string{"tokenizer.json"}},
		{"bad card", func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, CardFile), []byte(`{"gen_length": 8, "stpes": 4}`), 0o644)
		}, []string{CardFile, "stpes"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := copyFixture(t, "tiny-f32")
			tc.break_(t, dir)
			m, err := Load(dir, cpu.New(1))
			if err == nil {
				m.Close()
			}
			testutil.ErrorSays(t, err, tc.want...)
		})
	}
}

func TestLoadFingerprint(t *testing.T) {
	a, err := Load(filepath.Join(testdata, "tiny-f32"), cpu.New(1))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := Load(filepath.Join(testdata, "tiny-bf16"), cpu.New(1))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if a.Fingerprint == "" || a.Fingerprint == b.Fingerprint {
		t.Errorf("fingerprints %q and %q: want distinct, non-empty", a.Fingerprint, b.Fingerprint)
	}
	if a.Card != DefaultCard {
		t.Errorf("card without dlmcache.json: %+v, want the default", a.Card)
	}
}

// The card's refresh period: read, validated, and what --refresh 0 means.
func TestCardRefresh(t *testing.T) {
	for _, tc := range []struct {
		card       string
		flag, want int
		err        string
	}{
		{`{"gen_length": 128, "steps": 64, "refresh": 2}`, 0, 2, ""},
		{`{"gen_length": 128, "steps": 64, "refresh": 2}`, 8, 8, ""},
		{`{"gen_length": 128, "steps": 64}`, 0, DefaultRefresh, ""},
		{`{"gen_length": 128, "steps": 64, "refresh": -1}`, 0, 0, "refresh must be positive"},
	} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, CardFile), []byte(tc.card), 0o644); err != nil {
			t.Fatal(err)
		}
		c, err := readCard(dir)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: error %v, want %q", tc.card, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tc.card, err)
		}
		if got := c.RefreshOr(tc.flag); got != tc.want {
			t.Errorf("%s, --refresh %d: R %d, want %d", tc.card, tc.flag, got, tc.want)
		}
	}
}
