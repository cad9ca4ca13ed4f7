package main

import (
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dlmcache/dlmcache/cache"
	"github.com/dlmcache/dlmcache/lut"
	"github.com/dlmcache/dlmcache/model"
	"github.com/dlmcache/dlmcache/model/cpu"
	"github.com/dlmcache/dlmcache/serve"
)

// loadtest against a server on the fixture: every request answered, the
// levels recorded under the server's method, the figure drawn.
func TestLoadtestAnswersEveryRequestAndPlots(t *testing.T) {
	m, err := model.Load(serveFixture, cpu.New(1))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	none, err := cache.New("none", cache.Options{Stat: lut.Mean})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := serve.New(serve.Config{Model: m, Method: none,
		Gen: model.GenOptions{GenLength: 16, Steps: 8, BlockLength: 8}, MaxConcurrency: 2, MaxQueue: 64})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	defer ts.Close()
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
	if _, errOut, code := run(t, "loadtest"); code == 0 || !strings.Contains(errOut, "--url") {
		t.Errorf("no --url: exit %d %s", code, errOut)
	}
}
