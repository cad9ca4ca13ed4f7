package datasets

import (
	"encoding/csv"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"
)

// benchWrite writes text to dir/name and returns the path.
func benchWrite(t *testing.T, dir, name, text string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// benchJSONL writes one JSON object per line.
func benchJSONL(t *testing.T, dir, name string, recs ...any) string {
	t.Helper()
	var b strings.Builder
	for _, r := range recs {
		data, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(data)
		b.WriteByte('\n')
	}
	return benchWrite(t, dir, name, b.String())
}

func benchLoad(t *testing.T, kind, path string, limit int) []Sample {
	t.Helper()
	s, err := LoadBenchmark(kind, path, limit)
	if err != nil {
		t.Fatalf("LoadBenchmark(%s, %s, %d): %v", kind, filepath.Base(path), limit, err)
	}
	return s
}

func benchField3(ss []Sample, f func(Sample) string) []string {
	var out []string
	for _, s := range ss {
		out = append(out, f(s))
	}
	return out
}

func benchIDs(ss []Sample) []string { return benchField3(ss, func(s Sample) string { return s.ID }) }
func benchAnswers(ss []Sample) []string {
	return benchField3(ss, func(s Sample) string { return s.Answer })
}

// benchCheckShared checks what every sample of a benchmark has in common.
func benchCheckShared(t *testing.T, kind string, ss []Sample) {
	t.Helper()
	for _, s := range ss {
		if s.Suite != kind {
			t.Errorf("%s: Suite %q, want %q", s.ID, s.Suite, kind)
		}
		if s.System != ss[0].System {
			t.Errorf("%s: System differs from the first sample's; the prefix must be shared", s.ID)
		}
		if !strings.Contains(s.System, "## ") || strings.Count(s.System, "Example ") < 3 {
			t.Errorf("%s: System lacks the ## rule or the worked examples", s.ID)
		}
		if !strings.HasPrefix(s.ID, kind+"/") {
			t.Errorf("ID %q does not start with %s/", s.ID, kind)
		}
		// The reference answer must pass the checker in the trained form.
		if !CheckBenchmarkAnswer(kind, "reasoning...\n"+s.Target(), s.Answer) {
			t.Errorf("%s: CheckBenchmarkAnswer rejects its own target %q", s.ID, s.Target())
		}
	}
}

func TestLoadBenchmarkGSM8K(t *testing.T) {
	dir := t.TempDir()
	type row struct {
		Question string `json:"question" parquet:"question"`
		Answer   string `json:"answer" parquet:"answer"`
	}
	p := benchWrite(t, dir, "test.jsonl", ""+
		`{"question": "Ann has 3 apples and buys 4 more. How many?", "answer": "3 + 4 = <<3+4=7>>7\n#### 7"}`+"\n"+
		`{"question": "A car costs $1,200 and a bike $34. Total?", "answer": "1200+34=<<1200+34=1234>>1234\n#### 1,234"}`+"\n"+
		"\n"+
		`{"question": "  Spaces around?  ", "answer": "steps\n####  -5 "}`+"\n")
	got := benchLoad(t, BenchGSM8K, p, 0)
	benchCheckShared(t, BenchGSM8K, got)
	if want := []string{"gsm8k/1", "gsm8k/2", "gsm8k/4"}; !reflect.DeepEqual(benchIDs(got), want) {
		t.Errorf("IDs %q, want %q (line numbers, blank line skipped)", benchIDs(got), want)
	}
	if want := []string{"7", "1234", "-5"}; !reflect.DeepEqual(benchAnswers(got), want) {
		t.Errorf("answers %q, want %q", benchAnswers(got), want)
	}
	if got[2].User != "Spaces around?" {
		t.Errorf("User %q, want the trimmed question", got[2].User)
	}
	if got := benchLoad(t, BenchGSM8K, p, 2); len(got) != 2 || got[1].ID != "gsm8k/2" {
		t.Errorf("limit 2: %q", benchIDs(got))
	}

	// The same rows as a parquet file (as Hugging Face ships GSM8K).
	pq := benchParquet(t, dir, "test.parquet", []row{
		{"Ann has 3 apples and buys 4 more. How many?", "3 + 4 = <<3+4=7>>7\n#### 7"},
		{"A car costs $1,200 and a bike $34. Total?", "1200+34=<<1200+34=1234>>1234\n#### 1,234"},
	})
	gotPQ := benchLoad(t, BenchGSM8K, pq, 0)
	if want := []string{"gsm8k/1", "gsm8k/2"}; !reflect.DeepEqual(benchIDs(gotPQ), want) {
		t.Errorf("parquet IDs %q, want %q", benchIDs(gotPQ), want)
	}
	for i := range gotPQ {
		if !reflect.DeepEqual(gotPQ[i], got[i]) {
			t.Errorf("parquet sample %d = %+v, JSONL gives %+v", i, gotPQ[i], got[i])
		}
	}
}

// The Hugging Face ARC layout, as allenai/ai2_arc's parquet files have it.
type benchARCHFRow struct {
	ID       string `parquet:"id" json:"id"`
	Question string `parquet:"question" json:"question"`
	Choices  struct {
		Text  []string `parquet:"text,list" json:"text"`
		Label []string `parquet:"label,list" json:"label"`
	} `parquet:"choices" json:"choices"`
	AnswerKey string `parquet:"answerKey" json:"answerKey"`
}

func benchParquet[T any](t *testing.T, dir, name string, rows []T) string {
	t.Helper()
	return writeParquetTest(t, dir, name, rows, parquet.MaxRowsPerRowGroup(2))
}

func TestLoadBenchmarkARC(t *testing.T) {
	dir := t.TempDir()
	type choice struct {
		Text  string `json:"text"`
		Label string `json:"label"`
	}
	type allenRow struct {
		ID       string `json:"id"`
		Question struct {
			Stem    string   `json:"stem"`
			Choices []choice `json:"choices"`
		} `json:"question"`
		AnswerKey string `json:"answerKey"`
	}
	// Three questions: letter labels, digit labels (ARC has some), five choices.
	qs := []struct {
		id, stem, key string
		texts, labels []string
	}{
		{"Mercury_7175875", "Which gas do plants take in for photosynthesis?", "B",
			[]string{"oxygen", "carbon dioxide", "nitrogen", "helium"}, []string{"A", "B", "C", "D"}},
		{"MCAS_2004_8_27", "What is the boiling point of water at sea level?", "3",
			[]string{"0 °C", "50 °C", "100 °C", "150 °C"}, []string{"1", "2", "3", "4"}},
		{"NYSEDREGENTS_2015_4_8", "Which is a mammal?", "E",
			[]string{"shark", "frog", "eagle", "snake", "whale"}, []string{"A", "B", "C", "D", "E"}},
	}
	var allen []any
	var hf []benchARCHFRow
	for _, q := range qs {
		var a allenRow
		a.ID, a.Question.Stem, a.AnswerKey = q.id, q.stem, q.key
		for i := range q.texts {
			a.Question.Choices = append(a.Question.Choices, choice{q.texts[i], q.labels[i]})
		}
		allen = append(allen, a)
		var h benchARCHFRow
		h.ID, h.Question, h.AnswerKey = q.id, q.stem, q.key
		h.Choices.Text, h.Choices.Label = q.texts, q.labels
		hf = append(hf, h)
	}
	hfAny := make([]any, len(hf))
	for i := range hf {
		hfAny[i] = hf[i]
	}
	paths := map[string]string{
		"allenai jsonl": benchJSONL(t, dir, "ARC-Challenge-Test.jsonl", allen...),
		"hf jsonl":      benchJSONL(t, dir, "hf.jsonl", hfAny...),
		"hf parquet":    benchParquet(t, dir, "test-00000-of-00001.parquet", hf),
	}
	var first []Sample
	for _, name := range []string{"allenai jsonl", "hf jsonl", "hf parquet"} {
		got := benchLoad(t, BenchARC, paths[name], 0)
		benchCheckShared(t, BenchARC, got)
		if want := []string{"arc/Mercury_7175875", "arc/MCAS_2004_8_27", "arc/NYSEDREGENTS_2015_4_8"}; !reflect.DeepEqual(benchIDs(got), want) {
			t.Errorf("%s: IDs %q, want %q", name, benchIDs(got), want)
		}
		if want := []string{"B", "C", "E"}; !reflect.DeepEqual(benchAnswers(got), want) {
			t.Errorf("%s: answers %q, want %q (digit labels become letters)", name, benchAnswers(got), want)
		}
		wantUser := "What is the boiling point of water at sea level?\n\nA. 0 °C\nB. 50 °C\nC. 100 °C\nD. 150 °C"
		if len(got) > 1 && got[1].User != wantUser {
			t.Errorf("%s: User\n%q\nwant\n%q", name, got[1].User, wantUser)
		}
		if first == nil {
			first = got
		} else if !reflect.DeepEqual(got, first) {
			t.Errorf("%s gives other samples than the AllenAI layout:\n%+v\n%+v", name, got, first)
		}
		if got := benchLoad(t, BenchARC, paths[name], 1); len(got) != 1 || got[0].ID != "arc/Mercury_7175875" {
			t.Errorf("%s limit 1: %q", name, benchIDs(got))
		}
	}
	// A JSON array (.json) reads like JSON lines.
	data, _ := json.Marshal(allen)
	got := benchLoad(t, BenchARC, benchWrite(t, dir, "arc.json", "\n"+string(data)), 0)
	if !reflect.DeepEqual(got, first) {
		t.Errorf("JSON array gives other samples than JSON lines")
	}
}

func TestLoadBenchmarkMATH500(t *testing.T) {
	dir := t.TempDir()
	type row struct {
		Problem  string `json:"problem"`
		Solution string `json:"solution"`
		Answer   string `json:"answer"`
		Subject  string `json:"subject"`
		Level    int    `json:"level"`
		UniqueID string `json:"unique_id"`
	}
	p := benchJSONL(t, dir, "test.jsonl",
		row{"What is $1/2$ as a fraction?", "It is $\\boxed{\\frac12}$.", "$\\frac{1}{2}$", "Algebra", 1, "test/algebra/1.json"},
		row{"Compute $3^2$.", "$\\boxed{9}$", " 9 ", "Prealgebra", 2, "test/prealgebra/7.json"},
		row{"Interval?", "...", "\\left( 3, \\frac{\\pi}{2} \\right)", "Precalculus", 5, ""},
	)
	got := benchLoad(t, BenchMATH500, p, 0)
	benchCheckShared(t, BenchMATH500, got)
	if want := []string{"math500/test/algebra/1.json", "math500/test/prealgebra/7.json", "math500/3"}; !reflect.DeepEqual(benchIDs(got), want) {
		t.Errorf("IDs %q, want %q", benchIDs(got), want)
	}
	if want := []string{`\frac{1}{2}`, "9", `\left( 3, \frac{\pi}{2} \right)`}; !reflect.DeepEqual(benchAnswers(got), want) {
		t.Errorf("answers %q, want %q", benchAnswers(got), want)
	}
	if got[1].User != "Compute $3^2$." {
		t.Errorf("User %q", got[1].User)
	}
	if got := benchLoad(t, BenchMATH500, p, 2); len(got) != 2 {
		t.Errorf("limit 2 gives %d samples", len(got))
	}
}

func TestLoadBenchmarkGPQA(t *testing.T) {
	dir := t.TempDir()
	header := []string{"Pre-Revision Question", "Question", "Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2", "Incorrect Answer 3", "Record ID", "High-level domain"}
	rows := [][]string{header}
	for i, q := range []string{
		"What is the spin of a photon?",
		"Which element has atomic number 6?\nAnswer with the name.",
		"What is the SI unit of inductance?",
		"Which organelle makes ATP?",
		"How many chromosomes does a human somatic cell have?",
		"What is the pH of pure water at 25 °C?",
		"Which quark is the heaviest?",
		"What is the speed of sound in air, roughly?",
	} {
		rows = append(rows, []string{"old", q, " right" + string(rune('0'+i)) + "\n", "wrong1", "wrong2", "wrong3", "rec" + string(rune('a'+i)), "Physics"})
	}
	var b strings.Builder
	w := csv.NewWriter(&b)
	if err := w.WriteAll(rows); err != nil {
		t.Fatal(err)
	}
	p := benchWrite(t, dir, "gpqa_diamond.csv", b.String())
	got := benchLoad(t, BenchGPQA, p, 0)
	benchCheckShared(t, BenchGPQA, got)
	if len(got) != 8 {
		t.Fatalf("%d samples, want 8", len(got))
	}
	letters := map[string]bool{}
	for i, s := range got {
		if want := "gpqa/rec" + string(rune('a'+i)); s.ID != want {
			t.Errorf("ID %q, want %q", s.ID, want)
		}
		// The four choice lines hold each answer once, the correct one
		// under the reference letter.
		right := "right" + string(rune('0'+i))
		lines := strings.Split(s.User, "\n")
		choices := lines[len(lines)-4:]
		var texts []string
		for k, c := range choices {
			prefix := string(rune('A'+k)) + ". "
			if !strings.HasPrefix(c, prefix) {
				t.Fatalf("%s: choice line %q does not start with %q", s.ID, c, prefix)
			}
			texts = append(texts, c[len(prefix):])
			if c[len(prefix):] == right && prefix[:1] != s.Answer {
				t.Errorf("%s: correct answer under %s, reference %s", s.ID, prefix[:1], s.Answer)
			}
		}
		sort.Strings(texts)
		if want := []string{right, "wrong1", "wrong2", "wrong3"}; !reflect.DeepEqual(texts, want) {
			t.Errorf("%s: choices %q, want %q in some order", s.ID, texts, want)
		}
		if want := rows[i+1][1] + "\n"; strings.Join(lines[:len(lines)-4], "\n") != want {
			t.Errorf("%s: question part %q, want %q", s.ID, strings.Join(lines[:len(lines)-4], "\n"), want)
		}
		letters[s.Answer] = true
	}
	if len(letters) < 2 {
		t.Errorf("all 8 questions put the correct answer under the same letter %v: not shuffled", letters)
	}
	// Deterministic: the letters depend only on the question text.
	again := benchLoad(t, BenchGPQA, p, 3)
	if !reflect.DeepEqual(again, got[:3]) {
		t.Errorf("second load (limit 3) differs from the first")
	}
	// Without "Record ID" the ID is the data row.
	var b2 strings.Builder
	w = csv.NewWriter(&b2)
	w.WriteAll([][]string{header[1:6], rows[3][1:6], rows[1][1:6]})
	got2 := benchLoad(t, BenchGPQA, benchWrite(t, dir, "no_id.csv", b2.String()), 0)
	if want := []string{"gpqa/1", "gpqa/2"}; !reflect.DeepEqual(benchIDs(got2), want) {
		t.Errorf("IDs %q, want %q", benchIDs(got2), want)
	}
	if got2[0].User != got[2].User || got2[0].Answer != got[2].Answer {
		t.Errorf("the same question in another file got other choices:\n%q\n%q", got2[0].User, got[2].User)
	}
}

func TestLoadBenchmarkErrors(t *testing.T) {
	dir := t.TempDir()
	gsm := benchWrite(t, dir, "gsm.jsonl", `{"question": "q1", "answer": "#### 1"}`+"\n"+`{"question": "q2"}`+"\n")
	badJSON := benchWrite(t, dir, "bad.jsonl", `{"question": "q1", "answer": "#### 1"}`+"\n\n"+`{"question": "q2", "answer": `+"\n")
	noHash := benchWrite(t, dir, "nohash.jsonl", `{"question": "q1", "answer": "42"}`+"\n")
	notObj := benchWrite(t, dir, "list.jsonl", `["q", "a"]`+"\n")
	arcKey := benchWrite(t, dir, "arc.jsonl", `{"id": "x1", "question": "q?", "choices": {"text": ["a", "b"], "label": ["A", "B"]}, "answerKey": "C"}`+"\n")
	arcLen := benchWrite(t, dir, "arc2.jsonl", `{"id": "x1", "question": "q?", "choices": {"text": ["a", "b"], "label": ["A"]}, "answerKey": "A"}`+"\n")
	arcStem := benchWrite(t, dir, "arc3.jsonl", `{"id": "x1", "question": {"choices": []}, "answerKey": "A"}`+"\n")
	gpqa := benchWrite(t, dir, "gpqa.csv", "Question,Correct Answer,Incorrect Answer 1,Incorrect Answer 2\nq,a,b,c\n")
	gpqaEmpty := benchWrite(t, dir, "gpqa2.csv", "Question,Correct Answer,Incorrect Answer 1,Incorrect Answer 2,Incorrect Answer 3\nq,a,b,c,d\n\"q2\",,b,c,d\n")
	var hf benchARCHFRow
	hf.ID, hf.Question, hf.AnswerKey = "x", "q?", "A"
	hf.Choices.Text, hf.Choices.Label = []string{"a", "b"}, []string{"A", "B"}
	arcPQ := benchParquet(t, dir, "arc.parquet", []benchARCHFRow{hf, hf})
	notPQ := benchWrite(t, dir, "fake.parquet", "not parquet")

	for _, tc := range []struct {
		kind, path string
		want       []string // substrings of the error
	}{
		{BenchGSM8K, gsm, []string{gsm, "line 2", `missing field "answer"`}},
		{BenchGSM8K, badJSON, []string{badJSON, "line 3", "bad JSON"}},
		{BenchGSM8K, noHash, []string{noHash, "line 1", "####"}},
		{BenchGSM8K, notObj, []string{notObj, "line 1", "want an object"}},
		{BenchGSM8K, arcPQ, []string{arcPQ, "row 1", `missing field "answer"`}},
		{BenchMATH500, gsm, []string{gsm, "line 1", `missing field "problem"`}},
		{BenchARC, arcKey, []string{arcKey, "line 1", `answerKey "C"`}},
		{BenchARC, arcLen, []string{arcLen, "2 texts and 1 labels"}},
		{BenchARC, arcStem, []string{arcStem, `missing field "stem"`}},
		{BenchGPQA, gpqa, []string{gpqa, "row 1", `missing field "Incorrect Answer 3"`}},
		{BenchGPQA, gpqaEmpty, []string{gpqaEmpty, "row 2", "line 3", `"Correct Answer" is empty`}},
		{BenchGPQA, notPQ, []string{notPQ, "not a readable parquet file"}},
		{BenchGSM8K, filepath.Join(dir, "gsm.txt"), []string{"gsm.txt", `unknown file extension ".txt"`}},
		{BenchGSM8K, filepath.Join(dir, "missing.jsonl"), []string{"missing.jsonl", "no such file"}},
		{"mmlu", gsm, []string{`unknown benchmark "mmlu"`, "gsm8k, arc, math500, gpqa"}},
	} {
		_, err := LoadBenchmark(tc.kind, tc.path, 0)
		if err == nil {
			t.Errorf("LoadBenchmark(%s, %s): no error", tc.kind, filepath.Base(tc.path))
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("LoadBenchmark(%s, %s): error %q does not contain %q", tc.kind, filepath.Base(tc.path), err, w)
			}
		}
	}
	// limit stops before a bad record.
	if got, err := LoadBenchmark(BenchGSM8K, badJSON, 1); err != nil || len(got) != 1 {
		t.Errorf("limit 1 before the bad line: %d samples, %v", len(got), err)
	}
}

