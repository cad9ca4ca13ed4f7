package main

import (
	"context"
	"encoding/json"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dlmcache/dlmcache/internal/testutil"
	"github.com/dlmcache/dlmcache/lut"
	"github.com/dlmcache/dlmcache/profile"
)

// blockFixture is the block-causal random-weight fixture (blocks of 8).
const blockFixture = "../../model/testdata/tiny-block"

// profile on a block-causal model: the prefixes measured at their full
// blocks have cosine 1 at every layer, so every filled bin's depth is the
// model's layer count.
func TestProfileOfABlockCausalModelReusesEveryLayer(t *testing.T) {
	model := blockFixture
	prof := filepath.Join(t.TempDir(), "prof")
	out, errOut, code := run(t, "profile", "--model", model, "--ratios", "0.5:0.9:0.2", "--per-ratio", "4", "--quiet", "--out", prof,
		"--user-prompts", "200", "--system-prompts", "builtin:assistant,builtin:coder", "--gen-length", "16", "--steps", "16", "--block-length", "8")
	if code != 0 {
		t.Fatalf("profile: exit %d: %s", code, errOut)
	}
	if !strings.Contains(errOut, "measured at its full blocks") {
		t.Errorf("profile does not say how it measured a block-causal model's prefixes:\n%s", errOut)
	}
	for _, f := range []string{profile.TableFile, profile.CrossTableFile} {
		tab, err := lut.Read(filepath.Join(prof, f))
		if err != nil {
			t.Fatal(err)
		}
		L, filled := tab.Model.NLayers, 0
		for _, b := range tab.Bins {
			if b.Count == 0 {
				continue
			}
			filled++
			if d := b.Depth(lut.Mean, L); d != L || b.Min != L {
				t.Errorf("%s: bin [%.2f, %.2f): depth %d (min %d), want every layer (%d)", f, b.Lo, b.Hi, d, b.Min, L)
			}
		}
		if filled == 0 {
			t.Errorf("%s: no bin filled:\n%s", f, out)
		}
	}
}

