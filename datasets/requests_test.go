package datasets

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
)

// requestsWordCounter counts white-space-separated words, with a chat
// template that adds 3 tokens around the system message and 3 around the
// user turn.
func requestsWordCounter(system, user string) (int, int, error) {
	m := requestsWords(system) + 3
	return m, m + requestsWords(user) + 3, nil
}

// requestsWords is len(strings.Fields(s)) for ASCII white space, without
// allocating.
func requestsWords(s string) int {
	n, in := 0, false
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case ' ', '\n', '\t', '\r', '\v', '\f':
			in = false
		default:
			if !in {
				n++
			}
			in = true
		}
	}
	return n
}

func TestParseRatioBins(t *testing.T) {
	for _, tc := range []struct {
		spec string
		want []float64
		err  string
	}{
		{"0.05:0.95:0.05", []float64{0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95}, ""},
		{"0:1:0.25", []float64{0, 0.25, 0.5, 0.75, 1}, ""},
		{" 0.1 : 0.3 : 0.1 ", []float64{0.1, 0.2, 0.3}, ""},
		{"0.1,0.25,0.9", []float64{0.1, 0.25, 0.9}, ""},
		{"", nil, "empty"},
		{"0.05:0.95", nil, "2 colon-separated fields"},
		{"0.05:0.95:0.05:1", nil, "4 colon-separated fields"},
		{"a:0.95:0.05", nil, `"a" is not a number`},
		{"0.05:0.95:0", nil, "step 0 is not positive"},
		{"0.05:0.95:-0.1", nil, "not positive"},
		{"0.9:0.1:0.1", nil, "not above LO"},
		{"0.05:0.95:0.07", nil, "whole number of steps"},
		{"0:1.5:0.5", nil, "outside [0, 1]"},
		{"-0.5:0.5:0.5", nil, "outside [0, 1]"},
		{"0:1:0.0001", nil, "more than 1000"},
		{"0.5", nil, "one edge makes no bin"},
		{"0.5,0.2", nil, "not ascending"},
		{"0.5,0.5", nil, "not ascending"},
		{"0.1,NaN", nil, "not a number"},
		{"0.1,,0.2", nil, `"" is not a number`},
	} {
		got, err := ParseRatioBins(tc.spec)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseRatioBins(%q) error = %v, want %q", tc.spec, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseRatioBins(%q): %v", tc.spec, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseRatioBins(%q) = %v, want %v", tc.spec, got, tc.want)
		}
	}
}

func TestParseShard(t *testing.T) {
	for _, tc := range []struct {
		spec string
		k, n int
		ok   bool
	}{
		{"0/1", 0, 1, true}, {"3/4", 3, 4, true}, {" 1 / 2 ", 1, 2, true},
		{"4/4", 0, 0, false}, {"-1/4", 0, 0, false}, {"0/0", 0, 0, false}, {"1", 0, 0, false}, {"a/b", 0, 0, false},
	} {
		k, n, err := ParseShard(tc.spec)
		if (err == nil) != tc.ok || k != tc.k || n != tc.n {
			t.Errorf("ParseShard(%q) = %d, %d, %v; want %d, %d, ok %v", tc.spec, k, n, err, tc.k, tc.n, tc.ok)
		}
	}
}

func requestsBuiltin(t *testing.T, genLength, perBin int, seed int64) ([]Request, []UnfilledBin) {
	t.Helper()
	edges, err := ParseRatioBins("0.05:0.95:0.05")
	if err != nil {
		t.Fatal(err)
	}
	reqs, unfilled, err := SampleRequests(BuiltinSystemPrompts(), GenerateWildChatStyle(seed, 300), requestsWordCounter,
		BinOptions{Edges: edges, PerBin: perBin, GenLength: genLength, Seed: seed})
	if err != nil {
		t.Fatal(err)
	}
	return reqs, unfilled
}

