package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// runIn executes the command line with stdin as its input and returns
// stdout, stderr and the exit code.
func runIn(t *testing.T, stdin string, args ...string) (string, string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := execute(context.Background(), args, strings.NewReader(stdin), &out, &errOut)
	return out.String(), errOut.String(), code
}

// run executes the command line with no input and returns stdout, stderr
// and the exit code.
func run(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	return runIn(t, "", args...)
}

func TestVersionReportsBackendAndGEMM(t *testing.T) {
	out, _, code := run(t, "version", "--json")
	var v versionInfo
	if code != 0 || json.Unmarshal([]byte(out), &v) != nil {
		t.Fatalf("version --json: exit %d: %s", code, out)
	}
	if v.Backend != "cpu" || !strings.Contains(v.BLAS, "kernel") || v.Go == "" || !strings.Contains(v.GEMM, "OpenBLAS") {
		t.Errorf("version %+v", v)
	}
	if out, _, _ := run(t, "version"); !strings.HasPrefix(out, "dlmcache ") || !strings.Contains(out, "blas") {
		t.Errorf("version:\n%s", out)
	}
}

func TestFlagsCompleteTheirValues(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"eval", "--method", ""}, "bicache+block"},
		{[]string{"serve", "--deep-source", ""}, "request"},
		{[]string{"bench", "--suite", ""}, "span"},
		{[]string{"lut", "build", "--similarity", ""}, "kv-row-min"},
	} {
		out, _, code := run(t, append([]string{"__complete"}, tc.args...)...)
		lines := strings.Split(out, "\n")
		if code != 0 || !slices.Contains(lines, tc.want) {
			t.Errorf("completing %v: exit %d, %q lacks %q", tc.args, code, out, tc.want)
		}
	}
}

// generate reads the system message or the prompt from standard input.
func TestGenerateReadsStdin(t *testing.T) {
	dir := t.TempDir()
	sysFile := filepath.Join(dir, "sys.txt")
	os.WriteFile(sysFile, []byte("Be brief.\n"), 0o644)
	fromFile, errOut, code := run(t, "generate", "--model", serveFixture, "--system", "@"+sysFile, "--prompt", "Hi", "--json")
	if code != 0 {
		t.Fatalf("generate @FILE: %s", errOut)
	}
	fromStdin, errOut, code := runIn(t, "Be brief.\n", "generate", "--model", serveFixture, "--system", "@-", "--prompt", "Hi", "--json")
	if code != 0 {
		t.Fatalf("generate @-: %s", errOut)
	}
	type gen struct {
		Answer       string `json:"answer"`
		PromptTokens int    `json:"prompt_tokens"`
		PrefixTokens int    `json:"prefix_tokens"`
	}
	answer := func(s string) gen {
		var r gen
		if err := json.Unmarshal([]byte(s), &r); err != nil || r.PromptTokens == 0 {
			t.Fatalf("%v: %s", err, s)
		}
		return r
	}
	if answer(fromFile) != answer(fromStdin) {
		t.Errorf("--system @- gave %s, @FILE %s", fromStdin, fromFile)
	}
	promptStdin, errOut, code := runIn(t, "Hi\n", "generate", "--model", serveFixture, "--system", "@"+sysFile, "--prompt", "@-", "--json")
	if code != 0 || answer(promptStdin) != answer(fromFile) {
		t.Errorf("--prompt @-: exit %d %s %s", code, errOut, promptStdin)
	}
	if _, errOut, code := runIn(t, "x", "generate", "--model", serveFixture, "--system", "@-", "--prompt", "@-"); code == 0 || !strings.Contains(errOut, "standard input") {
		t.Errorf("both @-: exit %d %s", code, errOut)
	}
}