func TestCheckBenchmarkAnswer(t *testing.T) {
	for _, tc := range []struct {
		kind, generated, want string
		ok                    bool
	}{
		{BenchGSM8K, "3 * 4 = 12\n## 12", "12", true},
		{BenchGSM8K, "## 1,234", "1234", true},
		{BenchGSM8K, "## $1,234.00", "1234", true},
		{BenchGSM8K, "## 18.0<|endoftext|>junk", "18", true},
		{BenchGSM8K, "## 18 apples", "18", true},
		{BenchGSM8K, "## 18.", "18", true},
		{BenchGSM8K, "## -7", "-7", true},
		{BenchGSM8K, "## 0.5", "0.50", true},
		{BenchGSM8K, "## 17", "18", false},
		{BenchGSM8K, "## 180", "18", false},
		{BenchGSM8K, "## eighteen", "18", false},
		{BenchGSM8K, "the answer is 18", "18", false},
		{BenchARC, "## B", "B", true},
		{BenchARC, "## b", "B", true},
		{BenchARC, "## (C) 100 °C", "C", true},
		{BenchARC, "## D.", "D", true},
		{BenchARC, "## E<|eot_id|>", "E", true},
		{BenchARC, "## Blue", "B", false},
		{BenchARC, "## A", "B", false},
		{BenchARC, "## F", "F", false},
		{BenchARC, "##", "A", false},
		{BenchGPQA, "reasoning\n## c)", "C", true},
		{BenchGPQA, "## A", "D", false},
		{BenchMATH500, `## \frac{1}{2}`, `\frac{1}{2}`, true},
		{BenchMATH500, `## \dfrac{1}{2}`, `\frac{1}{2}`, true},
		{BenchMATH500, `## $\boxed{\frac{1}{2}}$`, `\frac{1}{2}`, true},
		{BenchMATH500, `## \left( 3, \frac{\pi}{2} \right)`, `(3,\frac{\pi}{2})`, true},
		{BenchMATH500, `## 10\!000`, `10000`, true},
		{BenchMATH500, `## \text{(C)}`, `(C)`, true},
		{BenchMATH500, `## \textbf{(C)}`, `\text{(C)}`, true},
		{BenchMATH500, `## 5 \text{ cm}`, `5cm`, true},
		{BenchMATH500, `## x^2 + 1`, `$x^2+1$`, true},
		{BenchMATH500, `## 0.5`, `\frac{1}{2}`, false},
		{BenchMATH500, `## \frac{1}{3}`, `\frac{1}{2}`, false},
		{BenchMATH500, `## `, `0`, false},
		{"unknown", "## Foo", "Foo", true},
		{"unknown", "## foo", "Foo", false},
	} {
		if got := CheckBenchmarkAnswer(tc.kind, tc.generated, tc.want); got != tc.ok {
			t.Errorf("CheckBenchmarkAnswer(%s, %q, %q) = %v, want %v", tc.kind, tc.generated, tc.want, got, tc.ok)
		}
	}
}