func TestSampleRequestsBuiltinFillsEveryBin(t *testing.T) {
	const perBin = 6
	for _, g := range []int{16, 256} {
		t.Run(fmt.Sprint("gen", g), func(t *testing.T) {
			reqs, unfilled := requestsBuiltin(t, g, perBin, 1)
			if len(unfilled) > 0 {
				t.Fatalf("unfilled bins: %v", unfilled)
			}
			if len(reqs) != 18*perBin {
				t.Fatalf("%d requests, want %d", len(reqs), 18*perBin)
			}
			ids := map[string]bool{}
			perBinSeen := map[int]int{}
			systems := map[string]bool{}
			for i, r := range reqs {
				m, p, _ := requestsWordCounter(r.System, r.User)
				ratio := float64(m) / float64(p+g)
				if m != r.PrefixTokens || p != r.PromptTokens || r.GenLength != g || math.Abs(ratio-r.Ratio) > 1e-12 {
					t.Errorf("request %d: recorded m=%d p=%d g=%d r=%g, counted m=%d p=%d r=%g", i, r.PrefixTokens, r.PromptTokens, r.GenLength, r.Ratio, m, p, ratio)
				}
				if ratio < r.Lo || ratio >= r.Hi || math.Abs(r.Lo-(0.05+0.05*float64(r.Bin))) > 1e-9 || math.Abs(r.Hi-r.Lo-0.05) > 1e-9 {
					t.Errorf("request %d: ratio %g not in bin %d [%g, %g)", i, ratio, r.Bin, r.Lo, r.Hi)
				}
				if r.Index != perBinSeen[r.Bin] {
					t.Errorf("request %d: index %d in bin %d, want %d", i, r.Index, r.Bin, perBinSeen[r.Bin])
				}
				perBinSeen[r.Bin]++
				if ids[r.ID] || r.ID == "" {
					t.Errorf("request %d: ID %q repeats", i, r.ID)
				}
				ids[r.ID] = true
				if r.ID != requestID(r) {
					t.Errorf("request %d: ID %q is not the hash of its content", i, r.ID)
				}
				if strings.TrimSpace(r.User) == "" || r.UserSource == "" || r.SystemName == "" {
					t.Errorf("request %d: empty user, source or system name: %+v", i, r)
				}
				systems[r.SystemName] = true
			}
			if len(systems) < 4 {
				t.Errorf("only %d distinct system messages used: %v", len(systems), systems)
			}
		})
	}
}

func TestSampleRequestsDeterministic(t *testing.T) {
	a, _ := requestsBuiltin(t, 16, 3, 7)
	b, _ := requestsBuiltin(t, 16, 3, 7)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("same arguments gave different requests")
	}
	c, _ := requestsBuiltin(t, 16, 3, 8)
	same := 0
	for i := range a {
		if a[i].ID == c[i].ID {
			same++
		}
	}
	if same > len(a)/4 {
		t.Errorf("seeds 7 and 8 share %d of %d requests", same, len(a))
	}
	// A larger N extends a smaller one, bin by bin.
	d, _ := requestsBuiltin(t, 16, 5, 7)
	var prefix []Request
	for _, r := range d {
		if r.Index < 3 {
			prefix = append(prefix, r)
		}
	}
	if !reflect.DeepEqual(a, prefix) {
		t.Error("the first 3 requests per bin of N=5 differ from N=3")
	}
}

