package main

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dlmcache/dlmcache/engine"
	"github.com/dlmcache/dlmcache/internal/testmodel"
	"github.com/dlmcache/dlmcache/internal/testutil"
	"github.com/dlmcache/dlmcache/lut"
	"github.com/dlmcache/dlmcache/regime"
)

// The fixtures that share a tokenizer: the diffusion model tiny-llada-moe
// and the causal LM tiny-llama.
var (
	guidedDLM   = filepath.Join("..", "..", "model", "testdata", "tiny-llada-moe")
	guidedGuide = filepath.Join("..", "..", "model", "testdata", "tiny-llama")
)

// generate --guide decodes with the guided decoder: the answer is the
// guide's own greedy answer (the deterministic rule), --json records the
// decoder and the guide's work beside the DLM's NFE, stderr says the
// rule; guided:TAU:K is recorded as given.
func TestGenerateGuided(t *testing.T) {
	type record struct {
		Decoder        string
		NFE            int     `json:"nfe"`
		Decoded        int     //
		AnswerTokenIDs []int32 `json:"answer_token_ids"`
		Guide          *struct {
			Model            string
			NFE              int `json:"nfe"`
			Steps, Committed int
			AcceptLen        float64 `json:"accept_len"`
			DLMSeconds       float64 `json:"dlm_seconds"`
			GuideSeconds     float64 `json:"guide_seconds"`
		}
	}
	args := []string{"generate", "--model", guidedDLM, "--prompt", "Hi", "--gen-length", "16", "--steps", "16"}
	out, errOut, code := run(t, append(args, "--guide", guidedGuide, "--json")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var r record
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if r.Decoder != "guided" || r.Guide == nil || r.Guide.Steps != r.NFE || r.Guide.NFE < r.NFE+1 || r.Guide.Committed != r.Decoded ||
		r.Guide.AcceptLen < 1 || r.Guide.Model != guidedGuide || r.Guide.DLMSeconds <= 0 || r.Guide.GuideSeconds <= 0 {
		t.Fatalf("generate --guide --json: %+v guide %+v", r, r.Guide)
	}
	out, errOut, code = run(t, "generate", "--model", guidedGuide, "--prompt", "Hi", "--gen-length", "16", "--json")
	var ar record
	if code != 0 || json.Unmarshal([]byte(out), &ar) != nil {
		t.Fatalf("the guide alone: exit %d: %s", code, errOut)
	}
	if !slices.Equal(r.AnswerTokenIDs, ar.AnswerTokenIDs) {
		t.Errorf("guided answer %v, the guide's greedy answer %v", r.AnswerTokenIDs, ar.AnswerTokenIDs)
	}
	_, errOut, code = run(t, append(args, "--guide", guidedGuide, "--decoder", "guided:0.5:2")...)
	if code != 0 || !strings.Contains(errOut, "decoder guided:0.5:2: guide") || !strings.Contains(errOut, "top 2 with probability ≥ 0.5") {
		t.Errorf("--decoder guided:0.5:2: exit %d: %s", code, errOut)
	}
}

// What generate, eval and bench refuse, with the reason: guided without
// --guide, --guide without a guided decoder, a guide that is not
// autoregressive or reads other token ids, another flag choosing the
// decoder, a guide for an autoregressive model.
func TestGuideRefusals(t *testing.T) {
	qwen := filepath.Join("..", "..", "model", "testdata", "tiny-qwen2")
	f32 := filepath.Join("..", "..", "model", "testdata", "tiny-f32")
	gen := []string{"generate", "--model", guidedDLM, "--prompt", "Hi", "--gen-length", "8", "--steps", "8"}
	eval := []string{"eval", "--model", guidedDLM, "--suite", "lookup", "--limit", "1", "--gen-length", "8", "--steps", "8", "--quiet"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{append(gen, "--decoder", "guided"), "--decoder guided needs --guide MODEL"},
		{append(gen, "--decoder", "threshold:0.9", "--guide", guidedGuide), "--guide is the guided decoder's"},
		{append(gen, "--guide", guidedGuide, "--threshold", "0.9"), "both choose the decoder"},
		{append(gen, "--decoder", "guided:1.5", "--guide", guidedGuide), "not in (0, 1]"},
		{append(gen, "--guide", f32), "not an autoregressive LM"},
		{append(gen, "--guide", qwen), "end-of-text token is id 258"},
		{[]string{"generate", "--model", "llada-tiny", "--prompt", "Hi", "--guide", guidedGuide}, "vocabulary has 272 tokens"},
		{[]string{"generate", "--model", guidedGuide, "--prompt", "Hi", "--guide", guidedGuide}, "--guide is a diffusion sampler's"},
		{append(eval, "--method", "none@guided"), "decoder guided needs a guide: --guide MODEL"},
		{append(eval, "--method", "none", "--guide", guidedGuide), "no method decodes with the guided decoder"},
		{[]string{"bench", "--model", guidedDLM, "--methods", "none,freecache", "--guide", guidedGuide, "--suite", "lookup", "--limit", "1", "--quiet"},
			"no method decodes with the guided decoder"},
	} {
		_, errOut, code := run(t, tc.args...)
		if code == 0 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, want an error with %q: %s", tc.args[len(tc.args)-2:], code, tc.want, errOut)
		}
	}
}

