package datasets

import "unicode"

// EstimateTokens approximates the number of BPE tokens of s without a
// tokenizer: it counts the pieces of a GPT-2-style pre-tokenization (a letter
// run, a digit run or a punctuation run, each with an optional leading space;
// white space that precedes no such piece) and adds one more token for every
// eight letters beyond the fifth of a letter run, since a small vocabulary
// splits long words. The filler length of GenOptions is measured with it; the
// real counts come from the tokenizer (tools/corpus reports them).
func EstimateTokens(s string) int {
	rs := []rune(s)
	n := 0
	for i := 0; i < len(rs); {
		if unicode.IsSpace(rs[i]) {
			j := i
			for j < len(rs) && unicode.IsSpace(rs[j]) {
				j++
			}
			if j == len(rs) || rs[j-1] != ' ' {
				n++ // trailing white space, or a run ending in a newline
				i = j
				continue
			}
			if j-1 > i {
				n++ // the white space before the last space
			}
			i = j - 1 // the last space joins the next piece
		}
		if rs[i] == ' ' {
			i++
		}
		start := i
		class := pieceClass(rs[i])
		for i < len(rs) && !unicode.IsSpace(rs[i]) && pieceClass(rs[i]) == class {
			i++
		}
		n++
		if letters := i - start; class == classLetter && letters > 5 {
			n += (letters - 5 + 7) / 8
		}
	}
	return n
}

const (
	classLetter = iota
	classDigit
	classOther
)

func pieceClass(c rune) int {
	switch {
	case unicode.IsLetter(c):
		return classLetter
	case unicode.IsDigit(c):
		return classDigit
	}
	return classOther
}

// Ratio returns the shared-prefix ratio r = prefix / (prompt + genLength)
// of a request whose templated prompt has prompt tokens, the first prefix of
// which are shared, decoded with genLength answer slots.
func Ratio(prefix, prompt, genLength int) float64 {
	if prompt+genLength <= 0 {
		return 0
	}
	return float64(prefix) / float64(prompt+genLength)
}