func TestSampleRequestsUnfilled(t *testing.T) {
	short := []SystemPrompt{{Name: "tiny", Text: "Be brief."}}
	users := []Prompt{{ID: "u", Text: "hello there"}}
	edges := []float64{0.1, 0.2, 0.5, 0.9}
	reqs, unfilled, err := SampleRequests(short, users, requestsWordCounter, BinOptions{Edges: edges, PerBin: 2, GenLength: 16})
	if err != nil {
		t.Fatal(err)
	}
	// m = 5: "hello there" gives r = 5/(10+16) ≈ 0.19, its first word
	// 5/(9+16) = 0.2, and an empty user turn 5/24 ≈ 0.21, so [0.5, 0.9) is out
	// of reach, and each of the others gets one distinct request.
	want := []UnfilledBin{
		{Bin: 0, Lo: 0.1, Hi: 0.2, Found: 1, Want: 2},
		{Bin: 1, Lo: 0.2, Hi: 0.5, Found: 1, Want: 2},
		{Bin: 2, Lo: 0.5, Hi: 0.9, Found: 0, Want: 2},
	}
	if !reflect.DeepEqual(unfilled, want) {
		t.Errorf("unfilled = %v, want %v", unfilled, want)
	}
	if len(reqs) != 2 || reqs[0].User != "hello there" || reqs[1].User != "hello" || reqs[1].UserSource != "u[:1]" {
		t.Errorf("requests = %+v", reqs)
	}
	if s := want[2].String(); s != "bin 2 [0.5, 0.9): 0 of 2 requests" {
		t.Errorf("String() = %q", s)
	}
}