// bench runs none@guided and freecache@guided beside threshold decoding
// and reports each guided method's guide NFE, tokens per step and time in
// each model; under the deterministic rule both answer as the guide does,
// so they agree with each other.
func TestBenchGuided(t *testing.T) {
	out, errOut, code := run(t, "bench", "--model", guidedDLM, "--guide", guidedGuide, "--methods", "none@threshold:0.9,none@guided,freecache@guided,none@guided:0.0001:272",
		"--suite", "lookup", "--limit", "2", "--gen-length", "16", "--steps", "16", "--quiet", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var b struct {
		Results []struct {
			Method, Suite string
			NFE           int     `json:"nfe"`
			GuideNFE      int     `json:"guide_nfe"`
			GuidedSteps   int     `json:"guided_steps"`
			GuidedTokens  int     `json:"guided_tokens"`
			AcceptLen     float64 `json:"accept_len"`
			DLMSeconds    float64 `json:"dlm_seconds"`
			GuideSeconds  float64 `json:"guide_seconds"`
		}
	}
	if err := json.Unmarshal([]byte(out), &b); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	seen := 0
	for _, r := range b.Results {
		if r.Suite != "average" {
			continue
		}
		guided := strings.Contains(r.Method, "@guided")
		if guided != (r.GuidedSteps > 0) || guided && (r.GuidedSteps != r.NFE || r.GuideNFE <= r.NFE || r.AcceptLen < 1 ||
			r.AcceptLen != float64(r.GuidedTokens)/float64(r.GuidedSteps) || r.DLMSeconds <= 0 || r.GuideSeconds <= 0) {
			t.Errorf("%s: %+v", r.Method, r)
		}
		seen++
	}
	if seen != 4 {
		t.Errorf("%d average rows, want 4: %s", seen, out)
	}
	out, _, code = run(t, "bench", "--model", guidedDLM, "--guide", guidedGuide, "--methods", "none,none@guided",
		"--suite", "lookup", "--limit", "1", "--gen-length", "16", "--steps", "16", "--quiet")
	if code != 0 || !strings.Contains(out, "| guide NFE | tokens / step | DLM s | guide s |") {
		t.Errorf("bench's table lacks the guided columns:\n%s", out)
	}
}

// serve --guide serves none@guided: each answer is generate --guide's
// with the same guide, with the guide's shared prefix from its store
// (--cache-bytes on, the default) or not (--cache-bytes 0); the second
// request with a system message finds its full blocks stored.
func TestServeGuided(t *testing.T) {
	reqs := []struct{ system, user string }{
		{"You are a careful assistant who answers in one short line.", "Name a color."},
		{"You are a careful assistant who answers in one short line.", "Count to three."},
	}
	want := make([]string, len(reqs))
	for i, r := range reqs {
		out, errOut, code := run(t, "generate", "--model", guidedDLM, "--guide", guidedGuide, "--system", r.system, "--prompt", r.user,
			"--gen-length", "16", "--steps", "16", "--threads", "1", "--json")
		var g struct{ Answer string }
		if code != 0 || json.Unmarshal([]byte(out), &g) != nil {
			t.Fatalf("generate: exit %d: %s", code, errOut)
		}
		want[i] = g.Answer
	}
	for _, bytes := range []string{"1073741824", "0"} {
		var errOut testutil.SyncBuffer
		opts := parseServe(t, &errOut, "--model", guidedDLM, "--guide", guidedGuide, "--method", "none@guided", "--gen-length", "16", "--steps", "16",
			"--threads", "1", "--addr", "127.0.0.1:0", "--quiet", "--cache-bytes", bytes, "--store-blocks", "8")
		url, stop := startServe(t, opts, &errOut)
		if !strings.Contains(errOut.String(), "guide "+guidedGuide) {
			t.Errorf("--cache-bytes %s: the start-up lines do not name the guide:\n%s", bytes, errOut.String())
		}
		for i, r := range reqs {
			body, _ := json.Marshal(map[string]any{"model": "m", "messages": []map[string]string{{"role": "system", "content": r.system}, {"role": "user", "content": r.user}}})
			code, raw := httpDo(t, url+"/v1/chat/completions", string(body))
			var resp struct {
				Choices []struct {
					Message struct{ Content string }
				}
				Dlmcache struct {
					Guide *struct {
						NFE             int `json:"nfe"`
						PrefixTokens    int `json:"prefix_tokens"`
						PrefixHitTokens int `json:"prefix_hit_tokens"`
					}
				}
			}
			if code != 200 || json.Unmarshal(raw, &resp) != nil || len(resp.Choices) != 1 || resp.Dlmcache.Guide == nil {
				t.Fatalf("--cache-bytes %s, request %d: %d %s", bytes, i, code, raw)
			}
			if got := resp.Choices[0].Message.Content; got != want[i] {
				t.Errorf("--cache-bytes %s, request %d served %q, generate --guide %q", bytes, i, got, want[i])
			}
			g := resp.Dlmcache.Guide
			if stored := bytes != "0"; stored != (g.PrefixTokens > 0) || (stored && i == 1) != (g.PrefixHitTokens >= 8) {
				t.Errorf("--cache-bytes %s, request %d: guide %+v", bytes, i, g)
			}
		}
		_, page := httpDo(t, url+"/metrics", "")
		if !strings.Contains(string(page), "dlmcache_guided_step_tokens_bucket") || !strings.Contains(string(page), "dlmcache_guide_prefix_cache_hits_tokens_total") {
			t.Errorf("/metrics lacks the guided counters")
		}
		if err := stop(); err != nil {
			t.Error(err)
		}
	}
}

// What serve refuses at start-up, with the reason: --guide when nothing
// decodes guided, a guided method without --guide, a guide with another
// vocabulary or that is not autoregressive.
func TestServeGuideRefusals(t *testing.T) {
	f32 := filepath.Join("..", "..", "model", "testdata", "tiny-f32")
	qwen := filepath.Join("..", "..", "model", "testdata", "tiny-qwen2")
	base := []string{"--model", guidedDLM, "--threads", "1", "--addr", "127.0.0.1:0", "--quiet"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--method", "none", "--guide", guidedGuide}, "does not decode with the guided decoder"},
		{[]string{"--method", "freecache", "--guide", guidedGuide}, "does not decode with the guided decoder"},
		{[]string{"--method", "none@guided"}, "needs a guide: --guide MODEL"},
		{[]string{"--method", "none", "--decoder", "guided"}, "needs a guide: --guide MODEL"},
		{[]string{"--method", "none@guided", "--guide", f32}, "not an autoregressive LM"},
		{[]string{"--method", "none@guided", "--guide", qwen}, "end-of-text token is id 258"},
	} {
		opts := parseServe(t, io.Discard, append(slices.Clone(base), tc.args...)...)
		if err := opts.run(context.Background()); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error with %q", tc.args, err, tc.want)
		}
	}
}

