package main

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dlmcache/dlmcache/cache"
	"github.com/dlmcache/dlmcache/internal/testmodel"
	"github.com/dlmcache/dlmcache/lut"
	"github.com/dlmcache/dlmcache/model"
	"github.com/dlmcache/dlmcache/serve"
)

// loadtest against a server on the fixture: every request answered, the
// levels recorded under the server's method, the figure drawn.
func TestLoadtestAnswersEveryRequestAndPlots(t *testing.T) {
	m := testmodel.Load(t, "tiny-bf16")
	// server serves m with meth (16 slots, 8 steps, blocks of 8) over HTTP
	// until the test ends.
	server := func(meth cache.Method, concurrency int) *httptest.Server {
		srv, err := serve.New(serve.Config{Model: m, Method: meth,
			Gen: model.GenOptions{GenLength: 16, Steps: 8, BlockLength: 8}, MaxConcurrency: concurrency, MaxQueue: 64})
		if err != nil {
			t.Fatal(err)
		}
		ts := httptest.NewServer(srv)
		t.Cleanup(ts.Close)
		return ts
	}
	none, err := cache.New("none", cache.Options{Stat: lut.Mean})
	if err != nil {
		t.Fatal(err)
	}
	ts := server(none, 2)
	dir := t.TempDir()
	// The fixture's byte-level tokenizer makes the builtin requests too long
	// for its context: short ones from a file.
	reqs := filepath.Join(dir, "reqs.jsonl")
	os.WriteFile(reqs, []byte(`{"system":"Be brief.","user":"Hi"}`+"\n"+`{"system":"Be brief.","user":"Why?"}`+"\n"), 0o644)
	out, errOut, code := run(t, "loadtest", "--url", ts.URL, "--clients", "1,3", "--requests", "5", "--requests-file", reqs,
		"--out", dir, "--plot", filepath.Join(dir, "load.png"))
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var res map[string][]loadLevel
	b, err := os.ReadFile(filepath.Join(dir, "loadtest.json"))
	if err != nil || json.Unmarshal(b, &res) != nil {
		t.Fatalf("loadtest.json: %v %s", err, b)
	}
	lv := res["none"]
	if len(lv) != 2 || lv[1].Clients != 3 || lv[0].Errors+lv[1].Errors != 0 || lv[1].TokensPerS <= 0 || lv[1].FirstP50 > lv[1].LatencyP50 {
		t.Errorf("levels %+v\n%s", lv, errOut)
	}
	if !strings.Contains(out, "none") {
		t.Errorf("output:\n%s", out)
	}
	if st, err := os.Stat(filepath.Join(dir, "load.png")); err != nil || st.Size() == 0 {
		t.Errorf("figure: %v", err)
	}
	// Accuracy over the requests with a reference answer, the method per
	// request, and prefix tokens found in the store, from a prefix-all
	// server (its store shares "Be brief." across the requests).
	pa, err := cache.New("prefix-all", cache.Options{Stat: lut.Mean, Store: cache.NewStore(m.Backend, 1<<30, cache.FIFO)})
	if err != nil {
		t.Fatal(err)
	}
	ts2 := server(pa, 1)
	os.WriteFile(reqs, []byte(`{"system":"Be brief.","user":"Hi","answer":"zz-never","suite":"lookup"}`+"\n"+`{"system":"Be brief.","user":"Why?"}`+"\n"), 0o644)
	out, errOut, code = run(t, "loadtest", "--url", ts2.URL, "--clients", "1", "--requests", "4", "--requests-file", reqs, "--out", dir)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	b, _ = os.ReadFile(filepath.Join(dir, "loadtest.json"))
	res = nil
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	l := res["prefix-all"]
	if len(l) != 1 || len(res["none"]) != 2 {
		t.Fatalf("labels %v", res)
	}
	if l[0].Checked != 2 || l[0].Correct != 0 || l[0].Methods["prefix-all"] != 4 || l[0].PrefixTokens == 0 ||
		l[0].PrefixHitTokens != 3*l[0].PrefixTokens/4 || l[0].GenSeconds <= 0 || l[0].GenTokensPerS <= 0 {
		t.Errorf("level %+v", l[0])
	}
	if !strings.Contains(out, "0.0% (0/2)") || !strings.Contains(out, fmt.Sprintf("%d/%d", l[0].PrefixHitTokens, l[0].PrefixTokens)) {
		t.Errorf("output:\n%s", out)
	}
	if _, errOut, code := run(t, "loadtest"); code == 0 || !strings.Contains(errOut, "--url") {
		t.Errorf("no --url: exit %d %s", code, errOut)
	}
}