func TestSampleRequestsTrimsLongSystems(t *testing.T) {
	// With only the policy handbook, a mid ratio at gen length 256 needs
	// either a long user turn or a trimmed handbook; a 100-token cap on the
	// user turn forces the trimming.
	var policy []SystemPrompt
	for _, s := range BuiltinSystemPrompts() {
		if s.Name == "policy" {
			policy = append(policy, s)
		}
	}
	reqs, unfilled, err := SampleRequests(policy, GenerateWildChatStyle(3, 100), requestsWordCounter,
		BinOptions{Edges: []float64{0.3, 0.35}, PerBin: 3, GenLength: 256, MaxUserTokens: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(unfilled) > 0 {
		t.Fatalf("unfilled: %v", unfilled)
	}
	for _, r := range reqs {
		if !strings.HasPrefix(r.SystemName, "policy[:") || !strings.HasPrefix(policy[0].Text, r.System) {
			t.Errorf("system %q is not a trimmed policy", r.SystemName)
		}
		if u := r.PromptTokens - r.PrefixTokens - 3; u > 100 {
			t.Errorf("user turn of %d tokens, cap 100", u)
		}
	}
}

func TestSampleRequestsErrors(t *testing.T) {
	sys := BuiltinSystemPrompts()
	users := GenerateWildChatStyle(1, 10)
	edges := []float64{0.1, 0.5}
	boom := errors.New("boom")
	failing := func(string, string) (int, int, error) { return 0, 0, boom }
	for _, tc := range []struct {
		name  string
		sys   []SystemPrompt
		users []Prompt
		count TokenCounter
		opt   BinOptions
		want  string
	}{
		{"no systems", nil, users, requestsWordCounter, BinOptions{Edges: edges, PerBin: 1}, "no system prompts"},
		{"no users", sys, nil, requestsWordCounter, BinOptions{Edges: edges, PerBin: 1}, "no user prompts"},
		{"no counter", sys, users, nil, BinOptions{Edges: edges, PerBin: 1}, "no token counter"},
		{"no bins", sys, users, requestsWordCounter, BinOptions{Edges: []float64{0.1}, PerBin: 1}, "make no bin"},
		{"descending", sys, users, requestsWordCounter, BinOptions{Edges: []float64{0.5, 0.1}, PerBin: 1}, "not ascending"},
		{"zero per bin", sys, users, requestsWordCounter, BinOptions{Edges: edges}, "at least 1"},
		{"negative gen", sys, users, requestsWordCounter, BinOptions{Edges: edges, PerBin: 1, GenLength: -1}, "negative"},
		{"counter fails", sys, users, failing, BinOptions{Edges: edges, PerBin: 1}, "boom"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := SampleRequests(tc.sys, tc.users, tc.count, tc.opt)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestShardRequests(t *testing.T) {
	reqs, _ := requestsBuiltin(t, 16, 2, 5)
	for _, n := range []int{1, 2, 3, 7, len(reqs) + 3} {
		seen := map[string]int{}
		total := 0
		for k := range n {
			a, err := ShardRequests(reqs, k, n)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := ShardRequests(reqs, k, n)
			if !reflect.DeepEqual(a, b) {
				t.Errorf("shard %d/%d not deterministic", k, n)
			}
			if d := len(a) - len(reqs)/n; d < 0 || d > 1 {
				t.Errorf("shard %d/%d has %d of %d requests", k, n, len(a), len(reqs))
			}
			for _, r := range a {
				seen[r.ID]++
			}
			total += len(a)
		}
		if total != len(reqs) || len(seen) != len(reqs) {
			t.Errorf("n=%d: shards hold %d requests, %d distinct; want %d", n, total, len(seen), len(reqs))
		}
		for _, r := range reqs {
			if seen[r.ID] != 1 {
				t.Errorf("n=%d: request %s in %d shards", n, r.ID, seen[r.ID])
			}
		}
	}
	for _, kn := range [][2]int{{0, 0}, {-1, 2}, {2, 2}} {
		if _, err := ShardRequests(reqs, kn[0], kn[1]); err == nil {
			t.Errorf("ShardRequests(%d, %d): no error", kn[0], kn[1])
		}
	}
}

func TestRequestRatio(t *testing.T) {
	for _, tc := range []struct {
		m, p, g int
		want    float64
	}{{10, 20, 20, 0.25}, {0, 5, 5, 0}, {3, 0, 0, 0}, {9, 9, 1, 0.9}} {
		if got := RequestRatio(tc.m, tc.p, tc.g); got != tc.want {
			t.Errorf("RequestRatio(%d, %d, %d) = %g, want %g", tc.m, tc.p, tc.g, got, tc.want)
		}
	}
}

func TestLoadUserPrompts(t *testing.T) {
	dir := t.TempDir()
	path := writeWildChatTest(t, dir, "w.parquet", wildchatTestRows())
	ps, err := LoadUserPrompts([]string{"builtin", path}, WildChatFilter{Language: "English"}, 4, 5)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 5+3 || ps[0].Source != "generated" || ps[5].ID != "h0" {
		t.Errorf("prompts: %d, first %+v, sixth %+v", len(ps), ps[0], ps[5])
	}
	if !reflect.DeepEqual(ps[:5], GenerateWildChatStyle(4, 5)) {
		t.Error("builtin prompts differ from GenerateWildChatStyle")
	}
	for _, tc := range []struct {
		args []string
		n    int
		want string
	}{
		{nil, 5, "no user prompt data"},
		{[]string{"builtin"}, 0, "at least 1"},
		{[]string{dir + "/missing.parquet"}, 5, "missing.parquet"},
	} {
		if _, err := LoadUserPrompts(tc.args, WildChatFilter{}, 1, tc.n); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("LoadUserPrompts(%v) error = %v, want %q", tc.args, err, tc.want)
		}
	}
}

func TestSampleRequestsMaxTokens(t *testing.T) {
	edges, _ := ParseRatioBins("0.05:0.95:0.15")
	const g, maxTok = 16, 900
	reqs, unfilled, err := SampleRequests(BuiltinSystemPrompts(), GenerateWildChatStyle(3, 300), requestsWordCounter,
		BinOptions{Edges: edges, PerBin: 4, GenLength: g, Seed: 3, MaxTokens: maxTok})
	if err != nil {
		t.Fatal(err)
	}
	if len(unfilled) > 0 {
		t.Errorf("unfilled bins under a %d-token bound: %v", maxTok, unfilled)
	}
	for _, r := range reqs {
		if r.PromptTokens+g > maxTok {
			t.Errorf("request %s: %d tokens > bound %d", r.ID, r.PromptTokens+g, maxTok)
		}
	}
	if _, _, err := SampleRequests(BuiltinSystemPrompts(), GenerateWildChatStyle(3, 10), requestsWordCounter,
		BinOptions{Edges: edges, PerBin: 1, GenLength: g, MaxTokens: -1}); err == nil {
		t.Error("negative MaxTokens: no error")
	}
}
