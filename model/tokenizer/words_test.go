package tokenizer

import (
	"math/rand"
	"reflect"
	"strings"
	"testing"
)

// wordRunes mixes every class the patterns tell apart: ASCII and other
// letters (Lu Ll Lt Lm Lo), combining marks (not letters), numbers (Nd, Nl,
// No), the contractions' letters in both cases and ſ (folds to s), the
// apostrophe, white space (ASCII, NEL, NBSP, ideographic space, line and
// paragraph separators), line breaks, symbols and emoji, U+FEFF (a format
// character, not white space) and U+FFFD.
var wordRunes = []rune("aSsTtrReEvVmMlLdDxZ'’ſ \t\n\r\v\f\u0085\u00a0\u3000\u2028\u2029\u2009" +
	"é\u0301ǅʰ中文日本語한국ΩЖ٣੩²½Ⅻ0123456789.,;:!?-_#@*()[]{}<>/\\\"`~$%^&+=|😀👍🏽\u200d\ufeff\ufffd")

func randomText(rng *rand.Rand, maxLen int) string {
	var b strings.Builder
	n := rng.Intn(maxLen + 1)
	for i := 0; i < n; i++ {
		switch rng.Intn(20) {
		case 0:
			b.WriteByte(byte(0x80 + rng.Intn(0x80))) // a stray byte: invalid UTF-8
		case 1, 2:
			b.WriteString([]string{"'s", "'LL", "'Re", "'ve", "'M", "'d", "'T", "'ſ", "\r\n", "  ", "\n\n"}[rng.Intn(11)])
		default:
			b.WriteRune(wordRunes[rng.Intn(len(wordRunes))])
		}
	}
	return b.String()
}

// splitWith is regexSplit in the Isolated behaviour that the three
// patterns are used with.
func splitWith(re wordRegex, s string) []string {
	return regexSplit(nil, s, re, false, behaviorIsolated)
}

// regexp2Agrees reports whether regexp2 is expected to split s as
// Oniguruma does: regexp2 does not case-fold ſ (U+017F) to s, so
// (?i:'s) misses "'ſ" (TestLongSContraction holds what Hugging Face does).
func regexp2Agrees(pattern, s string) bool {
	return !knownPatterns[pattern].foldCase || !strings.ContainsRune(s, 'ſ')
}

// TestWordPatternsMatchRegexp2: the hand-written matchers of the GPT-2,
// Llama-3 and Qwen2 patterns split exactly as regexp2 runs the patterns
// themselves, on hand-picked and on random text. (They were also checked
// against Hugging Face's Rust tokenizers — Oniguruma — on 20,000 random
// texts of these runes: no difference, ſ included.)
func TestWordPatternsMatchRegexp2(t *testing.T) {
	hand := []string{
		"", " ", "  ", "a", "a b", "a  b", "a   b ", "a\n\n\nb", "a \n b", " \n\n x", "x\r\n\r\ny",
		"I'm sure it's what they've said, I'd think. DON'T 'LL 'Re 'ſ 'x ''s",
		"1234567 12 3.14159 ²½ Ⅻ٣੩", " 123 abc", "!!!\n\n", " !!!\r\n x", "'\n", "\t\tindented\n",
		"café naïve cafe\u0301 ǅemal ʰ", "中文分词，测试。", "😀👍🏽 x", "\u3000\u3000全角", "a\u00a0b\u0085c\u2028d",
		"\ufeffBOM", "x\xffy\xc3", "\xe4\xb8", "trailing   ", "\u2009\u2009x",
	}
	rng := rand.New(rand.NewSource(1))
	texts := append([]string(nil), hand...)
	for i := 0; i < 3000; i++ {
		texts = append(texts, randomText(rng, 24))
	}
	for _, pat := range []string{PatternGPT2, PatternLlama3, PatternQwen2} {
		fast, ok := knownPatterns[pat]
		if !ok {
			t.Fatalf("pattern %q has no matcher", pat)
		}
		slow, err := compileRegexp2(pat, "test")
		if err != nil {
			t.Fatal(err)
		}
		bad := 0
		for _, s := range texts {
			if !regexp2Agrees(pat, s) {
				continue
			}
			want, got := splitWith(slow, s), splitWith(fast, s)
			if !reflect.DeepEqual(got, want) && !(len(got) == 0 && len(want) == 0) {
				if bad++; bad <= 5 {
					t.Errorf("pattern %.20q…, text %q:\n got %q\nwant %q", pat, s, got, want)
				}
			}
			if strings.Join(got, "") != s {
				t.Errorf("pieces of %q do not tile it: %q", s, got)
			}
		}
		if bad > 0 {
			t.Errorf("pattern %.20q…: %d of %d texts differ", pat, bad, len(texts))
		}
	}
	// compileRegex picks the matcher for these patterns, regexp2 for others.
	if re, _ := compileRegex(PatternQwen2, "x"); reflect.TypeOf(re) != reflect.TypeOf(wordPattern{}) {
		t.Errorf("compileRegex(PatternQwen2) is a %T", re)
	}
	if re, _ := compileRegex(`\s+`, "x"); reflect.TypeOf(re) != reflect.TypeOf(regexp2Regex{}) {
		t.Errorf("compileRegex(\\s+) is a %T", re)
	}
}

// FuzzWordPatterns: as TestWordPatternsMatchRegexp2 on fuzzed text.
func FuzzWordPatterns(f *testing.F) {
	for _, s := range []string{"I'm here", "a  b\n\n c", "12345 x", "中文 😀", "\xff'S"} {
		f.Add(s)
	}
	var slow []regexp2Regex
	pats := []string{PatternGPT2, PatternLlama3, PatternQwen2}
	for _, p := range pats {
		re, err := compileRegexp2(p, "fuzz")
		if err != nil {
			f.Fatal(err)
		}
		slow = append(slow, re)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for i, p := range pats {
			if !regexp2Agrees(p, s) {
				continue
			}
			want, got := splitWith(slow[i], s), splitWith(knownPatterns[p], s)
			if !reflect.DeepEqual(got, want) && !(len(got) == 0 && len(want) == 0) {
				t.Errorf("pattern %.20q…, text %q:\n got %q\nwant %q", p, s, got, want)
			}
		}
	})
}

// TestLongSContraction: under (?i:...) Oniguruma folds ſ to s, so "'ſ" is a
// contraction in the Llama-3 and Qwen2 patterns (as Hugging Face's Rust
// tokenizers split it), and not in GPT-2's case-sensitive one.
func TestLongSContraction(t *testing.T) {
	for _, c := range []struct {
		pattern string
		text    string
		want    []string
	}{
		{PatternQwen2, "x'ſa", []string{"x", "'ſ", "a"}},
		{PatternLlama3, "x'ſa 'S", []string{"x", "'ſ", "a", " '", "S"}},
		{PatternGPT2, "x'ſa", []string{"x", "'", "ſa"}},
		{PatternQwen2, "'LL'Ve'x", []string{"'LL", "'Ve", "'x"}},
	} {
		if got := splitWith(knownPatterns[c.pattern], c.text); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%.20q…: %q → %q, want %q", c.pattern, c.text, got, c.want)
		}
	}
}
