package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dlmcache/dlmcache/internal/testmodel"
	"github.com/dlmcache/dlmcache/internal/testutil"
	"github.com/dlmcache/dlmcache/lut"
	"github.com/dlmcache/dlmcache/model/backend"
	"github.com/dlmcache/dlmcache/model/cpu"
)

const serveFixture = "../../model/testdata/tiny-bf16"

// writeTable writes a table for a model of nLayers layers and fingerprint
// fp that serves depth 2 at every ratio.
func writeTable(t *testing.T, name string, nLayers int, fp string) string {
	t.Helper()
	tab, err := lut.Build(lut.ModelID{Name: name, NLayers: nLayers, Fingerprint: fp}, 0.97, []float64{0, 1}, []lut.Sample{{Ratio: 0.5, Depth: 2}})
	if err != nil {
		t.Fatal(err)
	}
	return tempTable(t, tab)
}

// tempTable writes tab as table.json in a directory of its own that is
// removed when the test ends, and returns the file's path.
func tempTable(t *testing.T, tab *lut.Table) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "table.json")
	if err := tab.Write(p); err != nil {
		t.Fatal(err)
	}
	return p
}

// parseServe parses serve's command line (serving nothing) and returns the
// options serve runs with; the server's log goes to errOut.
func parseServe(t *testing.T, errOut io.Writer, args ...string) *serveOptions {
	t.Helper()
	var opts *serveOptions
	cmd := newCmdServe(&factory{Out: io.Discard, ErrOut: errOut}, func(o *serveOptions) error { opts = o; return nil })
	cmd.SetArgs(args)
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	return opts
}

// startServe runs serve (opts.run) in the background and returns the server's
// base URL once it listens, and stop, which cancels the server and returns
// opts.run's result (the test's end stops it too).
func startServe(t *testing.T, opts *serveOptions, errOut *testutil.SyncBuffer) (url string, stop func() error) {
	t.Helper()
	addr := make(chan string, 1)
	opts.ready = func(a string) { addr <- a }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var err error
	go func() { err = opts.run(ctx); close(done) }()
	stop = func() error { cancel(); <-done; return err }
	t.Cleanup(func() { stop() })
	select {
	case a := <-addr:
		return "http://" + a, stop
	case <-done:
		t.Fatalf("serve stopped at start-up: %v\n%s", err, errOut.String())
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not start listening")
	}
	return "", stop
}

// httpDo sends a request (a POST of body with a JSON body, a GET when body
// is empty) and returns the status and the response body.
func httpDo(t *testing.T, url, body string) (int, []byte) {
	t.Helper()
	var resp *http.Response
	var err error
	if body == "" {
		resp, err = http.Get(url)
	} else {
		resp, err = http.Post(url, "application/json", strings.NewReader(body))
	}
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, raw
}

// fixtureModel is serveFixture's layer count and fingerprint.
func fixtureModel(t *testing.T) (int, string) {
	m := testmodel.Load(t, "tiny-bf16")
	return len(m.Blocks), m.Fingerprint
}

func TestServeRefusesAnotherModelsTable(t *testing.T) {
	p := writeTable(t, "llada-8b", 32, "0123456789abcdef")
	opts := parseServe(t, io.Discard, "--model", serveFixture, "--lut", p, "--threads", "1", "--addr", "127.0.0.1:0")
	err := opts.run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "llada-8b") || !strings.Contains(err.Error(), "0123456789abcdef") || !strings.Contains(err.Error(), p) {
		t.Fatalf("serve with another model's table: %v", err)
	}
}

func TestServeRefusesBadModules(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "modules.json")
	os.WriteFile(bad, []byte(`{"modules":[{"name":"a","text":""}]}`), 0o644)
	for _, file := range []string{filepath.Join(t.TempDir(), "missing.json"), bad} {
		opts := parseServe(t, io.Discard, "--model", serveFixture, "--threads", "1", "--addr", "127.0.0.1:0", "--modules", file)
		if err := opts.run(context.Background()); err == nil || !strings.Contains(err.Error(), "--modules") || !strings.Contains(err.Error(), file) {
			t.Errorf("--modules %s: %v", file, err)
		}
	}
}

