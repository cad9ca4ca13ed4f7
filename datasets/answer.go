package datasets

import "strings"

// AnswerMarker precedes the answer in the model's output: "## answer".
const AnswerMarker = "##"

// answerEnds are the texts that end an answer: the end-of-sequence and
// end-of-turn special tokens as a tokenizer decodes them.
var answerEnds = []string{"<|endoftext|>", "<|eot_id|>"}

// ExtractAnswer returns the text after the first "##" of a generated text,
// up to the first end-of-sequence or end-of-turn token (or the end of the
// text), with surrounding white space trimmed. ok is false when the text has
// no "##".
func ExtractAnswer(text string) (answer string, ok bool) {
	i := strings.Index(text, AnswerMarker)
	if i < 0 {
		return "", false
	}
	text = text[i+len(AnswerMarker):]
	for _, e := range answerEnds {
		if j := strings.Index(text, e); j >= 0 {
			text = text[:j]
		}
	}
	return strings.TrimSpace(text), true
}

// CheckAnswer reports whether a generated text answers correctly: its
// extracted answer (ExtractAnswer) must equal want exactly. Every suite
// checks strictly: no case folding, no number normalisation, the rule suite's
// letters separated by single spaces. suite is accepted so that a later
// suite may define its own comparison; an unknown suite compares exactly too.
func CheckAnswer(suite, generated, want string) bool {
	got, ok := ExtractAnswer(generated)
	return ok && got == strings.TrimSpace(want)
}
