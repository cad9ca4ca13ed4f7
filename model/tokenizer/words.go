package tokenizer

import (
	"unicode"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
)

// PatternQwen2 is the pre-tokenization regex of Qwen2's tokenizer (Qwen2,
// Qwen2.5, Qwen3; Dream, DiffuCoder, SDAR, TraDo): Llama-3's with single
// digits.
const PatternQwen2 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`

// wordRegex finds the matches of a pre-tokenization regex.
type wordRegex interface {
	// spans covers s with alternating unmatched and matched spans; empty
	// matches are skipped.
	spans(s string) []span
}

// compileRegex compiles a Hugging Face (Oniguruma) pattern. The GPT-2,
// Llama-3 and Qwen2 patterns run as hand-written matchers (wordPattern);
// any other pattern runs with regexp2, whose default syntax has the
// lookahead and \p{..} classes those patterns use.
func compileRegex(pattern, where string) (wordRegex, error) {
	if p, ok := knownPatterns[pattern]; ok {
		return p, nil
	}
	return compileRegexp2(pattern, where)
}

// wordPattern is a hand-written matcher for one of the byte-level BPE
// pre-tokenization regexes, which are built from the same alternatives:
//
//	GPT-2:   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//	Llama 3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//	Qwen2:   as Llama 3 with \p{N} for \p{N}{1,3}
//
// Go's regexp has no lookahead, and regexp2 backtracks through a general
// engine; the alternatives are simple enough to match directly. Classes as
// in Oniguruma with UTF-8: \p{L} is unicode.IsLetter (Lu Ll Lt Lm Lo),
// \p{N} unicode.IsNumber (Nd Nl No), \s the White_Space property
// (unicode.IsSpace). An invalid UTF-8 byte counts as one U+FFFD (a symbol).
// TestWordPatternsMatchRegexp2 checks each against regexp2 on random text.
type wordPattern struct {
	foldCase  bool // (?i:...) around the contractions
	llama     bool // [^\r\n\p{L}\p{N}]?\p{L}+, [\r\n]* after symbols, \s*[\r\n]+
	maxDigits int  // \p{N}{1,maxDigits}; 0: GPT-2's " ?\p{N}+"
}

var knownPatterns = map[string]wordPattern{
	PatternGPT2:   {},
	PatternLlama3: {foldCase: true, llama: true, maxDigits: 3},
	PatternQwen2:  {foldCase: true, llama: true, maxDigits: 1},
}

// class of a rune for these patterns.
const (
	clOther  = iota // [^\s\p{L}\p{N}]
	clLetter        // \p{L}
	clNumber        // \p{N}
	clSpace         // \s
)

var asciiClass [utf8.RuneSelf]uint8

func init() {
	for r := rune(0); r < utf8.RuneSelf; r++ {
		asciiClass[r] = classOf(r)
	}
}

func classOf(r rune) uint8 {
	switch {
	case unicode.IsLetter(r):
		return clLetter
	case unicode.IsNumber(r):
		return clNumber
	case unicode.IsSpace(r):
		return clSpace
	}
	return clOther
}

// runeAt decodes the rune at s[i] and its class; i < len(s).
func runeAt(s string, i int) (r rune, size int, class uint8) {
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), 1, asciiClass[c]
	}
	r, size = utf8.DecodeRuneInString(s[i:])
	return r, size, classOf(r)
}

// classAt is the class of the rune at s[i], or -1 past the end.
func classAt(s string, i int) int {
	if i >= len(s) {
		return -1
	}
	_, _, c := runeAt(s, i)
	return int(c)
}

// runOf returns the end of the run of class c starting at i.
func runOf(s string, i int, c uint8) int {
	for i < len(s) {
		_, n, k := runeAt(s, i)
		if k != c {
			break
		}
		i += n
	}
	return i
}

// contractions are the suffixes after the apostrophe, in the patterns'
// order.
var contractions = [...]string{"s", "t", "re", "ve", "m", "ll", "d"}

// contraction returns the length of the contraction ('s, 't, 're, 've, 'm,
// 'll, 'd) at s[i], which is an apostrophe, or 0.
func (p wordPattern) contraction(s string, i int) int {
	for _, c := range contractions {
		j := i + 1
		k := 0
		for k < len(c) && j < len(s) {
			r, n := utf8.DecodeRuneInString(s[j:])
			if !p.sameLetter(r, rune(c[k])) {
				break
			}
			j += n
			k++
		}
		if k == len(c) {
			return j - i
		}
	}
	return 0
}

// sameLetter compares a text rune with a lower-case ASCII pattern letter,
// under Unicode simple case folding when the pattern folds case (ſ, U+017F,
// folds to s).
func (p wordPattern) sameLetter(r, want rune) bool {
	if r == want {
		return true
	}
	if !p.foldCase {
		return false
	}
	return r == want-'a'+'A' || (want == 's' && r == 'ſ')
}

// match returns the end of the match starting at s[i] (i < len(s)). Every
// rune is a letter, a number, a space or a symbol, so some alternative
// always matches and the matches tile s.
func (p wordPattern) match(s string, i int) int {
	r, n, c := runeAt(s, i)
	next := i + n
	// Contractions.
	if r == '\'' {
		if k := p.contraction(s, i); k > 0 {
			return i + k
		}
	}
	// Letters.
	if c == clLetter {
		return runOf(s, next, clLetter)
	}
	if p.llama {
		// [^\r\n\p{L}\p{N}]?\p{L}+
		if r != '\r' && r != '\n' && c != clNumber && classAt(s, next) == clLetter {
			return runOf(s, next, clLetter)
		}
	} else if r == ' ' && classAt(s, next) == clLetter {
		return runOf(s, next, clLetter)
	}
	// Numbers.
	if p.maxDigits > 0 {
		if c == clNumber {
			j := next
			for d := 1; d < p.maxDigits && classAt(s, j) == clNumber; d++ {
				_, m, _ := runeAt(s, j)
				j += m
			}
			return j
		}
	} else {
		if c == clNumber {
			return runOf(s, next, clNumber)
		}
		if r == ' ' && classAt(s, next) == clNumber {
			return runOf(s, next, clNumber)
		}
	}
	// Symbols: " ?[^\s\p{L}\p{N}]+", then [\r\n]* in Llama's.
	j := -1
	if c == clOther {
		j = runOf(s, next, clOther)
	} else if r == ' ' && classAt(s, next) == clOther {
		j = runOf(s, next, clOther)
	}
	if j >= 0 {
		if p.llama {
			for j < len(s) && (s[j] == '\r' || s[j] == '\n') {
				j++
			}
		}
		return j
	}
	// White space (c == clSpace here).
	end := runOf(s, i, clSpace)
	if p.llama {
		// \s*[\r\n]+: up to the run's last line break, if any.
		for k := end - 1; k >= i; k-- {
			if s[k] == '\r' || s[k] == '\n' {
				return k + 1
			}
		}
	}
	// \s+(?!\S): the whole run at the end of s, else all but its last rune
	// (which goes with the word after it); \s+ when that leaves nothing.
	if end == len(s) {
		return end
	}
	_, last := utf8.DecodeLastRuneInString(s[i:end])
	if end-last > i {
		return end - last
	}
	return end
}

func (p wordPattern) spans(s string) []span {
	var out []span
	for i := 0; i < len(s); {
		j := p.match(s, i)
		out = append(out, span{i, j, true})
		i = j
	}
	return out
}

// regexp2Regex runs any other pattern with regexp2.
type regexp2Regex struct{ re *regexp2.Regexp }

func compileRegexp2(pattern, where string) (regexp2Regex, error) {
	re, err := regexp2.Compile(pattern, regexp2.None)
	if err != nil {
		return regexp2Regex{}, badRegex(where, pattern, err)
	}
	return regexp2Regex{re}, nil
}

// spans: regexp2 reports rune offsets; they are turned into byte offsets
// here.
func (x regexp2Regex) spans(s string) []span {
	runes := []rune(s)
	// byteAt[i] is the byte offset of rune i; byteAt[len(runes)] = len(s).
	byteAt := make([]int, 0, len(runes)+1)
	for i := range s {
		byteAt = append(byteAt, i)
	}
	byteAt = append(byteAt, len(s))

	var spans []span
	prev := 0
	m, err := x.re.FindRunesMatch(runes)
	for err == nil && m != nil {
		if m.Length > 0 {
			b0, b1 := byteAt[m.Index], byteAt[m.Index+m.Length]
			if b0 > prev {
				spans = append(spans, span{prev, b0, false})
			}
			spans = append(spans, span{b0, b1, true})
			prev = b1
		}
		m, err = x.re.FindNextMatch(m)
	}
	if prev < len(s) {
		spans = append(spans, span{prev, len(s), false})
	}
	return spans
}