// --store-answers against the method: a method with no prefix store
// serves with a note that nothing is stored; one keeping whole prefixes is
// refused, naming --store-blocks; a block store keeps the answers.
func TestServeStoreAnswersChecksTheMethod(t *testing.T) {
	var errOut testutil.SyncBuffer
	opts := parseServe(t, &errOut, "--model", serveFixture, "--method", "none", "--store-answers", "--threads", "1", "--addr", "127.0.0.1:0")
	_, stop := startServe(t, opts, &errOut)
	if err := stop(); err != nil {
		t.Fatalf("none with --store-answers: %v", err)
	}
	if s := errOut.String(); !strings.Contains(s, "--store-answers: method none keeps no prefix store, so no answered conversation is stored") {
		t.Errorf("start-up lines do not say that nothing is stored:\n%s", s)
	}
	opts = parseServe(t, io.Discard, "--model", serveFixture, "--method", "prefix-all", "--store-answers", "--threads", "1", "--addr", "127.0.0.1:0")
	if err := opts.run(context.Background()); err == nil || !strings.Contains(err.Error(), "--store-blocks") || !strings.Contains(err.Error(), "prefix-all") {
		t.Errorf("prefix-all (whole prefixes) with --store-answers: %v", err)
	}
	errOut = testutil.SyncBuffer{}
	opts = parseServe(t, &errOut, "--model", serveFixture, "--method", "prefix-all", "--store-blocks", "16", "--store-answers", "--threads", "1", "--addr", "127.0.0.1:0")
	_, stop = startServe(t, opts, &errOut)
	if err := stop(); err != nil || strings.Contains(errOut.String(), "no answered conversation is stored") || !opts.StoreAnswers {
		t.Errorf("prefix-all with a block store and --store-answers: %v, store answers %v\n%s", err, opts.StoreAnswers, errOut.String())
	}
}

func TestServeRunsAndStops(t *testing.T) {
	nLayers, fp := fixtureModel(t)
	p := writeTable(t, "tiny-bf16", nLayers, fp)
	var errOut testutil.SyncBuffer
	mods := filepath.Join(t.TempDir(), "modules.json")
	os.WriteFile(mods, []byte(`{"modules":[{"name":"doc","text":"Orders ship in two days.\n\n"}]}`), 0o644)
	opts := parseServe(t, &errOut, "--model", serveFixture, "--lut", p, "--threads", "1", "--addr", "127.0.0.1:0", "--timeout", "30s", "--modules", mods, "--allow-uncalibrated")
	url, stop := startServe(t, opts, &errOut)
	// The method defaulted to bicache; a cosine table keeps the request
	// source and the start-up line says why.
	if s := errOut.String(); !strings.Contains(s, "method bicache (table "+p+", deep source request: the table is not calibrated") {
		t.Errorf("start-up line does not say the method defaulted to bicache with the request source, and why:\n%s", s)
	}
	if s := errOut.String(); !strings.Contains(s, "UNCALIBRATED (a cosine estimate, served because of --allow-uncalibrated)") {
		t.Errorf("start-up line does not say the table is uncalibrated:\n%s", s)
	}
	code, raw := httpDo(t, url+"/v1/chat/completions", `{"messages":[{"role":"system","content":"Be terse."},{"role":"user","content":"Hi"}]}`)
	var r struct {
		Dlmcache struct {
			Method string `json:"method"`
			Depth  int    `json:"depth"`
		} `json:"dlmcache"`
	}
	if code != 200 || json.Unmarshal(raw, &r) != nil || r.Dlmcache.Method != "bicache" || r.Dlmcache.Depth != 2 {
		t.Errorf("chat completion: %d %s", code, raw)
	}
	// A request importing the module is served by the modules' method.
	if !strings.Contains(errOut.String(), "prompt modules at depth 1: doc (") {
		t.Errorf("start-up lines do not list the modules:\n%s", errOut.String())
	}
	code, raw = httpDo(t, url+"/v1/chat/completions", `{"modules":["doc"],"messages":[{"role":"user","content":"When?"}]}`)
	if code != 200 || json.Unmarshal(raw, &r) != nil || r.Dlmcache.Method != "modules" || r.Dlmcache.Depth != 1 {
		t.Errorf("module request: %d %s", code, raw)
	}
	if err := stop(); err != nil {
		t.Errorf("serve after cancel: %v", err)
	}
	log := errOut.String()
	if !strings.Contains(log, "POST /v1/chat/completions 200") || !strings.Contains(log, "dlmcache serve: stopped") {
		t.Errorf("log:\n%s", log)
	}
}

