package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The profiling workflow on the random-weights fixture: profile, resume,
// rebuild at another τ, show, diff, check, sweep n, plot.
func TestProfilingWorkflowRunsOnTheFixture(t *testing.T) {
	dir := t.TempDir()
	prof := filepath.Join(dir, "prof")
	common := []string{"--model", serveFixture, "--ratios", "0.5:0.9:0.2", "--per-ratio", "4", "--quiet", "--out", prof, "--user-prompts", "200", "--system-prompts", "builtin:assistant,builtin:coder"}
	out, errOut, code := run(t, append([]string{"profile"}, common...)...)
	if code != 0 {
		t.Fatalf("profile: exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "[0.50, 0.70)") || !strings.Contains(out, "[0.70, 0.90)") {
		t.Errorf("profile printed no table:\n%s", out)
	}
	for _, f := range []string{"similarity.parquet", "table-cosine.json", "table-cosine-row-min.json", "run.json"} {
		if _, err := os.Stat(filepath.Join(prof, f)); err != nil {
			t.Error(err)
		}
	}
	// A finished run resumes to the same table without recomputing.
	out2, errOut, code := run(t, append([]string{"profile", "--resume"}, common...)...)
	if code != 0 || out2 != out || !strings.Contains(errOut, "8 resumed") {
		t.Errorf("resume: exit %d, table changed %v, stderr %s", code, out2 != out, errOut)
	}
	sim, table := filepath.Join(prof, "similarity.parquet"), filepath.Join(prof, "table-cosine.json")
	t90 := filepath.Join(dir, "t90.json")
	if _, errOut, code := run(t, "lut", "build", "--from", sim, "--tau", "0.9", "--out", t90); code != 0 {
		t.Fatalf("lut build: %s", errOut)
	}
	if out, _, code := run(t, "lut", "diff", table, t90); code != 0 || !strings.Contains(out, "L1") {
		t.Errorf("lut diff: exit %d: %s", code, out)
	}
	if out, _, code := run(t, "lut", "show", t90); code != 0 || !strings.Contains(out, "τ=0.9") {
		t.Errorf("lut show: exit %d: %s", code, out)
	}
	if _, _, code := run(t, "lut", "check", table, "--model", serveFixture); code != 0 {
		t.Errorf("lut check on its own model: exit %d", code)
	}
	if _, errOut, code := run(t, "lut", "check", table, "--model", "../../model/testdata/tiny-f32"); code != 2 || !strings.Contains(errOut, "incompatible") {
		t.Errorf("lut check on another model: exit %d: %s", code, errOut)
	}
	if _, errOut, code := run(t, "lut", "build", "--from", sim, "--tau", "1.5"); code == 0 || !strings.Contains(errOut, "τ") {
		t.Errorf("τ 1.5: exit %d: %s", code, errOut)
	}
	png := filepath.Join(dir, "depth.png")
	if _, errOut, code := run(t, "plot", "depth", table, "-o", png); code != 0 {
		t.Errorf("plot depth: %s", errOut)
	}
	if st, err := os.Stat(png); err != nil || st.Size() == 0 {
		t.Errorf("depth.png: %v", err)
	}
	if _, errOut, code := run(t, "sweep", "n", "--from", sim, "--step", "1", "--out", dir); code != 0 {
		t.Errorf("sweep n: %s", errOut)
	}
	if _, errOut, code := run(t, "plot", "convergence", filepath.Join(dir, "convergence.json"), "-o", filepath.Join(dir, "c.svg")); code != 0 {
		t.Errorf("plot convergence: %s", errOut)
	}
	// The worst-row statistic, and the sweeps that evaluate the model (the
	// none baseline and each point take turns).
	rm := filepath.Join(dir, "rm.json")
	if out, errOut, code := run(t, "lut", "build", "--from", sim, "--similarity", "kv-row-min", "--out", rm); code != 0 || !strings.Contains(out, "(kv-row-min)") {
		t.Errorf("lut build --similarity kv-row-min: exit %d: %s%s", code, out, errOut)
	}
	if _, errOut, code := run(t, "lut", "build", "--from", sim, "--similarity", "median"); code == 0 || !strings.Contains(errOut, "median") {
		t.Errorf("--similarity median: exit %d: %s", code, errOut)
	}
	sw := []string{"--model", serveFixture, "--suite", "lookup", "--limit", "2", "--quiet", "--out", dir}
	out, errOut, code = run(t, append([]string{"sweep", "tau", "--from", sim, "--taus", "0.9,0.99", "--similarity", "kv-row-min", "--deep-source", "store"}, sw...)...)
	if code != 0 || !strings.Contains(out, "none ") || !strings.Contains(out, "τ=0.9 ") || !strings.Contains(out, "τ=0.99") || strings.Contains(errOut, "warning") {
		t.Errorf("sweep tau: exit %d:\n%s%s", code, out, errOut)
	}
	out, errOut, code = run(t, append([]string{"sweep", "refresh", "--lut", table, "--rs", "1,2", "--deep-source", "recompute", "--picture-requests", "1"}, sw...)...)
	if code != 0 || !strings.Contains(out, "R=1 ") || !strings.Contains(out, "R=2 ") || !strings.Contains(out, "FLOPs predict") || !strings.Contains(out, "worst row") || !strings.Contains(errOut, "warning: --deep-source recompute") {
		t.Errorf("sweep refresh: exit %d:\n%s%s", code, out, errOut)
	}
	out, errOut, code = run(t, append([]string{"sweep", "modules", "--depths", "0,2"}, sw...)...)
	if code != 0 || !strings.Contains(out, "whole request: accuracy") || !strings.Contains(out, "contiguous     2") || !strings.Contains(out, "gap            0") {
		t.Errorf("sweep modules: exit %d:\n%s%s", code, out, errOut)
	}
	if _, err := os.Stat(filepath.Join(dir, "sweep-modules.json")); err != nil {
		t.Error(err)
	}
	for _, bad := range [][]string{{"--depths", "99"}, {"--depths", "1.5"}, {"--refresh", "0"}} {
		if _, errOut, code := run(t, append(append([]string{"sweep", "modules"}, bad...), sw...)...); code == 0 || !strings.Contains(errOut, bad[0]) {
			t.Errorf("sweep modules %v: exit %d: %s", bad, code, errOut)
		}
	}
	for _, args := range [][]string{
		{"plot", "heatmap", sim, "--similarity", "kv-row-min", "-o", filepath.Join(dir, "h.svg")},
		{"plot", "refresh", filepath.Join(dir, "sweep-refresh.json"), "--similarity", "kv-row-min", "-o", filepath.Join(dir, "r.svg")},
		{"plot", "refresh", filepath.Join(dir, "sweep-refresh.json"), "-o", filepath.Join(dir, "r2.svg")},
	} {
		if _, errOut, code := run(t, args...); code != 0 {
			t.Errorf("%s: exit %d: %s", strings.Join(args, " "), code, errOut)
		}
	}
	oldPic := filepath.Join(dir, "old-refresh.json")
	os.WriteFile(oldPic, []byte(`{"param":"refresh","deep_layers":{"layers":[1,2],"cross_request":[1,0.9],"stale":[1,1],"refreshed":[1,1],"refresh":2}}`), 0o644)
	if _, errOut, code := run(t, "plot", "refresh", oldPic, "--similarity", "kv-row-min", "-o", filepath.Join(dir, "o.svg")); code == 0 || !strings.Contains(errOut, "no worst-row series") {
		t.Errorf("old picture, worst row: exit %d: %s", code, errOut)
	}
	// Bad input: a parquet that is not one, a bin spec that makes no sense.
	junk := filepath.Join(dir, "junk.parquet")
	os.WriteFile(junk, []byte("not parquet"), 0o644)
	if _, errOut, code := run(t, "lut", "build", "--from", junk); code == 0 || !strings.Contains(errOut, "junk.parquet") {
		t.Errorf("junk parquet: exit %d: %s", code, errOut)
	}
	if _, errOut, code := run(t, "profile", "--model", serveFixture, "--ratios", "0.9:0.1:0.1", "--out", filepath.Join(dir, "x")); code == 0 || !strings.Contains(errOut, "ratio") {
		t.Errorf("bad --ratios: exit %d: %s", code, errOut)
	}
}
