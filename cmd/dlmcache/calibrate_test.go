package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/dlmcache/dlmcache/datasets"
	"github.com/dlmcache/dlmcache/engine"
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

// calibrateTo runs calibrate with args and --out out, and reads the table
// it wrote; what names the run in a failure.
func calibrateTo(t *testing.T, what string, args []string, out string) *lut.Table {
	t.Helper()
	if _, errOut, code := run(t, append(slices.Clone(args), "--out", out)...); code != 0 {
		t.Fatalf("%s: exit %d: %s", what, code, errOut)
	}
	tab, err := lut.Read(filepath.Join(out, "table.json"))
	if err != nil {
		t.Fatal(err)
	}
	return tab
}

// N calibrate shards run as separate processes, as
// deploy/k8s/calibrate-job.yaml runs them, merge into the table of one run.
func TestCalibrateShardProcessesMergeToOneRunsTable(t *testing.T) {
	dir := t.TempDir()
	common := []string{"calibrate", "--mode", "depth", "--model", serveFixture, "--ratios", "0.2,0.5,0.8,1", "--per-ratio", "3", "--quiet",
		"--user-prompts", "100", "--system-prompts", "builtin:assistant,builtin:coder", "--refresh", "2", "--agreement", "0.5"}
	a := calibrateTo(t, "one run", common, filepath.Join(dir, "one"))
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
	b := calibrateTo(t, "merge", append(common, "--merge", strings.Join(shards, ",")), merged)
	if !reflect.DeepEqual(a.Bins, b.Bins) || a.Calibration == nil {
		t.Errorf("merged bins %+v\none run's %+v", b.Bins, a.Bins)
	}
	if out, _, code := run(t, "lut", "show", filepath.Join(merged, "table.json")); code != 0 || !strings.Contains(out, "calibrated (bicache, R=2)") {
		t.Errorf("lut show: exit %d:\n%s", code, out)
	}
	// Bad flags are refused before any work.
	if _, errOut, code := run(t, "calibrate", "--mode", "depth", "--model", serveFixture, "--gate", "vibes"); code == 0 || !strings.Contains(errOut, "--gate") {
		t.Errorf("--gate vibes: exit %d %s", code, errOut)
	}
}

// The method search writes a table that chooses; --resume replays the log
// to the identical choices, and shards merge into a table with the same
// bins, classes and agreement counts as one run.
func TestCalibrateMethodsResumesAndMerges(t *testing.T) {
	dir := t.TempDir()
	common := []string{"calibrate", "--model", serveFixture, "--ratios", "0.6,0.75,0.9", "--per-ratio", "2", "--quiet",
		"--setting", "none@threshold:0.9", "--setting", "bicache@schedule depth=1 source=store", "--agreement", "0.3", "--max-loss", "100"}
	one := filepath.Join(dir, "one")
	a := calibrateTo(t, "one run", common, one)
	if !a.Chooses() || !a.Calibrated() || a.Format != lut.Format {
		t.Fatalf("the search wrote no choices: %+v", a)
	}
	if b := calibrateTo(t, "resume", append(common, "--resume"), one); !reflect.DeepEqual(a.Bins, b.Bins) {
		t.Errorf("resumed bins differ:\n%+v\n%+v", b.Bins, a.Bins)
	}
	var shards []string
	for k := range 2 {
		out := filepath.Join(dir, fmt.Sprintf("shard-%d", k))
		shards = append(shards, out)
		if _, errOut, code := run(t, append(common, "--shard", fmt.Sprintf("%d/2", k), "--out", out)...); code != 0 {
			t.Fatalf("shard %d: exit %d: %s", k, code, errOut)
		}
	}
	c := calibrateTo(t, "merge", append(common, "--merge", strings.Join(shards, ",")), filepath.Join(dir, "merged"))
	if len(c.Bins) != len(a.Bins) || !reflect.DeepEqual(c.Classes, a.Classes) {
		t.Fatalf("merged table: %+v", c)
	}
	for i := range a.Bins {
		if len(a.Bins[i].Choices) != len(c.Bins[i].Choices) {
			t.Errorf("bin %d: %d choices in one run, %d merged", i, len(a.Bins[i].Choices), len(c.Bins[i].Choices))
			continue
		}
		for j, ch := range a.Bins[i].Choices {
			if m := c.Bins[i].Choices[j]; m.Class != ch.Class || m.Samples != ch.Samples {
				t.Errorf("bin %d: one run %+v, merged %+v", i, ch, m)
			}
		}
	}
	if out, _, code := run(t, "lut", "show", filepath.Join(one, "table.json")); code != 0 || !strings.Contains(out, "chosen per bin and answer-length class") {
		t.Errorf("lut show: exit %d:\n%s", code, out)
	}
	if _, errOut, code := run(t, "calibrate", "--model", serveFixture, "--setting", "bicache depth=x"); code == 0 || !strings.Contains(errOut, "depth") {
		t.Errorf("a bad setting: exit %d %s", code, errOut)
	}
}

// Calibration's External requests come a system message at a time, its
// questions consecutive, so a bin's requests share system messages (the
// store is timed with hits) as served traffic does; they come first, so a
// bin their ratios reach is filled with system messages the suites'
// generators never produce, every suite among them (span copies and
// arithmetic included).
func TestSampleSuitesKeepsExternalGroupsTogether(t *testing.T) {
	f := &factory{Out: io.Discard, ErrOut: io.Discard}
	lm, err := engine.LoadModel(serveFixture, "cpu", 1)
	if err != nil {
		t.Fatal(err)
	}
	defer lm.Close()
	s := requestSampling{Data: []string{"suites", "external"}, PerRatio: 60, Seed: 1}
	reqs, _, err := s.sampleSuites(f, lm, 256, []float64{0, 1}, 0, 1) // 256 slots: the fixture tokenizer's span answers fit
	if err != nil {
		t.Fatal(err)
	}
	groups := 0
	suites := map[string]int{}
	for i, r := range reqs {
		suites[r.Suite]++
		if !strings.HasPrefix(r.ID, "external/") {
			t.Errorf("request %d, %s: a generator's system message where External's fill the bin", i, r.ID)
		}
		var g, q int
		if _, err := fmt.Sscanf(r.ID, "external/%d/%d", &g, &q); err != nil {
			continue
		}
		if q == 0 {
			groups++
			continue
		}
		if i == 0 || !strings.HasPrefix(reqs[i-1].ID, fmt.Sprintf("external/%d/", g)) {
			t.Errorf("request %d, %s, does not follow its system message's previous question", i, r.ID)
		} else if !slices.Equal(r.Prompt[:r.PrefixLen], reqs[i-1].Prompt[:reqs[i-1].PrefixLen]) {
			t.Errorf("request %d does not share %s's system message", i, reqs[i-1].ID)
		}
	}
	for _, suite := range datasets.Suites() {
		if suites[suite] == 0 {
			t.Errorf("no %s request among %d: %v", suite, len(reqs), suites)
		}
	}
	if groups < 2 || len(reqs) != 60 {
		t.Errorf("%d requests, %d external system messages", len(reqs), groups)
	}
}
