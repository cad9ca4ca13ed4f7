package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/dlmcache/dlmcache/lut"
)

// TestMain lets a test run this binary as dlmcache itself (DLMCACHE_MAIN=1),
// so that shard processes are real processes.
func TestMain(m *testing.M) {
	if os.Getenv("DLMCACHE_MAIN") == "1" {
		os.Exit(execute(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// TestCalibrateShardProcesses runs N calibrate shards as separate processes,
// as deploy/k8s/calibrate-job.yaml does, merges them, and gets the table of
// one run.
func TestCalibrateShardProcesses(t *testing.T) {
	dir := t.TempDir()
	common := []string{"calibrate", "--model", serveFixture, "--ratios", "0.2,0.5,0.8,1", "--per-ratio", "3", "--quiet",
		"--user-prompts", "100", "--system-prompts", "builtin:assistant,builtin:coder", "--refresh", "2", "--agreement", "0.5"}
	one := filepath.Join(dir, "one")
	if _, errOut, code := run(t, append(common, "--out", one)...); code != 0 {
		t.Fatalf("one run: exit %d: %s", code, errOut)
	}
	const n = 3
	var shards []string
	procs := make([]*exec.Cmd, n)
	for k := range n {
		out := filepath.Join(dir, fmt.Sprintf("shard-%d", k))
		shards = append(shards, out)
		procs[k] = exec.Command(os.Args[0], append(common, "--shard", fmt.Sprintf("%d/%d", k, n), "--out", out)...)
		procs[k].Env = append(os.Environ(), "DLMCACHE_MAIN=1")
		if err := procs[k].Start(); err != nil {
			t.Fatal(err)
		}
	}
	for k, p := range procs {
		if err := p.Wait(); err != nil {
			t.Fatalf("shard %d: %v", k, err)
		}
	}
	merged := filepath.Join(dir, "merged")
	if _, errOut, code := run(t, append(common, "--merge", strings.Join(shards, ","), "--out", merged)...); code != 0 {
		t.Fatalf("merge: exit %d: %s", code, errOut)
	}
	a, err := lut.Read(filepath.Join(one, "table.json"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := lut.Read(filepath.Join(merged, "table.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a.Bins, b.Bins) || a.Calibration == nil {
		t.Errorf("merged bins %+v\none run's %+v", b.Bins, a.Bins)
	}
	if out, _, code := run(t, "lut", "show", filepath.Join(merged, "table.json")); code != 0 || !strings.Contains(out, "calibrated (bicache, R=2)") {
		t.Errorf("lut show: exit %d:\n%s", code, out)
	}
	// Bad flags are refused before any work.
	if _, errOut, code := run(t, "calibrate", "--model", serveFixture, "--gate", "vibes"); code == 0 || !strings.Contains(errOut, "--gate") {
		t.Errorf("--gate vibes: exit %d %s", code, errOut)
	}
}