// A cosine table is refused with a message naming calibrate.
func TestServeRefusesUncalibratedTable(t *testing.T) {
	nLayers, fp := fixtureModel(t)
	p := writeTable(t, "tiny-bf16", nLayers, fp)
	opts := parseServe(t, io.Discard, "--model", serveFixture, "--lut", p, "--threads", "1", "--addr", "127.0.0.1:0")
	err := opts.run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "dlmcache calibrate") || !strings.Contains(err.Error(), "--allow-uncalibrated") {
		t.Fatalf("serve with a cosine table: %v", err)
	}
}

// writeChoosingTable writes a v3 table whose one bin serves every request
// with setting.
func writeChoosingTable(t *testing.T, nLayers int, fp string, setting lut.Setting) string {
	t.Helper()
	tab := &lut.Table{Model: lut.ModelID{Name: "tiny-bf16", NLayers: nLayers, Fingerprint: fp}, Tau: 1,
		Classes:     []lut.Class{{Name: "all"}},
		Bins:        []lut.Bin{{Lo: 0, Hi: 1, Choices: []*lut.Choice{{Class: "all", Setting: setting, Samples: 20, Agreement: 1, LowerBound: 0.92, SpeedUp: 3}}}},
		Calibration: &lut.Calibration{Method: "search", Gate: "answer", Target: 0.9, Confidence: 0.9, MaxLoss: 1}}
	return tempTable(t, tab)
}

// serve --lut with a calibrated v3 table and no other flag serves each
// request with the table's choice, says so at start-up, in the response
// and in /metrics.
func TestServeAppliesTheTablesChoice(t *testing.T) {
	nLayers, fp := fixtureModel(t)
	p := writeChoosingTable(t, nLayers, fp, lut.Setting{Method: "none", Decoder: "threshold:0.9"})
	var errOut testutil.SyncBuffer
	opts := parseServe(t, &errOut, "--model", serveFixture, "--lut", p, "--threads", "1", "--addr", "127.0.0.1:0", "--timeout", "30s")
	url, stop := startServe(t, opts, &errOut)
	if s := errOut.String(); !strings.Contains(s, "method table (table "+p+": per request, its bin's choice: [0.00, 1.00) all: none@threshold:0.9") {
		t.Errorf("start-up line does not name the table's choice:\n%s", s)
	}
	code, raw := httpDo(t, url+"/v1/chat/completions", `{"messages":[{"role":"system","content":"Be terse."},{"role":"user","content":"Hi"}]}`)
	var r struct {
		Dlmcache struct {
			Method string `json:"method"`
		} `json:"dlmcache"`
	}
	if code != 200 || json.Unmarshal(raw, &r) != nil || r.Dlmcache.Method != "none@threshold:0.9" {
		t.Errorf("chat completion: %d %s", code, raw)
	}
	if _, raw = httpDo(t, url+"/metrics", ""); !strings.Contains(string(raw), `dlmcache_method_requests_total{method="none@threshold:0.9"} 1`) {
		t.Errorf("/metrics does not count the chosen method:\n%s", raw)
	}
	stop()
}

