package tokenizer

import (
	"fmt"
	"strings"
	"unicode"

	"golang.org/x/text/unicode/norm"
)

// PatternGPT2 is the pre-tokenization regex of GPT-2, which the Hugging Face
// ByteLevel pre-tokenizer applies when use_regex is true.
const PatternGPT2 = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`

// PatternLlama3 is the Llama-3 pre-tokenization regex: case-insensitive
// contractions, a letter run with at most one leading non-letter, digits in
// groups of at most three, punctuation runs with trailing newlines, and
// whitespace.
const PatternLlama3 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`

// normalizer transforms text before pre-tokenization.
type normalizer interface {
	normalize(s string) string
}

type normForm struct{ f norm.Form }

func (n normForm) normalize(s string) string { return n.f.String(s) }

type lowercase struct{}

func (lowercase) normalize(s string) string { return strings.ToLower(s) }

type normSequence []normalizer

func (q normSequence) normalize(s string) string {
	for _, n := range q {
		s = n.normalize(s)
	}
	return s
}

// preTokenizer splits each piece of text into smaller pieces.
type preTokenizer interface {
	// split appends the pieces of s to dst.
	split(dst []string, s string) []string
}

// byteLevelPre is the Hugging Face ByteLevel pre-tokenizer: an optional
// leading space, an optional split by the GPT-2 regex, then every byte of
// every piece mapped through byteToRune.
type byteLevelPre struct {
	addPrefixSpace bool
	re             wordRegex // nil when use_regex is false
	// mapBytes: map every byte through byteToRune. Off when this is the
	// pipeline's last step: the BPE then reads the pieces' bytes directly.
	mapBytes bool
}

func (p byteLevelPre) split(dst []string, s string) []string {
	if p.addPrefixSpace && !strings.HasPrefix(s, " ") {
		s = " " + s
	}
	start := len(dst)
	if p.re == nil {
		dst = append(dst, s)
	} else {
		dst = regexSplit(dst, s, p.re, false, behaviorIsolated)
	}
	if p.mapBytes {
		for i := start; i < len(dst); i++ {
			dst[i] = byteLevelMap(dst[i])
		}
	}
	return dst
}

// splitBehavior is what a Split pre-tokenizer does with the delimiters.
type splitBehavior int

const (
	behaviorRemoved splitBehavior = iota
	behaviorIsolated
	behaviorMergedWithPrevious
	behaviorMergedWithNext
	behaviorContiguous
)

var behaviorNames = map[string]splitBehavior{
	"Removed":            behaviorRemoved,
	"Isolated":           behaviorIsolated,
	"MergedWithPrevious": behaviorMergedWithPrevious,
	"MergedWithNext":     behaviorMergedWithNext,
	"Contiguous":         behaviorContiguous,
}

// splitPre is the Hugging Face Split pre-tokenizer.
type splitPre struct {
	re       wordRegex
	invert   bool
	behavior splitBehavior
}

func (p splitPre) split(dst []string, s string) []string {
	return regexSplit(dst, s, p.re, p.invert, p.behavior)
}

// digitsPre is the Hugging Face Digits pre-tokenizer.
type digitsPre struct{ individual bool }

func (p digitsPre) split(dst []string, s string) []string {
	start := 0
	prevDigit := false
	for i, r := range s {
		d := unicode.IsNumber(r)
		if i > start && (d != prevDigit || (d && p.individual)) {
			dst = append(dst, s[start:i])
			start = i
		}
		prevDigit = d
	}
	if start < len(s) {
		dst = append(dst, s[start:])
	}
	return dst
}

type preSequence []preTokenizer

func (q preSequence) split(dst []string, s string) []string {
	cur := []string{s}
	var next []string
	for _, p := range q {
		next = next[:0]
		for _, piece := range cur {
			next = p.split(next, piece)
		}
		cur, next = next, cur
	}
	return append(dst, cur...)
}

// span is a piece [start, end) of a string (byte offsets) and whether it
// was matched by the split pattern.
type span struct {
	start, end int
	match      bool
}

// regexSplit splits s by the matches of re with the given behaviour, as the
// Hugging Face Split pre-tokenizer does, and appends the non-empty pieces to
// dst.
func regexSplit(dst []string, s string, re wordRegex, invert bool, behavior splitBehavior) []string {
	if s == "" {
		return dst
	}
	if p, ok := re.(wordPattern); ok && behavior == behaviorIsolated && !invert {
		// The matches tile s: no spans to build.
		for i := 0; i < len(s); {
			j := p.match(s, i)
			dst = append(dst, s[i:j])
			i = j
		}
		return dst
	}
	spans := re.spans(s)
	if invert {
		for i := range spans {
			spans[i].match = !spans[i].match
		}
	}
	var out []span
	switch behavior {
	case behaviorRemoved:
		for _, sp := range spans {
			if !sp.match {
				out = append(out, sp)
			}
		}
	case behaviorIsolated:
		out = spans
	case behaviorMergedWithPrevious:
		prev := false
		for _, sp := range spans {
			if sp.match && !prev && len(out) > 0 {
				out[len(out)-1].end = sp.end
			} else {
				out = append(out, sp)
			}
			prev = sp.match
		}
	case behaviorMergedWithNext:
		prev := false
		for i := len(spans) - 1; i >= 0; i-- {
			sp := spans[i]
			if sp.match && !prev && len(out) > 0 {
				out[len(out)-1].start = sp.start
			} else {
				out = append(out, sp)
			}
			prev = sp.match
		}
		for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
			out[i], out[j] = out[j], out[i]
		}
	case behaviorContiguous:
		prev := false
		for i, sp := range spans {
			if i > 0 && sp.match == prev {
				out[len(out)-1].end = sp.end
			} else {
				out = append(out, sp)
			}
			prev = sp.match
		}
	}
	for _, sp := range out {
		if sp.end > sp.start {
			dst = append(dst, s[sp.start:sp.end])
		}
	}
	return dst
}

func badRegex(where, pattern string, err error) error {
	return fmt.Errorf("%s: bad regex %q: %v", where, pattern, err)
}
