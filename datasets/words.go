package datasets

import (
	_ "embed"
	"fmt"
	"math/rand/v2"
	"strings"
	"unicode"
)

// proseText holds the filler sentences, one a line, extracted by
// gen_prose.go from Debian's base-files /usr/share/common-licenses texts.
//
//go:embed prose.txt
var proseText string

// prose is the list of filler sentences; proseWords the set of their
// lowercase words.
var prose, proseWords = parseProse(proseText)

// reservedWords are the words that made-up words must avoid: every word of
// the filler prose and of the suites' fixed sentences.
var reservedWords = reserve(proseWords, lookupIntros, lookupHeaders, lookupReminders, lookupQuestions,
	arithIntros, arithReminders, arithQuestions, ruleIntros, ruleReminders, ruleQuestions,
	seqReminders, seqStyleTexts(), []string{seqQuestionText}, spanReminders, []string{spanQuestionText})

func reserve(base map[string]bool, texts ...[]string) map[string]bool {
	out := make(map[string]bool, len(base))
	for w := range base {
		out[w] = true
	}
	for _, ts := range texts {
		for _, t := range ts {
			for _, w := range strings.FieldsFunc(t, func(c rune) bool { return !unicode.IsLetter(c) }) {
				out[strings.ToLower(w)] = true
			}
		}
	}
	return out
}

func parseProse(text string) ([]string, map[string]bool) {
	var lines []string
	words := map[string]bool{}
	for _, l := range strings.Split(text, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		lines = append(lines, l)
		for _, w := range strings.FieldsFunc(l, func(c rune) bool { return !unicode.IsLetter(c) }) {
			words[strings.ToLower(w)] = true
		}
	}
	if len(lines) == 0 {
		panic("datasets: embedded prose.txt holds no sentences")
	}
	return lines, words
}

// fillerSentences returns prose sentences whose estimated token count comes
// as close to tokens as whole sentences allow without exceeding it by more
// than fillerSlack: it walks the sentences from a random one, wrapping
// around, and keeps each sentence that still fits.
func fillerSentences(r *rand.Rand, tokens int) []string {
	if tokens <= 0 {
		return nil
	}
	var out []string
	n, start := 0, r.IntN(len(prose))
	for k := 0; k < len(prose) && n < tokens; k++ {
		s := prose[(start+k)%len(prose)]
		if t := EstimateTokens(" " + s); n+t <= tokens+fillerSlack {
			out = append(out, s)
			n += t
		}
	}
	if n < tokens && len(out) == len(prose) { // more filler than the whole prose: repeat it
		out = append(out, fillerSentences(r, tokens-n)...)
	}
	return out
}

// fillerSlack is how far, in estimated tokens, filler may exceed its target.
const fillerSlack = 4

// namesText holds the candidate names, one a line: the lowercase
// word-initial tokens of the bundled tokenizer (gen_names.go).
//
//go:embed names.txt
var namesText string

// names is the pool that keys, values and list items are drawn from: the
// candidates that are no reserved word, so a question names exactly one
// key and no name is a word of the fixed sentences or the filler prose.
// Each is a single token of the bundled tokenizer (TestNamesSingleTokens).
var names = parseNames(namesText)

func parseNames(text string) []string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") || reservedWords[l] {
			continue
		}
		out = append(out, l)
	}
	if len(out) < 64 {
		panic(fmt.Sprintf("datasets: embedded names.txt holds %d usable names, want at least 64", len(out)))
	}
	return out
}

// distinctWords returns n distinct names none of which is in avoid.
// It panics when the pool holds fewer than n such names.
func distinctWords(r *rand.Rand, n int, avoid map[string]bool) []string {
	free := len(names)
	if len(avoid) > 0 {
		free = 0
		for _, w := range names {
			if !avoid[w] {
				free++
			}
		}
	}
	if n > free {
		panic(fmt.Sprintf("datasets: %d distinct names asked, the pool has %d", n, free))
	}
	seen := map[string]bool{}
	out := make([]string, 0, n)
	for len(out) < n {
		w := names[r.IntN(len(names))]
		if seen[w] || avoid[w] {
			continue
		}
		seen[w] = true
		out = append(out, w)
	}
	return out
}
