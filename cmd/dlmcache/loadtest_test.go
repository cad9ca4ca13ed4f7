package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/dlmcache/dlmcache/cache"
	"github.com/dlmcache/dlmcache/datasets"
	"github.com/dlmcache/dlmcache/internal/testmodel"
	"github.com/dlmcache/dlmcache/internal/testutil"
	"github.com/dlmcache/dlmcache/lut"
	"github.com/dlmcache/dlmcache/model/sample"
	"github.com/dlmcache/dlmcache/regime"
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
			Gen: sample.GenOptions{Regime: regime.Regime{GenLength: 16, Steps: 8, BlockLength: 8}}, MaxConcurrency: concurrency, MaxQueue: 64})
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
	res := readLoad(t, dir)
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
	res = readLoad(t, dir)
	l := res["prefix-all"]
	if len(l) != 1 || len(res["none"]) != 2 {
		t.Fatalf("labels %v", res)
	}
	if l[0].Checked != 2 || l[0].Correct != 0 || l[0].Methods["prefix-all"] != 4 || l[0].PrefixTokens == 0 || l[0].AgreeWith != "none" || l[0].Compared != 4 ||
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

// fakeChat is an OpenAI-compatible streaming chat server that records
// every request's messages and the answer it gave: answer(msgs) says what
// to answer. Its dlmcache object counts the messages before the last as
// the shared prefix, found in the store from the second user turn on.
type fakeChat struct {
	mu      sync.Mutex
	asked   [][]chatMessage
	answers map[string]string // JSON of the messages → the answer given
}

func newFakeChat(t *testing.T, answer func(msgs []chatMessage) string) (*fakeChat, string) {
	fc := &fakeChat{answers: map[string]string{}}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/chat/completions" {
			http.NotFound(w, r)
			return
		}
		var req struct{ Messages []chatMessage }
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		text := answer(req.Messages)
		key, _ := json.Marshal(req.Messages)
		fc.mu.Lock()
		fc.asked = append(fc.asked, req.Messages)
		fc.answers[string(key)] = text
		fc.mu.Unlock()
		users, prefix := 0, 0
		for _, m := range req.Messages[:len(req.Messages)-1] {
			prefix += len(m.Content)
		}
		for _, m := range req.Messages {
			if m.Role == "user" {
				users++
			}
		}
		w.Header().Set("Content-Type", "text/event-stream")
		// The answer in two chunks, as blocks arrive.
		for _, part := range []string{text[:len(text)/2], text[len(text)/2:]} {
			b, _ := json.Marshal(map[string]any{"choices": []any{map[string]any{"delta": map[string]string{"content": part}}}})
			fmt.Fprintf(w, "data: %s\n\n", b)
		}
		b, _ := json.Marshal(map[string]any{"choices": []any{map[string]any{"delta": map[string]string{}, "finish_reason": "stop"}},
			"dlmcache": serve.Stats{Method: "fake", Depth: 1, PrefixTokens: prefix, PrefixHit: users > 1, Regime: regime.Regime{GenLength: 8}, Seconds: 0.01}})
		fmt.Fprintf(w, "data: %s\n\ndata: [DONE]\n\n", b)
	}))
	t.Cleanup(ts.Close)
	return fc, ts.URL
}

// benchSamples is bench's workload for args (bench's flags): its samples
// and conversations as bench.run draws them.
func benchSamples(t *testing.T, args ...string) []datasets.Sample {
	t.Helper()
	var samples []datasets.Sample
	cmd := newCmdBench(&factory{Out: io.Discard, ErrOut: io.Discard}, func(o *benchOptions) error {
		s, err := o.samples()
		if err != nil {
			return err
		}
		samples, err = benchConversations(o, s)
		return err
	})
	cmd.SetArgs(args)
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	return samples
}

