package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dlmcache/dlmcache/lut"
	"github.com/dlmcache/dlmcache/profile"
)

// TestCommandsSayWhichArchitectureLoaded: generate prints the loaded
// model's architecture and records it in its JSON; profile (every command
// through loadRegime) prints it and keeps it in the table it writes.
func TestCommandsSayWhichArchitectureLoaded(t *testing.T) {
	const dream, moe = "../../model/testdata/tiny-dream", "../../model/testdata/tiny-llada-moe"
	if _, errOut, code := run(t, "generate", "--model", dream); code != 0 || !strings.Contains(errOut, "architecture dream,") {
		t.Errorf("generate: exit %d, stderr does not name the architecture:\n%s", code, errOut)
	}
	out, errOut, code := run(t, "generate", "--model", dream, "--json")
	var js struct{ Arch string }
	if err := json.Unmarshal([]byte(out), &js); code != 0 || err != nil || js.Arch != "dream" {
		t.Errorf("generate --json: exit %d, arch %q (%v): %s", code, js.Arch, err, errOut)
	}
	prof := filepath.Join(t.TempDir(), "prof")
	_, errOut, code = run(t, "profile", "--model", moe, "--ratios", "0.3:0.9:0.3", "--per-ratio", "1", "--quiet", "--out", prof,
		"--user-prompts", "50", "--system-prompts", "builtin:assistant,builtin:coder")
	if code != 0 || !strings.Contains(errOut, "architecture llada-moe, 2 layers") || !strings.Contains(errOut, "8 experts (top 2)") {
		t.Fatalf("profile: exit %d, stderr does not describe the model:\n%s", code, errOut)
	}
	tab, err := lut.Read(filepath.Join(prof, profile.TableFile))
	if err != nil {
		t.Fatal(err)
	}
	if tab.Model.Arch != "llada-moe" || !strings.Contains(tab.String(), "(llada-moe, 2 layers") {
		t.Errorf("the table records architecture %q:\n%s", tab.Model.Arch, tab)
	}
}