// --api-key and --api-key-file's keys are all accepted, a request without
// one gets 401, /healthz stays open, and no response shows the model's path
// (its name instead).
func TestServeAcceptsItsAPIKeysAndHidesTheModelPath(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "keys")
	os.WriteFile(keyFile, []byte("# team keys\nsk-file-1\n\n  sk-file-2  \n"), 0o600)
	var errOut testutil.SyncBuffer
	abs, _ := filepath.Abs(serveFixture)
	opts := parseServe(t, &errOut, "--model", abs, "--threads", "1", "--addr", "127.0.0.1:0", "--api-key", "sk-flag", "--api-key-file", keyFile)
	url, stop := startServe(t, opts, &errOut)
	get := func(path, key string) (int, string) {
		req, _ := http.NewRequest("GET", url+path, nil)
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/v1/models", ""); code != 401 || !strings.Contains(body, "invalid_api_key") {
		t.Errorf("/v1/models without a key: %d %s", code, body)
	}
	for _, k := range []string{"sk-flag", "sk-file-1", "sk-file-2"} {
		code, body := get("/v1/models", k)
		if code != 200 || !strings.Contains(body, `"id":"tiny-bf16"`) || strings.Contains(body, abs) {
			t.Errorf("/v1/models with %s: %d %s", k, code, body)
		}
	}
	if code, body := get("/healthz", ""); code != 200 || strings.Contains(body, "/") {
		t.Errorf("/healthz: %d %s", code, body)
	}
	if !strings.Contains(errOut.String(), "3 API keys") || strings.Contains(errOut.String(), "sk-") {
		t.Errorf("start-up lines should count the keys and show none:\n%s", errOut.String())
	}
	stop()
	for _, bad := range []string{filepath.Join(t.TempDir(), "missing"), func() string {
		p := filepath.Join(t.TempDir(), "empty")
		os.WriteFile(p, []byte("# nothing\n\n"), 0o600)
		return p
	}()} {
		if _, _, err := apiKeys(nil, bad); err == nil || !strings.Contains(err.Error(), "--api-key-file") {
			t.Errorf("key file %s: %v", bad, err)
		}
	}
	// A key file others can read is served with a warning naming it; a
	// private one without.
	for _, mode := range []os.FileMode{0o644, 0o640, 0o600} {
		p := filepath.Join(t.TempDir(), "keys")
		os.WriteFile(p, []byte("sk-a\n"), mode)
		os.Chmod(p, mode)
		keys, warning, err := apiKeys(nil, p)
		if err != nil || len(keys) != 1 {
			t.Fatalf("mode %o: %v %v", mode, keys, err)
		}
		if want := mode&0o077 != 0; want != (warning != "") || (want && !strings.Contains(warning, p)) {
			t.Errorf("key file of mode %04o: warning %q", mode, warning)
		}
	}
}

// --workers: 2 by default where batches run on a backend of at least two
// threads, else 1; more than one where they cannot run is refused.
func TestServeWorkers(t *testing.T) {
	two, one := cpu.New(2), cpu.New(1)
	gpuLike := struct{ backend.Backend }{two} // no backend.Threaded
	for _, c := range []struct {
		flag, batch int
		be          backend.Backend
		want        int
		note, err   string
	}{
		{0, 16, two, 2, "2 workers (2 threads for a worker alone, 1 each when all have work)", ""},
		{0, 16, one, 1, "1 worker", ""},
		{0, 16, gpuLike, 1, "1 worker", ""},
		{0, 1, two, 1, "no batches (--max-batch 1)", ""},
		{1, 16, two, 1, "1 worker", ""},
		{3, 16, two, 3, "3 workers (2 threads for a worker alone, 1 each when all have work)", ""},
		{2, 1, two, 0, "", "needs batched forwards"},
		{2, 16, gpuLike, 0, "", "cannot divide its threads"},
		{-1, 16, two, 0, "", "at least 0"},
	} {
		n, note, err := serveWorkers(c.flag, c.batch, c.be)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("--workers %d --max-batch %d: err %v, want one with %q", c.flag, c.batch, err, c.err)
			}
			continue
		}
		if err != nil || n != c.want || note != c.note {
			t.Errorf("--workers %d --max-batch %d on %s: %d, %q, %v; want %d, %q", c.flag, c.batch, c.be.Name(), n, note, err, c.want, c.note)
		}
	}
}

