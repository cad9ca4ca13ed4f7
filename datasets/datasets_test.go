package datasets

import (
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// blockOf returns the data block of a generated system message: the
// paragraph that starts with a suite's header.
func blockOf(t *testing.T, system string) string {
	t.Helper()
	headers := []string{"Table:", "Registry:", "Codes:", "Constants:", "Code:", "Route:", "Order:", "Queue:"}
	var found []string
	for _, p := range strings.Split(system, "\n\n") {
		for _, h := range headers {
			if strings.HasPrefix(p, h) {
				found = append(found, p)
			}
		}
	}
	if len(found) != 1 {
		t.Fatalf("system message has %d data blocks, want 1:\n%s", len(found), system)
	}
	return found[0]
}

// allOptions are the option sets the tests sweep.
func allOptions() []GenOptions {
	out := []GenOptions{DefaultOptions(), {MinRows: 1, MaxRows: 1, MinFiller: 0, MaxFiller: 0}}
	for l := range NumLevels {
		out = append(out, Level(l))
	}
	return out
}

func TestGenerateDeterministic(t *testing.T) {
	for _, suite := range Suites() {
		for _, split := range []Split{Train, Eval} {
			a := Generate(suite, split, 7, 20, DefaultOptions())
			b := Generate(suite, split, 7, 20, DefaultOptions())
			if !reflect.DeepEqual(a, b) {
				t.Errorf("%s/%s: two runs with the same seed differ", suite, split)
			}
			if c := Generate(suite, split, 7, 5, DefaultOptions()); !reflect.DeepEqual(a[:5], c) {
				t.Errorf("%s/%s: Generate(n=5) is not the prefix of Generate(n=20)", suite, split)
			}
			d := Generate(suite, split, 8, 20, DefaultOptions())
			same := 0
			for i := range a {
				if a[i].System == d[i].System {
					same++
				}
			}
			if same > 0 {
				t.Errorf("%s/%s: seeds 7 and 8 share %d of 20 system messages", suite, split, same)
			}
			ids := map[string]bool{}
			for _, s := range a {
				if s.Suite != suite {
					t.Errorf("%s: sample has suite %q", suite, s.Suite)
				}
				if ids[s.ID] {
					t.Errorf("%s: duplicate ID %q", suite, s.ID)
				}
				ids[s.ID] = true
			}
		}
	}
}

// TestGoldenSample pins one sample so that a change of the generators
// without a SuiteVersion bump fails.
func TestGoldenSample(t *testing.T) {
	if SuiteVersion != 6 {
		t.Skip("golden sample belongs to SuiteVersion 6; update it with the version")
	}
	s := Generate("arithmetic", Eval, 1, 1, Level(0))[0]
	want := Sample{
		Suite:  "arithmetic",
		User:   "Add 3 to Y.",
		Answer: "3 + 3 = 6",
		ID:     "arithmetic/eval/v6/s1/0",
	}
	got := s
	got.System = ""
	if !reflect.DeepEqual(got, want) {
		t.Errorf("golden sample: got %+v, want %+v", got, want)
	}
	if !strings.Contains(s.System, "\nlet Y = 3\n") {
		t.Errorf("golden sample: system message lost \"let Y = 3\":\n%s", s.System)
	}
}

func TestSplitsDisjoint(t *testing.T) {
	for _, suite := range Suites() {
		trainBlocks, trainSystems := map[string]bool{}, map[string]bool{}
		for seed := int64(0); seed < 3; seed++ {
			for _, opt := range allOptions() {
				for _, s := range Generate(suite, Train, seed, 40, opt) {
					b := blockOf(t, s.System)
					if splitOf(suite, b) != Train {
						t.Fatalf("%s: train sample %s has an eval data block", suite, s.ID)
					}
					trainBlocks[b], trainSystems[s.System] = true, true
				}
			}
		}
		for seed := int64(0); seed < 3; seed++ {
			for _, opt := range allOptions() {
				for _, s := range Generate(suite, Eval, seed, 40, opt) {
					b := blockOf(t, s.System)
					if splitOf(suite, b) != Eval || trainBlocks[b] || trainSystems[s.System] {
						t.Fatalf("%s: eval sample %s shares its data block with training", suite, s.ID)
					}
				}
			}
		}
	}
}

func TestAnswersSolvedFromText(t *testing.T) {
	for _, suite := range Suites() {
		for _, split := range []Split{Train, Eval} {
			for _, opt := range allOptions() {
				for _, s := range Generate(suite, split, 3, 60, opt) {
					got, err := Solve(suite, s.System, s.User)
					if err != nil {
						t.Fatalf("%s: Solve: %v", s.ID, err)
					}
					if got != s.Answer {
						t.Fatalf("%s: Solve = %q, sample answer %q", s.ID, got, s.Answer)
					}
				}
			}
		}
	}
}

// TestAnswerDependsOnSystem pairs each question with another sample's
// system message: the answer must change (or the question become
// unanswerable) in most cases, so no suite can be solved without its prefix.
func TestAnswerDependsOnSystem(t *testing.T) {
	const n = 200
	for _, suite := range Suites() {
		xs := Generate(suite, Eval, 11, n, DefaultOptions())
		same := 0
		for i := range xs {
			j := (i + 1) % n
			if got, err := Solve(suite, xs[j].System, xs[i].User); err == nil && got == xs[i].Answer {
				same++
			}
		}
		if same > n/20 {
			t.Errorf("%s: %d of %d questions keep their answer under another system message", suite, same, n)
		}
	}
}

// maxTargetTokens is the longest target a suite may have, in estimated
// tokens: 8, or for the long-answer suite 3 per name (the estimate splits
// some names in two; TestAnswersSingleTokens counts the real tokens).
func maxTargetTokens(suite string) int {
	if suite == "span" {
		return 3 * spanMax
	}
	return 8
}

func TestAnswersShortAndCheckable(t *testing.T) {
	for _, suite := range Suites() {
		for _, s := range Generate(suite, Train, 5, 200, DefaultOptions()) {
			if n, most := EstimateTokens(s.Target()), maxTargetTokens(suite); n > most {
				t.Errorf("%s: target %q estimates %d tokens, want ≤ %d", s.ID, s.Target(), n, most)
			}
			for _, out := range []string{
				s.Target(),
				s.Target() + "<|endoftext|><|endoftext|>",
				" " + s.Target() + " <|eot_id|>",
			} {
				if !CheckAnswer(suite, out, s.Answer) {
					t.Errorf("%s: CheckAnswer(%q, %q) = false", s.ID, out, s.Answer)
				}
			}
			for _, out := range []string{s.Answer, s.Target() + "x", "## x" + s.Answer, s.Target() + " " + s.Answer} {
				if CheckAnswer(suite, out, s.Answer) {
					t.Errorf("%s: CheckAnswer(%q, %q) = true", s.ID, out, s.Answer)
				}
			}
		}
	}
}

func TestExtractAnswer(t *testing.T) {
	for _, tc := range []struct {
		text, want string
		ok         bool
	}{
		{"## tomer", "tomer", true},
		{"##tomer<|endoftext|>", "tomer", true},
		{"  ##  m q b  <|eot_id|>junk", "m q b", true},
		{"## 21<|endoftext|>## 22", "21", true},
		{"reasoning first ## 7", "7", true},
		{"## a ## b", "a ## b", true},
		{"##", "", true},
		{"no marker", "", false},
		{"# 5", "", false},
		{"", "", false},
	} {
		got, ok := ExtractAnswer(tc.text)
		if got != tc.want || ok != tc.ok {
			t.Errorf("ExtractAnswer(%q) = %q, %v; want %q, %v", tc.text, got, ok, tc.want, tc.ok)
		}
	}
}

// templateTokens approximates the chat template around the system message
// (BOS, header, eot) and around the user turn (two headers, eot).
const (
	templatePrefix = 6
	templateUser   = 9
)

func TestRatioRange(t *testing.T) {
	const genLength = 16
	for _, suite := range Suites() {
		var lo, hi float64 = 1, 0
		for _, s := range Generate(suite, Eval, 2, 300, DefaultOptions()) {
			m := templatePrefix + EstimateTokens(s.System)
			prompt := m + templateUser + EstimateTokens(s.User)
			r := Ratio(m, prompt, genLength)
			lo, hi = min(lo, r), max(hi, r)
		}
		if lo < 0.75 || hi > 0.95 {
			t.Errorf("%s: DefaultOptions gives r in [%.3f, %.3f], want inside [0.75, 0.95]", suite, lo, hi)
		}
		var short float64 = 1
		for _, s := range Generate(suite, Train, 2, 300, Level(0)) {
			m := templatePrefix + EstimateTokens(s.System)
			short = min(short, Ratio(m, m+templateUser+EstimateTokens(s.User), genLength))
		}
		if short > 0.75 {
			t.Errorf("%s: Level(0) never goes below r = %.3f, want some requests under 0.75", suite, short)
		}
	}
}

func TestFillerLength(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, want := range []int{0, 5, 40, 120, 300, 5000} {
		for range 20 {
			got := 0
			for _, s := range fillerSentences(r, want) {
				got += EstimateTokens(" " + s)
			}
			if got > want+fillerSlack || (want > 60 && got < want-30) {
				t.Errorf("filler for %d tokens has %d", want, got)
			}
		}
	}
}

func TestNamesAreDistinctAndNotReserved(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	ws := distinctWords(r, len(names), nil)
	if len(names) < 150 {
		t.Errorf("only %d names in the pool", len(names))
	}
	seen := map[string]bool{}
	for _, w := range ws {
		if reservedWords[w] {
			t.Fatalf("name %q is a reserved word", w)
		}
		if seen[w] {
			t.Fatalf("name %q drawn twice", w)
		}
		seen[w] = true
	}
	defer func() {
		if recover() == nil {
			t.Errorf("distinctWords asked for more names than the pool has did not panic")
		}
	}()
	distinctWords(r, len(names)+1, nil)
}

func TestReservedWords(t *testing.T) {
	for _, w := range []string{"code", "the", "license", "which", "guest"} {
		if !reservedWords[w] {
			t.Errorf("%q is not reserved", w)
		}
	}
}

func TestEstimateTokens(t *testing.T) {
	for _, tc := range []struct {
		s    string
		want int
	}{
		{"", 0},
		{"a", 1},
		{" a b c", 3},
		{"## 21", 2},
		{"let X = 17", 4},
		{"hello  world", 3},
		{"one.\n\ntwo", 4},
		{"internationalization", 3},
		{"x ", 2},
	} {
		if got := EstimateTokens(tc.s); got != tc.want {
			t.Errorf("EstimateTokens(%q) = %d, want %d", tc.s, got, tc.want)
		}
	}
}

func TestValidateRefusesUnknownSuitesAndBadOptions(t *testing.T) {
	for _, tc := range []struct {
		suite string
		opt   GenOptions
		ok    bool
	}{
		{"lookup", DefaultOptions(), true},
		{"rule", GenOptions{MinRows: 30, MaxRows: 40}, true},
		{"nope", DefaultOptions(), false},
		{"lookup", GenOptions{}, false},
		{"lookup", GenOptions{MinRows: 4, MaxRows: 3}, false},
		{"lookup", GenOptions{MinRows: 1, MaxRows: 1, MinFiller: -1}, false},
		{"lookup", GenOptions{MinRows: 1, MaxRows: 1, MinFiller: 5, MaxFiller: 4}, false},
	} {
		if err := Validate(tc.suite, tc.opt); (err == nil) != tc.ok {
			t.Errorf("Validate(%q, %+v) = %v, want ok %v", tc.suite, tc.opt, err, tc.ok)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("Generate with an unknown suite did not panic")
		}
	}()
	Generate("nope", Train, 1, 1, DefaultOptions())
}

func TestRowsHonoured(t *testing.T) {
	for _, tc := range []struct {
		suite string
		rows  int
		count func(block string) int
	}{
		{"lookup", 12, func(b string) int { return strings.Count(b, " = ") }},
		{"arithmetic", 30, func(b string) int { return strings.Count(b, "let ") }}, // capped at 24
		{"rule", 30, func(b string) int { return strings.Count(b, " -> ") }},       // capped at 24
		{"sequence", 9, func(b string) int { return strings.Count(b, ",") + 1 }},
	} {
		want := tc.rows
		switch tc.suite {
		case "arithmetic":
			want = len(arithNames)
		case "rule":
			want = len(ruleCodes)
		}
		for _, s := range Generate(tc.suite, Train, 1, 10, GenOptions{MinRows: tc.rows, MaxRows: tc.rows}) {
			if got := tc.count(blockOf(t, s.System)); got != want {
				t.Errorf("%s: %d rows, want %d", s.ID, got, want)
			}
		}
	}
	if !slices.Equal(Suites(), []string{"lookup", "arithmetic", "rule", "sequence", "span"}) {
		t.Errorf("Suites() = %v", Suites())
	}
}