func TestBenchMathNormalize(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`$\boxed{\frac{1}{2}}$`, `\frac{1}{2}`},
		{`\boxed{\text{(A)}}`, `(A)`},
		{`\left[ 1, 2 \right)`, `[1,2)`},
		{`\text{unbalanced {`, `\text{unbalanced{`},
		{`\textbf{x} + \text{y}`, `x+y`},
		{` 4\sqrt{3}. `, `4\sqrt{3}`},
	} {
		if got := benchMathNormalize(tc.in); got != tc.want {
			t.Errorf("benchMathNormalize(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// The shared system message must dominate a typical request, as the paper's
// few-shot prompts do (shared-prefix ratio 0.76–0.95 there).
func TestBenchmarkSystemShare(t *testing.T) {
	users := map[string]string{
		BenchGSM8K:   "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. How many clips did Natalia sell altogether in April and May?",
		BenchARC:     benchChoicesText("Which property of a mineral can be determined just by looking at it?", []string{"luster", "mass", "weight", "hardness"}),
		BenchMATH500: "Convert the point $(0,3)$ in rectangular coordinates to polar coordinates.  Enter your answer in the form $(r,\\theta),$ where $r > 0$ and $0 \\le \\theta < 2 \\pi.$",
		BenchGPQA:    benchChoicesText("A spin-half particle is in a linear superposition 0.5|up>+sqrt(3)/2|down> of its spin-up and spin-down states. What is the expectation value up to one decimal place of the operator 10 sigma_z + 5 sigma_x?", []string{"-1.4", "0.85", "1.65", "-0.7"}),
	}
	systems := map[string]string{BenchGSM8K: benchGSM8KSystem, BenchARC: benchARCSystem, BenchMATH500: benchMATH500System, BenchGPQA: benchGPQASystem}
	for _, kind := range BenchmarkKinds() {
		sys, user := EstimateTokens(systems[kind]), EstimateTokens(users[kind])
		r := Ratio(sys, sys+user, 32)
		t.Logf("%s: system ≈ %d tokens, question ≈ %d, r(gen 32) ≈ %.2f", kind, sys, user, r)
		if r < 0.7 {
			t.Errorf("%s: shared-prefix ratio %.2f < 0.7 at gen length 32", kind, r)
		}
	}
}