// loadtest --suite sends bench's shared-prefix workload for the same
// flags, request for request in order (one client), with its reference
// answers checked.
func TestLoadtestSendsBenchsSharedWorkload(t *testing.T) {
	flags := []string{"--suite", "lookup,rule", "--limit", "2", "--questions-per-system", "3", "--seed", "5"}
	want := benchSamples(t, flags...)
	bench := map[string]datasets.Sample{}
	for _, s := range want {
		bench[s.System+"\x00"+s.User] = s
	}
	// Right on every question but the rule suite's.
	fc, url := newFakeChat(t, func(msgs []chatMessage) string {
		s := bench[msgs[0].Content+"\x00"+msgs[len(msgs)-1].Content]
		if s.Suite != "lookup" {
			return "## wrong"
		}
		return "## " + s.Answer
	})
	dir := t.TempDir()
	_, errOut, code := run(t, append([]string{"loadtest", "--url", url, "--clients", "1", "--out", dir, "--label", "fake"}, flags...)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if len(fc.asked) != len(want) || len(want) != 12 {
		t.Fatalf("sent %d requests, bench's workload has %d (want 2 suites × 2 samples × 3 questions)", len(fc.asked), len(want))
	}
	lookups := 0
	for i, s := range want {
		got := fc.asked[i]
		if len(got) != 2 || got[0] != (chatMessage{"system", s.System}) || got[1] != (chatMessage{"user", s.User}) {
			t.Errorf("request %d: %+v, bench's is %s %q", i, got, s.ID, s.User)
		}
		if s.Suite == "lookup" {
			lookups++
		}
	}
	res := readLoad(t, dir)
	lv := res["fake"]
	if len(lv) != 1 || lv[0].Requests != 12 || lv[0].Checked != 12 || lv[0].Correct != lookups || len(lv[0].Turns) != 0 {
		t.Errorf("level %+v: want 12 requests, %d of them right", lv, lookups)
	}

	// A second server that answers one question otherwise: its answers
	// compared with the first's request by request (--agree-with), at the
	// client count both ran; a second client count adds a level.
	odd := want[4]
	_, url2 := newFakeChat(t, func(msgs []chatMessage) string {
		s := bench[msgs[0].Content+"\x00"+msgs[len(msgs)-1].Content]
		if s.ID == odd.ID {
			return "## other"
		}
		if s.Suite != "lookup" {
			return "## wrong"
		}
		return "## " + s.Answer
	})
	for _, c := range []string{"1", "2"} {
		out, errOut, code := run(t, append([]string{"loadtest", "--url", url2, "--clients", c, "--out", dir, "--label", "fake2", "--agree-with", "fake"}, flags...)...)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		if c == "1" && !strings.Contains(out, "fake 91.7% (11/12)") {
			t.Errorf("output:\n%s", out)
		}
		if c == "2" && !strings.Contains(errOut, "fake has no answers at 2 clients") {
			t.Errorf("stderr does not say nothing was compared:\n%s", errOut)
		}
	}
	res = readLoad(t, dir)
	lv = res["fake2"]
	if len(lv) != 2 || lv[0].Clients != 1 || lv[1].Clients != 2 || len(res["fake"]) != 1 {
		t.Fatalf("levels %+v", res)
	}
	if lv[0].AgreeWith != "fake" || lv[0].Compared != 12 || lv[0].Agree != 11 || lv[1].Compared != 0 {
		t.Errorf("agreement: %+v", lv)
	}
	// The paired accuracy difference: the odd answer loses a point where
	// the first server answered it right (a lookup), else nothing changes.
	lost := map[bool]int{true: 1, false: 0}[odd.Suite == "lookup"]
	if lv[0].Paired != 12 || lv[0].Gained != 0 || lv[0].Lost != lost {
		t.Errorf("paired %d, gained %d, lost %d; want 12, 0, %d", lv[0].Paired, lv[0].Gained, lv[0].Lost, lost)
	}
	if d := lv[0].pairedDiff(); math.Abs(d.Mean+100*float64(lost)/12) > 1e-9 || d.Low > d.Mean || d.High < d.Mean {
		t.Errorf("paired difference %+v, want %.2f points", d, -100*float64(lost)/12)
	}
}

// loadtest --turns: each conversation's turns are bench's questions, sent
// one after another, each carrying the server's own earlier answers in
// order; accuracy and the store's prefix tokens are reported per turn.
func TestLoadtestConversationsCarryTheServersAnswers(t *testing.T) {
	flags := []string{"--suite", "lookup,arithmetic", "--limit", "2", "--turns", "3"}
	want := benchSamples(t, flags...)
	bench := map[string]datasets.Sample{}
	for _, s := range want {
		bench[s.System+"\x00"+s.User] = s
	}
	// Right on turns 1 and 3, a unique wrong answer on turn 2.
	var n atomic.Int64
	fc, url := newFakeChat(t, func(msgs []chatMessage) string {
		s := bench[msgs[0].Content+"\x00"+msgs[len(msgs)-1].Content]
		if s.Turn == 2 {
			return fmt.Sprintf("## wrong %d", n.Add(1))
		}
		return "## " + s.Answer
	})
	dir := t.TempDir()
	out, errOut, code := run(t, append([]string{"loadtest", "--url", url, "--clients", "3", "--out", dir, "--label", "fake"}, flags...)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	convs := len(want) / 3
	if len(fc.asked) != len(want) || convs != 4 {
		t.Fatalf("sent %d requests, bench's workload has %d turns (want 4 conversations of 3)", len(fc.asked), len(want))
	}
	seen := map[string]bool{}
	for _, msgs := range fc.asked {
		s, ok := bench[msgs[0].Content+"\x00"+msgs[len(msgs)-1].Content]
		if !ok || len(msgs) != 2*s.Turn || msgs[0].Role != "system" {
			t.Fatalf("request %+v is no turn of bench's workload", msgs)
		}
		seen[s.ID] = true
		for k, h := range s.History {
			u, a := msgs[1+2*k], msgs[2+2*k]
			key, _ := json.Marshal(msgs[:2+2*k])
			if u != (chatMessage{"user", h.User}) || a.Role != "assistant" || a.Content != fc.answers[string(key)] {
				t.Errorf("%s: turn %d carries %+v %+v; want bench's question %q and the server's answer %q", s.ID, k+1, u, a, h.User, fc.answers[string(key)])
			}
		}
	}
	if len(seen) != len(want) {
		t.Errorf("%d distinct turns sent of %d", len(seen), len(want))
	}
	res := readLoad(t, dir)
	lv := res["fake"]
	if len(lv) != 1 || lv[0].Requests != len(want) || lv[0].Errors != 0 || len(lv[0].Turns) != 3 {
		t.Fatalf("levels %+v", lv)
	}
	for k, tn := range lv[0].Turns {
		right := convs
		if k == 1 {
			right = 0
		}
		hit := tn.PrefixHitTokens == tn.PrefixTokens && tn.PrefixTokens > 0
		if tn.Turn != k+1 || tn.Requests != convs || tn.Checked != convs || tn.Correct != right || hit != (k > 0) || tn.LatencyP50 <= 0 || tn.LatencyP99 < tn.LatencyP50 {
			t.Errorf("turn %d: %+v", k+1, tn)
		}
	}
	if !strings.Contains(out, "3 clients, by turn:") || !strings.Contains(out, fmt.Sprintf("0.0%% (0/%d)", convs)) {
		t.Errorf("output:\n%s", out)
	}
	// The same server again, compared with the first run: turn 2's
	// answers differ, and turn 3's (its own request whatever the answers
	// before it) agree.
	_, errOut, code = run(t, append([]string{"loadtest", "--url", url, "--clients", "3", "--out", dir, "--label", "again", "--agree-with", "fake"}, flags...)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	res = readLoad(t, dir)
	again := res["again"]
	if len(again) != 1 || again[0].Compared != len(want) || again[0].Agree != 2*convs || len(again[0].Turns) != 3 {
		t.Fatalf("agreement %+v", again)
	}
	for k, tn := range again[0].Turns {
		if tn.Compared != convs || tn.Agree != map[bool]int{true: 0, false: convs}[k == 1] {
			t.Errorf("turn %d agrees on %d of %d", k+1, tn.Agree, tn.Compared)
		}
	}
}

// The request sources and --turns: conversations need the suites, and
// --suite is one source, --requests-file another.
func TestLoadtestRefusesConversationsWithoutSuites(t *testing.T) {
	fc, url := newFakeChat(t, func([]chatMessage) string { return "## x" })
	reqs := filepath.Join(t.TempDir(), "reqs.jsonl")
	os.WriteFile(reqs, []byte(`{"system":"Be brief.","user":"Hi"}`+"\n"), 0o644)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--turns", "3"}, "--turns needs --suite"},
		{[]string{"--turns", "3", "--requests-file", reqs}, "--turns needs --suite"},
		{[]string{"--questions-per-system", "4"}, "--questions-per-system needs --suite"},
		{[]string{"--suite", "lookup", "--requests-file", reqs}, "two request sources"},
		{[]string{"--suite", "lookup", "--turns", "9"}, "want 2…6"},
	} {
		_, errOut, code := run(t, append([]string{"loadtest", "--url", url, "--clients", "1"}, tc.args...)...)
		if code == 0 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, %q lacks %q", tc.args, code, errOut, tc.want)
		}
	}
	if len(fc.asked) != 0 {
		t.Errorf("%d requests sent", len(fc.asked))
	}
}

// loadtest --turns against serve --store-answers on the block-causal
// fixture: each follow-up turn's prompt starts with the tokens the server
// stored for the turn before (the server's own answer as the client sent
// it back), so its whole shared prefix is found in the store; the first
// turns' system messages are all different, so none is. The answers are
// those of a server with no cache (--method none), turn by turn.
func TestLoadtestConversationsReuseTheServersStoredTurns(t *testing.T) {
	dir := t.TempDir()
	loadtest := func(serveArgs ...string) (string, string, int) {
		var errOut testutil.SyncBuffer
		opts := parseServe(t, &errOut, append([]string{"--model", blockFixture, "--threads", "1", "--addr", "127.0.0.1:0",
			"--gen-length", "16", "--steps", "8", "--block-length", "8"}, serveArgs...)...)
		url, stop := startServe(t, opts, &errOut)
		defer stop()
		out, stderr, code := run(t, "loadtest", "--url", url, "--clients", "1", "--suite", "lookup", "--limit", "2", "--turns", "3", "--filler-tokens", "0:0", "--out", dir)
		return out, stderr + errOut.String(), code
	}
	if _, stderr, code := loadtest("--method", "none"); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	out, stderr, code := loadtest("--store-answers")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	res := readLoad(t, dir)
	lv := res["exact-block"]
	if len(lv) != 1 || lv[0].Errors != 0 || len(lv[0].Turns) != 3 || len(res["none"]) != 1 {
		t.Fatalf("levels %+v\n%s\n%s", res, out, stderr)
	}
	if lv[0].Compared != 6 || lv[0].Agree != 6 {
		t.Errorf("exact-block answers %d of %d requests as none does", lv[0].Agree, lv[0].Compared)
	}
	for k, tn := range lv[0].Turns {
		// Turn 1 finds only what the two conversations' prompts share (the
		// chat template's opening); a later turn every full block of its
		// prefix: all but each request's partial last block (blocks of 8).
		found := tn.PrefixHitTokens < tn.PrefixTokens/2
		if k > 0 {
			found = tn.PrefixHitTokens <= tn.PrefixTokens && tn.PrefixTokens-tn.PrefixHitTokens < 8*tn.Requests
		}
		if tn.Requests != 2 || tn.PrefixTokens == 0 || !found {
			t.Errorf("turn %d: %d requests, %d/%d prefix tokens found in the store\n%s", k+1, tn.Requests, tn.PrefixHitTokens, tn.PrefixTokens, out)
		}
		if k > 0 && tn.PrefixTokens <= lv[0].Turns[k-1].PrefixTokens {
			t.Errorf("turn %d's prefix (%d tokens) is no longer than turn %d's (%d)", k+1, tn.PrefixTokens, k, lv[0].Turns[k-1].PrefixTokens)
		}
	}
}

// readLoad reads the levels loadtest --out kept in dir, by label.
func readLoad(t *testing.T, dir string) map[string][]loadLevel {
	t.Helper()
	var res map[string][]loadLevel
	b, err := os.ReadFile(filepath.Join(dir, "loadtest.json"))
	if err != nil || json.Unmarshal(b, &res) != nil {
		t.Fatalf("loadtest.json: %v %s", err, b)
	}
	return res
}

// loadtest --write-requests writes the requests in the order one client
// sends them, keyed as loadtest-answers.json keys their answers; without
// --url it only writes them, and --requests-file reads them back.
func TestLoadtestWritesTheRequestsItSends(t *testing.T) {
	flags := []string{"--suite", "lookup,rule", "--limit", "2", "--questions-per-system", "2", "--seed", "5"}
	dir := t.TempDir()
	file := filepath.Join(dir, "requests.jsonl")
	if _, errOut, code := run(t, append([]string{"loadtest", "--write-requests", file}, flags...)...); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	read := func() []writtenRequest {
		t.Helper()
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var out []writtenRequest
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			var r writtenRequest
			if err := json.Unmarshal([]byte(line), &r); err != nil {
				t.Fatalf("%q: %v", line, err)
			}
			out = append(out, r)
		}
		return out
	}
	written := read()
	fc, url := newFakeChat(t, func(msgs []chatMessage) string { return "## " + msgs[len(msgs)-1].Content })
	if _, errOut, code := run(t, append([]string{"loadtest", "--url", url, "--clients", "1", "--out", dir, "--label", "fake", "--write-requests", file}, flags...)...); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if again := read(); len(written) != 8 || len(again) != len(written) || len(fc.asked) != len(written) {
		t.Fatalf("wrote %d requests (again with --url: %d), sent %d; want 8", len(written), len(again), len(fc.asked))
	}
	b, err := os.ReadFile(filepath.Join(dir, "loadtest-answers.json"))
	if err != nil {
		t.Fatal(err)
	}
	var answers map[string]map[string]map[string]string
	if err := json.Unmarshal(b, &answers); err != nil {
		t.Fatal(err)
	}
	for i, r := range written {
		got := fc.asked[i]
		if len(got) != 2 || got[0] != (chatMessage{"system", r.System}) || got[1] != (chatMessage{"user", r.User}) || r.Answer == "" || r.Suite == "" {
			t.Errorf("request %d: sent %+v, written %+v", i, got, r)
		}
		if a := answers["fake"]["1"][r.Key]; a != "## "+r.User {
			t.Errorf("request %d: answer under its key %q", i, a)
		}
	}
	// Read back as --requests-file: the same requests, sent in the same
	// order (a level of --requests 8 from 8 lines), under the same keys.
	fc2, url2 := newFakeChat(t, func(msgs []chatMessage) string { return "## " + msgs[len(msgs)-1].Content })
	if _, errOut, code := run(t, "loadtest", "--url", url2, "--clients", "1", "--requests", "8", "--requests-file", file, "--out", dir, "--label", "again"); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for i := range fc2.asked {
		if fmt.Sprint(fc2.asked[i]) != fmt.Sprint(fc.asked[i]) {
			t.Errorf("request %d read back: %+v, want %+v", i, fc2.asked[i], fc.asked[i])
		}
	}
}