// calibrate --guide searches guided settings beside the others and
// records the guide in the table (lut show prints it); --guide with no
// guided setting, and a guided setting without --guide, are refused.
func TestCalibrateGuided(t *testing.T) {
	args := []string{"calibrate", "--model", guidedDLM, "--guide", guidedGuide, "--ratios", "0.6,0.75,0.9", "--per-ratio", "2", "--quiet",
		"--gen-length", "16", "--steps", "16", "--setting", "none@threshold:0.9", "--setting", "none@guided", "--setting", "freecache@guided",
		"--agreement", "0.3", "--max-loss", "100"}
	out := filepath.Join(t.TempDir(), "cal")
	tab := calibrateTo(t, "calibrate --guide", args, out)
	if tab.Guide == nil || tab.Guide.Name != guidedGuide || tab.Guide.Fingerprint == "" || tab.Guide.Arch != "llama" {
		t.Fatalf("the table's guide: %+v", tab.Guide)
	}
	tried := map[string]bool{}
	for _, b := range tab.Bins {
		for _, c := range b.Choices {
			for _, p := range c.Tried {
				tried[p.Setting.String()] = true
			}
		}
	}
	if !tried["none@guided"] || !tried["freecache@guided"] {
		t.Errorf("settings tried: %v", tried)
	}
	if o, _, code := run(t, "lut", "show", filepath.Join(out, "table.json")); code != 0 || !strings.Contains(o, "guide "+guidedGuide+" (llama") {
		t.Errorf("lut show: exit %d:\n%s", code, o)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"calibrate", "--model", guidedDLM, "--guide", guidedGuide, "--setting", "none@threshold:0.9"}, "no --setting decodes with the guided decoder"},
		{[]string{"calibrate", "--model", guidedDLM, "--setting", "none@guided"}, "needs --guide MODEL"},
		{[]string{"calibrate", "--mode", "depth", "--model", guidedDLM, "--guide", guidedGuide}, "--guide is the methods mode's"},
	} {
		if _, errOut, code := run(t, tc.args...); code == 0 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, want an error with %q: %s", tc.args, code, tc.want, errOut)
		}
	}
}

