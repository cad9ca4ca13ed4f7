package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dlmcache/dlmcache/datasets"
	"github.com/dlmcache/dlmcache/model/tokenizer"
)

func smallConfig(dir string) Config {
	c := defaultConfig()
	c.Train, c.Eval, c.Vocab, c.TokSamples, c.Workers = 240, 6, 512, 0, 2
	c.Out, c.TokIn, c.TokOut = filepath.Join(dir, "corpus"), "", filepath.Join(dir, "tok")
	return c
}

type line struct {
	Suite      string  `json:"suite"`
	Level      int     `json:"level"`
	ID         string  `json:"id"`
	IDs        []int32 `json:"ids"`
	PrefixLen  int     `json:"prefix_len"`
	Answer     []int32 `json:"answer"`
	AnswerText string  `json:"answer_text"`
}

func readLines(t *testing.T, path string) []line {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []line
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		var l line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, l)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestRunEndToEnd(t *testing.T) {
	dir := t.TempDir()
	c := smallConfig(dir)
	var out bytes.Buffer
	if err := run(c, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	var m meta
	b, err := os.ReadFile(filepath.Join(c.Out, "meta.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Load(c.TokOut)
	if err != nil {
		t.Fatal(err)
	}
	if m.VocabSize != tok.VocabSize() || m.VocabSize > c.Vocab {
		t.Errorf("meta vocab_size %d, tokenizer %d, asked %d", m.VocabSize, tok.VocabSize(), c.Vocab)
	}
	for _, x := range []struct {
		name string
		id   int32
	}{{tokenizer.TokenMask, m.MaskID}, {tokenizer.TokenEOS, m.EOSID}, {tokenizer.TokenBOS, m.BOSID}, {tokenizer.TokenEOT, m.EOTID}} {
		if id, ok := tok.TokenID(x.name); !ok || id != x.id {
			t.Errorf("meta says %s = %d, tokenizer %d (%v)", x.name, x.id, id, ok)
		}
	}
	// The trained tokenizer splits names, so the long-answer suite (span)
	// needs more than the bundled tokenizer's 48 slots: the smallest
	// multiple of 8 holding the longest answer with a margin of 2.
	if !strings.Contains(out.String(), fmt.Sprintf("gen_length %d ", m.GenLength)) {
		t.Errorf("statistics do not report gen_length %d:\n%s", m.GenLength, out.String())
	}
	if m.GenLength != autoGenLength(m.MaxAnswer) || m.MaxAnswer > m.GenLength || m.SuiteVersion != datasets.SuiteVersion || m.Format != formatName {
		t.Errorf("meta: gen_length %d, max answer %d, suite_version %d, format %q", m.GenLength, m.MaxAnswer, m.SuiteVersion, m.Format)
	}
	if !slices.Equal(m.Suites, datasets.Suites()) {
		t.Errorf("meta suites %v", m.Suites)
	}

	for _, split := range []string{"train", "eval"} {
		lines := readLines(t, filepath.Join(c.Out, split+".jsonl"))
		want := c.Train
		if split == "eval" {
			want = c.Eval * len(datasets.Suites())
		}
		if len(lines) != want {
			t.Fatalf("%s: %d lines, want %d", split, len(lines), want)
		}
		counts := map[string]int{}
		lastLevel := -2
		for _, l := range lines {
			counts[l.Suite]++
			if split == "eval" && l.Level != evalLevel {
				t.Fatalf("%s: eval row at level %d", l.ID, l.Level)
			}
			if split == "train" && l.Level < lastLevel {
				t.Fatalf("%s: train rows not ordered by level", l.ID)
			}
			lastLevel = l.Level
			if !strings.HasPrefix(l.ID, l.Suite+"/"+split+"/") {
				t.Fatalf("id %q in %s.jsonl", l.ID, split)
			}
			text := tok.Decode(l.IDs)
			if l.IDs[0] != m.BOSID || l.IDs[l.PrefixLen-1] != m.EOTID {
				t.Fatalf("%s: prefix %q does not run from BOS to the system message's end of turn", l.ID, tok.Decode(l.IDs[:l.PrefixLen]))
			}
			if !strings.HasSuffix(text, "assistant"+tokenizer.TokenEndHeader+"\n\n") {
				t.Fatalf("%s: prompt does not end with the assistant header: %q", l.ID, text)
			}
			if l.Answer[len(l.Answer)-1] != m.EOSID || slices.Contains(l.Answer[:len(l.Answer)-1], m.EOSID) {
				t.Fatalf("%s: answer %v does not end with exactly one EOS", l.ID, l.Answer)
			}
			if len(l.Answer) > m.GenLength {
				t.Fatalf("%s: answer of %d tokens > gen_length %d", l.ID, len(l.Answer), m.GenLength)
			}
			if !datasets.CheckAnswer(l.Suite, tok.Decode(l.Answer), l.AnswerText) {
				t.Fatalf("%s: answer %q does not check against %q", l.ID, tok.Decode(l.Answer), l.AnswerText)
			}
		}
		for s, n := range m.Counts[split] {
			if counts[s] != n {
				t.Errorf("%s: meta counts %s = %d, file has %d", split, s, n, counts[s])
			}
		}
	}
	if sum := m.LevelCounts[0] + m.LevelCounts[1] + m.LevelCounts[2]; sum != c.Train {
		t.Errorf("level counts %v sum to %d, want %d", m.LevelCounts, sum, c.Train)
	}

	// No temp files are left behind.
	for _, d := range []string{c.Out, c.TokOut} {
		es, _ := os.ReadDir(d)
		for _, e := range es {
			if strings.HasPrefix(e.Name(), ".") {
				t.Errorf("left-over file %s/%s", d, e.Name())
			}
		}
	}

	// The same flags give the same bytes.
	c2 := smallConfig(t.TempDir())
	if err := run(c2, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"corpus/train.jsonl", "corpus/eval.jsonl", "corpus/meta.json", "tok/tokenizer.json"} {
		a, _ := os.ReadFile(filepath.Join(dir, f))
		b, _ := os.ReadFile(filepath.Join(filepath.Dir(c2.Out), f))
		if f == "corpus/meta.json" { // names its own directories
			a = bytes.ReplaceAll(a, []byte(dir), nil)
			b = bytes.ReplaceAll(b, []byte(filepath.Dir(c2.Out)), nil)
		}
		if !bytes.Equal(a, b) || len(a) == 0 {
			t.Errorf("%s differs between two runs with the same flags", f)
		}
	}
}

func TestGenLengthTooShort(t *testing.T) {
	c := smallConfig(t.TempDir())
	c.Train, c.GenLength = 40, 3
	err := run(c, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "-gen-length 3") {
		t.Fatalf("run with gen length 3: %v", err)
	}
	if _, err := os.Stat(filepath.Join(c.Out, "meta.json")); err == nil {
		t.Error("a failed run left a meta.json")
	}
}

func TestValidateConfig(t *testing.T) {
	for _, tc := range []struct {
		edit func(*Config)
		ok   bool
	}{
		{func(*Config) {}, true},
		{func(c *Config) { c.Train = 0 }, false},
		{func(c *Config) { c.Eval = 0 }, false},
		{func(c *Config) { c.Vocab = 5000 }, false},
		{func(c *Config) { c.Mix = []float64{1, 1} }, false},
		{func(c *Config) { c.Mix = []float64{0, 0, 0} }, false},
		{func(c *Config) { c.Mix = []float64{-1, 1, 1} }, false},
		{func(c *Config) { c.Workers = 0 }, false},
	} {
		c := defaultConfig()
		tc.edit(&c)
		if err := c.validate(); (err == nil) != tc.ok {
			t.Errorf("validate(%+v) = %v, want ok %v", c, err, tc.ok)
		}
	}
}

func TestApportionSplitsExactlyByShares(t *testing.T) {
	for _, tc := range []struct {
		n      int
		shares []float64
		want   []int
	}{
		{10, []float64{1, 1, 1}, []int{4, 3, 3}},
		{200000, []float64{0.3, 0.35, 0.35}, []int{60000, 70000, 70000}},
		{7, []float64{0, 1, 0}, []int{0, 7, 0}},
		{5, []float64{0.5, 0.25, 0.25}, []int{3, 1, 1}},
	} {
		if got := apportion(tc.n, tc.shares); !slices.Equal(got, tc.want) {
			t.Errorf("apportion(%d, %v) = %v, want %v", tc.n, tc.shares, got, tc.want)
		}
	}
}

func TestAutoGenLength(t *testing.T) {
	for _, tc := range []struct{ ans, want int }{{1, 16}, {7, 16}, {14, 16}, {15, 24}, {22, 24}, {23, 32}} {
		if got := autoGenLength(tc.ans); got != tc.want {
			t.Errorf("autoGenLength(%d) = %d, want %d", tc.ans, got, tc.want)
		}
	}
}