// --kv-events: refused without a block store (naming --store-blocks) and
// for a bad layout; with one, the start-up lines name the block size and
// the socket, which a ZMQ subscriber reads batches from.
func TestServeKVEvents(t *testing.T) {
	opts := parseServe(t, io.Discard, "--model", serveFixture, "--method", "prefix-all", "--threads", "1", "--addr", "127.0.0.1:0", "--kv-events", "tcp://127.0.0.1:0")
	if err := opts.run(context.Background()); err == nil || !strings.Contains(err.Error(), "--store-blocks") || !strings.Contains(err.Error(), "--kv-events") {
		t.Errorf("--kv-events without a block store: %v", err)
	}
	opts = parseServe(t, io.Discard, "--model", serveFixture, "--threads", "1", "--addr", "127.0.0.1:0", "--kv-events-replay", "tcp://127.0.0.1:0")
	if err := opts.run(context.Background()); err == nil || !strings.Contains(err.Error(), "--kv-events") {
		t.Errorf("--kv-events-replay alone: %v", err)
	}
	opts = parseServe(t, io.Discard, "--model", serveFixture, "--method", "prefix-all", "--store-blocks", "16", "--threads", "1", "--addr", "127.0.0.1:0",
		"--kv-events", "tcp://127.0.0.1:0", "--kv-events-layout", "json")
	if err := opts.run(context.Background()); err == nil || !strings.Contains(err.Error(), "--kv-events-layout") {
		t.Errorf("--kv-events-layout json: %v", err)
	}
	var errOut testutil.SyncBuffer
	opts = parseServe(t, &errOut, "--model", serveFixture, "--method", "prefix-all", "--store-blocks", "16", "--threads", "1", "--addr", "127.0.0.1:0",
		"--kv-events", "tcp://127.0.0.1:0", "--kv-events-replay", "tcp://127.0.0.1:0", "--kv-events-pod", "10.0.0.1:8000", "--kv-events-layout", "map")
	_, stop := startServe(t, opts, &errOut)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	s := errOut.String()
	for _, want := range []string{"a cache-aware router must hash prompts in blocks of 16", "KV events (vLLM's map layout, extra keys all) on tcp://127.0.0.1:", `topic "kv@10.0.0.1:8000@`,
		"marked \"dlmcache:partial-depth\"", "replay on tcp://127.0.0.1:"} {
		if !strings.Contains(s, want) {
			t.Errorf("start-up lines lack %q:\n%s", want, s)
		}
	}

	// --kv-events-extra-keys: a bad policy refused; none with
	// --kv-events-connect alone (no bound socket) dials the router's.
	opts = parseServe(t, io.Discard, "--model", serveFixture, "--method", "prefix-all", "--store-blocks", "16", "--threads", "1", "--addr", "127.0.0.1:0",
		"--kv-events", "tcp://127.0.0.1:0", "--kv-events-extra-keys", "some")
	if err := opts.run(context.Background()); err == nil || !strings.Contains(err.Error(), "--kv-events-extra-keys") {
		t.Errorf("--kv-events-extra-keys some: %v", err)
	}
	errOut = testutil.SyncBuffer{}
	opts = parseServe(t, &errOut, "--model", serveFixture, "--method", "prefix-all", "--store-blocks", "16", "--threads", "1", "--addr", "127.0.0.1:0",
		"--kv-events-connect", "tcp://127.0.0.1:1", "--kv-events-pod", "10.0.0.1:8000", "--kv-events-extra-keys", "none")
	_, stop = startServe(t, opts, &errOut)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	s = errOut.String()
	for _, want := range []string{"KV events (vLLM's array layout, extra keys none) dialling tcp://127.0.0.1:1,", "unmarked (--kv-events-extra-keys none)"} {
		if !strings.Contains(s, want) {
			t.Errorf("start-up lines lack %q:\n%s", want, s)
		}
	}
}