// guidedTable writes a v3 table for the guided fixtures whose one bin
// chooses freecache@guided, calibrated with guide g.
func guidedTable(t *testing.T, g lut.ModelID) string {
	t.Helper()
	dlm := testmodel.Load(t, "tiny-llada-moe")
	tab := &lut.Table{Format: lut.Format, Model: lut.ModelID{Name: guidedDLM, NLayers: len(dlm.Blocks), Fingerprint: dlm.Fingerprint}, Tau: 1,
		Classes: []lut.Class{{Name: "all"}}, Guide: &g, Calibration: &lut.Calibration{Method: "search"},
		Bins: []lut.Bin{{Lo: 0, Hi: 1, Choices: []*lut.Choice{{Class: "all", Setting: lut.Setting{Method: "freecache", Decoder: "guided"}}}}}}
	return tempTable(t, tab)
}

// serve --lut with a table that chooses a guided setting: refused without
// --guide and with another guide than the table's, each with the reason;
// with the table's guide it serves the choice (the answer is
// freecache@guided's).
func TestServeGuidedTable(t *testing.T) {
	g := testmodel.Load(t, "tiny-llama")
	id := lut.ModelID{Name: guidedGuide, NLayers: len(g.Blocks), Fingerprint: g.Fingerprint, Arch: "llama"}
	good := guidedTable(t, id)
	other := id
	other.Fingerprint = "0123456789abcdef"
	bad := guidedTable(t, other)
	base := []string{"--model", guidedDLM, "--threads", "1", "--addr", "127.0.0.1:0", "--quiet", "--gen-length", "16", "--steps", "16"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--lut", good}, "give --guide " + guidedGuide},
		{[]string{"--lut", bad, "--guide", guidedGuide}, "fingerprint 0123456789abcdef), but the guide loaded is"},
	} {
		opts := parseServe(t, io.Discard, append(slices.Clone(base), tc.args...)...)
		if err := opts.run(context.Background()); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error with %q", tc.args, err, tc.want)
		}
	}
	answer := func(args ...string) (string, string) {
		var errOut testutil.SyncBuffer
		opts := parseServe(t, &errOut, append(slices.Clone(base), args...)...)
		url, stop := startServe(t, opts, &errOut)
		defer stop()
		body := `{"model":"m","messages":[{"role":"system","content":"You are a careful assistant."},{"role":"user","content":"Name a color."}]}`
		code, raw := httpDo(t, url+"/v1/chat/completions", body)
		var resp struct {
			Choices []struct {
				Message struct{ Content string }
			}
			Dlmcache struct{ Method string }
		}
		if code != 200 || json.Unmarshal(raw, &resp) != nil || len(resp.Choices) != 1 {
			t.Fatalf("%v: %d %s", args, code, raw)
		}
		return resp.Choices[0].Message.Content, resp.Dlmcache.Method
	}
	got, meth := answer("--lut", good, "--guide", guidedGuide)
	want, _ := answer("--method", "freecache@guided", "--guide", guidedGuide)
	if got != want || !strings.Contains(meth, "freecache@guided") {
		t.Errorf("the table's choice served %q (method %q), freecache@guided %q", got, meth, want)
	}
}

// verifyTable writes a v3 table for the guided fixtures in the regime
// 16/8/8 (the fixture's card) whose one bin chooses setting, calibrated with guide g (nil:
// none recorded).
func verifyTable(t *testing.T, g *lut.ModelID, setting lut.Setting) string {
	t.Helper()
	dlm := testmodel.Load(t, "tiny-llada-moe")
	tab := &lut.Table{Format: lut.Format, Model: lut.ModelID{Name: guidedDLM, NLayers: len(dlm.Blocks), Fingerprint: dlm.Fingerprint}, Tau: 1,
		Regime: regime.Regime{GenLength: 16, Steps: 8, BlockLength: 8}, Classes: []lut.Class{{Name: "all"}}, Guide: g, Calibration: &lut.Calibration{Method: "search"},
		Bins: []lut.Bin{{Lo: 0, Hi: 1, Choices: []*lut.Choice{{Class: "all", Setting: setting}}}}}
	return tempTable(t, tab)
}