// bench --compare-model: the block-causal model with and without the exact
// cache beside the bidirectional one (which skips exact-block), rows
// labelled by model; the exact cache answers as none on its model and
// serves the repeated system messages' full blocks from the store.
func TestBenchComparesModelsOnTheSameSamples(t *testing.T) {
	model := blockFixture
	out, errOut, code := run(t, "bench", "--model", model, "--compare-model", serveFixture, "--methods", "none,exact-block",
		"--suite", "lookup", "--limit", "2", "--questions-per-system", "2", "--gen-length", "16", "--steps", "8", "--block-length", "8", "--quiet", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(errOut, "skipping exact-block") || !strings.Contains(errOut, "blocks of 8 tokens") {
		t.Errorf("stderr does not say the bidirectional model skips exact-block and the store's block size:\n%s", errOut)
	}
	var js struct {
		Results []struct {
			Model, Method, Suite string
			AgreeNone            *float64 `json:"agree_none"`
			HitTokens            int64    `json:"prefix_hit_tokens"`
			RowsFraction         float64  `json:"rows_fraction"`
		}
	}
	if err := json.Unmarshal([]byte(out), &js); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	seen := map[string]bool{}
	for _, r := range js.Results {
		seen[r.Model+" "+r.Method] = true
		if r.Method == "exact-block" && r.Suite == "average" {
			if r.AgreeNone == nil || *r.AgreeNone != 1 || r.HitTokens == 0 || r.RowsFraction >= 0.5 {
				t.Errorf("exact-block: agreement %v, %d prefix tokens hit, rows %.2f of none's", r.AgreeNone, r.HitTokens, r.RowsFraction)
			}
		}
	}
	for _, want := range []string{"tiny-block none", "tiny-block exact-block", "tiny-bf16 none"} {
		if !seen[want] {
			t.Errorf("no rows for %s: %v", want, seen)
		}
	}
	if seen["tiny-bf16 exact-block"] {
		t.Error("the bidirectional model ran exact-block")
	}
}

// serve on a block-causal model defaults to the exact cache with a block
// store of the model's block size and says so; the exact cache refuses a
// bidirectional model at start.
func TestServeDefaultsToTheExactCacheOnBlockCausalModels(t *testing.T) {
	model := blockFixture
	var errOut testutil.SyncBuffer
	opts := parseServe(t, &errOut, "--model", model, "--threads", "1", "--addr", "127.0.0.1:0", "--timeout", "30s", "--gen-length", "16", "--steps", "8", "--block-length", "8")
	url, stop := startServe(t, opts, &errOut)
	if s := errOut.String(); !strings.Contains(s, "method exact-block") || !strings.Contains(s, "blocks of 8 tokens, the model's block") {
		t.Errorf("start-up lines do not say the method and store defaulted to the exact block cache:\n%s", s)
	}
	body := `{"messages":[{"role":"system","content":"Be terse and kind, and follow the rules."},{"role":"user","content":"Hi"}]}`
	for range 2 {
		code, raw := httpDo(t, url+"/v1/chat/completions", body)
		var r struct {
			Dlmcache struct{ Method string } `json:"dlmcache"`
		}
		if code != 200 || json.Unmarshal(raw, &r) != nil || r.Dlmcache.Method != "exact-block" {
			t.Errorf("chat completion: %d %s", code, raw)
		}
	}
	stop()

	opts = parseServe(t, io.Discard, "--model", serveFixture, "--threads", "1", "--addr", "127.0.0.1:0", "--method", "exact-block")
	if err := opts.run(context.Background()); err == nil || !strings.Contains(err.Error(), "block-causal") {
		t.Errorf("serve --method exact-block on a bidirectional model: %v", err)
	}
}

// bench --store-answers with no method that keeps a store (the baseline of
// a turns run, none alone) runs and says nothing is stored; without
// --turns it is refused.
func TestBenchStoreAnswersNoneAlone(t *testing.T) {
	args := []string{"bench", "--model", blockFixture, "--methods", "none", "--suite", "lookup", "--limit", "1",
		"--gen-length", "16", "--steps", "8", "--block-length", "8", "--quiet", "--store-answers"}
	out, errOut, code := run(t, append(args, "--turns", "2")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(errOut, "no answered turn is stored") || !strings.Contains(out, "none | lookup turn 2") {
		t.Errorf("stderr does not say nothing is stored, or no turn-2 row:\nstderr: %s\nout: %s", errOut, out)
	}
	if _, errOut, code := run(t, args...); code == 0 || !strings.Contains(errOut, "needs --turns") {
		t.Errorf("--store-answers without --turns: exit %d: %s", code, errOut)
	}
}

// bench with no --methods runs every registered method the model and flags
// allow and names each one it leaves out with the reason (on a
// block-causal model without a table: the whole-canvas methods and those
// that need --lut); a refused method named with --methods fails.
func TestBenchDefaultMethodsSkipWhatTheModelRefuses(t *testing.T) {
	args := []string{"bench", "--model", blockFixture, "--suite", "lookup", "--limit", "1",
		"--gen-length", "16", "--steps", "8", "--block-length", "8", "--quiet"}
	out, errOut, code := run(t, args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"skipping prefix-all: ", "block-causal", "skipping table: ", "--lut"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
	for _, ran := range []string{"| none | lookup", "| exact-block | lookup", "| block | lookup"} {
		if !strings.Contains(out, ran) {
			t.Errorf("no %q row:\n%s", ran, out)
		}
	}
	if strings.Contains(out, "| prefix-all |") {
		t.Errorf("a refused method has a row:\n%s", out)
	}
	if _, errOut, code := run(t, append(args, "--methods", "none,prefix-all")...); code == 0 || !strings.Contains(errOut, "block-causal") {
		t.Errorf("--methods prefix-all on a block-causal model: exit %d: %s", code, errOut)
	}
}
