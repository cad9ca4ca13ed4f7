package main

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestConvertedModelsGiveTheBundledAnswer converts the bundled model to GGUF (F32 and Q8_0) and
// back, and generates with each: the F32 file and the directory converted
// back give the bundled model's answer token for token.
func TestConvertedModelsGiveTheBundledAnswer(t *testing.T) {
	dir := t.TempDir()
	type gen struct {
		Answer string  `json:"answer"`
		IDs    []int32 `json:"answer_token_ids"`
	}
	generate := func(model string) gen {
		t.Helper()
		out, errOut, code := run(t, "generate", "--model", model, "--threads", "1", "--gen-length", "32", "--steps", "16", "--json")
		if code != 0 {
			t.Fatalf("generate --model %s: %s", model, errOut)
		}
		var g gen
		if err := json.Unmarshal([]byte(out), &g); err != nil || len(g.IDs) == 0 {
			t.Fatalf("%v: %s", err, out)
		}
		return g
	}
	want := generate("llada-tiny")
	f32 := filepath.Join(dir, "tiny.gguf")
	out, errOut, code := run(t, "convert", "llada-tiny", f32)
	if code != 0 || !strings.Contains(out, "F32 (auto") {
		t.Fatalf("convert: exit %d: %s %s", code, out, errOut)
	}
	if got := generate(f32); !slices.Equal(got.IDs, want.IDs) {
		t.Errorf("GGUF F32: %+v, safetensors %+v", got, want)
	}
	back := filepath.Join(dir, "back")
	if _, errOut, code := run(t, "convert", f32, back); code != 0 {
		t.Fatalf("convert back: %s", errOut)
	}
	if got := generate(back); !slices.Equal(got.IDs, want.IDs) {
		t.Errorf("converted back: %+v, safetensors %+v", got, want)
	}
	q8 := filepath.Join(dir, "tiny-q8_0.gguf")
	if out, errOut, code := run(t, "convert", "llada-tiny", q8, "--outtype", "q8_0"); code != 0 || !strings.Contains(out, "Q8_0") {
		t.Fatalf("convert q8_0: %s %s", out, errOut)
	}
	for _, bad := range [][]string{
		{"convert", "llada-tiny", filepath.Join(dir, "x.gguf"), "--outtype", "q4_k"},
		{"convert", q8, filepath.Join(dir, "q8back")},
		{"convert", f32, back},
		{"convert", f32, filepath.Join(dir, "y"), "--outtype", "f16"},
	} {
		if _, errOut, code := run(t, bad...); code == 0 || errOut == "" {
			t.Errorf("%v: exit %d, no error", bad, code)
		}
	}
}