// lut verify --guide replays held-out requests through a table whose
// choice decodes guided, with the table's guide and its prefix store as
// serve --lut --guide runs them: the report counts the guided requests,
// steps and tokens, and the second request of a shared system message
// finds the guide's blocks stored. Refused with the reason: such a table
// without --guide, with another guide than its record's, a guide that is
// not autoregressive, and --guide with a table that records none; a table
// calibrated with the guide whose choice left the guided decoder verifies
// with the guide unused, said in one line.
func TestLutVerifyGuided(t *testing.T) {
	g := testmodel.Load(t, "tiny-llama")
	id := lut.ModelID{Name: guidedGuide, NLayers: len(g.Blocks), Fingerprint: g.Fingerprint, Arch: "llama"}
	other := id
	other.Fingerprint = "0123456789abcdef"
	freeGuided := lut.Setting{Method: "freecache", Decoder: "guided"}
	threshold := lut.Setting{Method: "none", Decoder: "threshold:0.9"}
	good := verifyTable(t, &id, freeGuided)
	reqs := filepath.Join(t.TempDir(), "reqs.jsonl")
	sys := "You are a careful assistant who answers every question in one short line, plainly, without lists or preamble."
	body := `{"system":"` + sys + `","user":"Name a color."}` + "\n" + `{"system":"` + sys + `","user":"Count to three."}` + "\n"
	if err := os.WriteFile(reqs, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	base := []string{"--model", guidedDLM, "--requests", reqs, "--threads", "1", "--quiet"}
	verify := func(table string, args ...string) (string, string, int) {
		return run(t, append(append([]string{"lut", "verify", table}, base...), args...)...)
	}
	out, errOut, code := verify(good, "--guide", guidedGuide, "--json")
	if code != 0 {
		t.Fatalf("lut verify --guide: exit %d: %s", code, errOut)
	}
	var rep struct {
		Requests int
		Bins     []struct{ Methods map[string]int }
		Guide    *struct {
			Model             string
			Requests          int
			Steps, Committed  int
			NFE               int `json:"nfe"`
			PrefixHitTokens   int `json:"prefix_hit_tokens"`
			PrefixQueryTokens int `json:"prefix_query_tokens"`
		}
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if rep.Requests != 2 || len(rep.Bins) != 1 || rep.Bins[0].Methods["freecache@guided"] != 2 {
		t.Fatalf("lut verify --guide --json: %+v", rep)
	}
	if gr := rep.Guide; gr == nil || gr.Model != guidedGuide || gr.Requests != 2 || gr.Steps < 2 || gr.Committed < gr.Steps || gr.NFE <= gr.Steps ||
		gr.PrefixHitTokens < engine.GuideStoreBlocks || gr.PrefixQueryTokens <= gr.PrefixHitTokens {
		t.Errorf("lut verify --guide --json: guide %+v", rep.Guide)
	}
	if !strings.Contains(errOut, "guide "+guidedGuide+" (llama") || !strings.Contains(errOut, "block store of its own") {
		t.Errorf("lut verify --guide: stderr does not describe the guide:\n%s", errOut)
	}
	out, _, code = verify(good, "--guide", guidedGuide)
	if code != 0 || !strings.Contains(out, "freecache@guided ×2") || !strings.Contains(out, "guide "+guidedGuide+": 2 requests decoded guided") {
		t.Errorf("lut verify --guide: exit %d:\n%s", code, out)
	}
	unused := verifyTable(t, &id, threshold)
	out, errOut, code = verify(unused, "--guide", guidedGuide)
	if code != 0 || !strings.Contains(errOut, "none of its choices decodes with the guided decoder: the guide goes unused") || strings.Contains(out, "decoded guided") {
		t.Errorf("a guided calibration that chose no guided setting: exit %d: %s", code, errOut)
	}
	f32 := filepath.Join("..", "..", "model", "testdata", "tiny-f32")
	for _, tc := range []struct {
		table string
		args  []string
		want  string
	}{
		{good, nil, "give --guide " + guidedGuide},
		{verifyTable(t, &other, freeGuided), []string{"--guide", guidedGuide}, "fingerprint 0123456789abcdef), but the guide loaded is"},
		{good, []string{"--guide", f32}, "not an autoregressive LM"},
		{verifyTable(t, nil, threshold), []string{"--guide", guidedGuide}, "records no guide (calibrated without --guide)"},
	} {
		if _, errOut, code := verify(tc.table, tc.args...); code == 0 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, want an error with %q: %s", tc.args, code, tc.want, errOut)
		}
	}
}