// bench --turns --wildchat: chat conversations beside the lookup ones,
// unscored, every method's answers compared with none's, in the table and
// in bench.json.
func TestBenchComparesChatAnswersWithNone(t *testing.T) {
	dir := t.TempDir()
	out, errOut, code := run(t, "bench", "--model", serveFixture, "--suite", "lookup", "--limit", "1", "--turns", "2", "--wildchat", "builtin",
		"--max-conversation-chars", "1500", "--methods", "none,prefix-all", "--gen-length", "8", "--steps", "4", "--quiet", "--out", dir)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"| prefix-all | wildchat turn 2 | 1 | n/a |", "| none | lookup turn 1 | 1 |", "= none"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "bench.json"))
	if err != nil {
		t.Fatal(err)
	}
	var js struct {
		Results []struct {
			Method, Suite string
			Unscored      bool
			AgreeNone     *float64 `json:"agree_none"`
		}
	}
	if err := json.Unmarshal(b, &js); err != nil {
		t.Fatal(err)
	}
	agreed := 0
	for _, r := range js.Results {
		if strings.HasPrefix(r.Suite, "wildchat") != r.Unscored {
			t.Errorf("%s %s: unscored %v", r.Method, r.Suite, r.Unscored)
		}
		if (r.Method == "none") != (r.AgreeNone == nil) {
			t.Errorf("%s %s: agreement %v", r.Method, r.Suite, r.AgreeNone)
		}
		if r.AgreeNone != nil {
			agreed++
		}
	}
	if agreed != 5 { // prefix-all: 2 lookup turns, 2 chat turns, the average
		t.Errorf("%d rows with an agreement, want 5:\n%s", agreed, b)
	}
	for _, bad := range [][]string{{"--wildchat", "builtin"}, {"--turns", "2", "--wildchat", filepath.Join(dir, "missing.parquet")}} {
		if _, errOut, code := run(t, append([]string{"bench", "--model", serveFixture, "--suite", "lookup", "--limit", "1", "--quiet"}, bad...)...); code == 0 || !strings.Contains(errOut, "--wildchat") {
			t.Errorf("%v: exit %d: %s", bad, code, errOut)
		}
	}
}

// generate on an autoregressive model (model/testdata/tiny-llama, the
// trained guide's layout) decodes token by token: greedy, the same answer
// as the model's own Generate, the regime said on stderr; sampled with
// --temperature; the diffusion sampler's flags refused by name.
func TestGenerateAutoregressive(t *testing.T) {
	fx := filepath.Join("..", "..", "model", "testdata", "tiny-llama")
	out, errOut, code := run(t, "generate", "--model", fx, "--prompt", "Hi", "--gen-length", "12", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var r struct {
		Arch, Decoder  string
		NFE            int     `json:"nfe"`
		Decoded, Steps int     //
		BlockLength    int     `json:"block_length"`
		RowsComputed   int     `json:"rows_computed"`
		PromptTokens   int     `json:"prompt_tokens"`
		AnswerTokenIDs []int   `json:"answer_token_ids"`
		FLOPs          float64 `json:"flops"`
		Answer         string  `json:"answer"`
		AnswerBytes    []byte  `json:"answer_bytes"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	// answer_bytes: the answer's bytes, which "answer" holds as JSON text
	// (each byte that is not UTF-8 one U+FFFD).
	var text strings.Builder
	for b := r.AnswerBytes; len(b) > 0; {
		c, n := utf8.DecodeRune(b)
		text.WriteRune(c)
		b = b[n:]
	}
	if len(r.AnswerBytes) == 0 || text.String() != r.Answer {
		t.Errorf("answer_bytes %q, answer %q: want the answer's bytes", r.AnswerBytes, r.Answer)
	}
	if !(r.FLOPs > 0) {
		t.Errorf("flops %v: want the counted FLOPs", r.FLOPs)
	}
	if r.Arch != "llama" || r.Decoder != "autoregressive" || r.NFE != r.Decoded || r.BlockLength != 1 || len(r.AnswerTokenIDs) != 12 ||
		r.RowsComputed != 2*(r.PromptTokens+r.Decoded-1) {
		t.Errorf("generate --json: %+v", r)
	}
	_, errOut, code = run(t, "generate", "--model", fx, "--prompt", "Hi", "--gen-length", "12")
	if code != 0 || !strings.Contains(errOut, "autoregressive: up to 12 tokens, one forward each (greedy)") {
		t.Errorf("exit %d, stderr lacks the regime line:\n%s", code, errOut)
	}
	if _, errOut, code := run(t, "generate", "--model", fx, "--prompt", "Hi", "--temperature", "0.8", "--seed", "3"); code != 0 || !strings.Contains(errOut, "sampled at temperature 0.8") {
		t.Errorf("--temperature: exit %d: %s", code, errOut)
	}
	for _, flag := range [][]string{{"--threshold", "0.9"}, {"--remasking", "random"}, {"--cfg", "1"}, {"--steps", "4"}} {
		_, errOut, code := run(t, append([]string{"generate", "--model", fx, "--prompt", "Hi"}, flag...)...)
		if code == 0 || !strings.Contains(errOut, flag[0]) || !strings.Contains(errOut, "autoregressive") {
			t.Errorf("%v: exit %d, want a refusal naming the flag: %s", flag, code, errOut)
		}
	}
}
