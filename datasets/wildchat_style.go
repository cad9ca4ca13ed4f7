package datasets

import (
	_ "embed"
	"fmt"
	"math/rand/v2"
	"strings"
)

// wildchatStyleText is the material of the generator: topics, question and
// request templates, follow-up lines, situations, and texts and code that
// users paste. It was written for this project (see the file's header).
//
//go:embed wildchat_style.txt
var wildchatStyleText string

var wildchatStyle = wildchatParseStyle(wildchatStyleText)

// wildchatParseStyle splits the material into its sections and checks that
// every section the generator draws from has entries to choose from.
func wildchatParseStyle(text string) map[string][]string {
	out := wildchatSplitStyle(text)
	for _, s := range []string{"topics", "questions", "requests", "followups", "situations", "text_asks", "code_asks", "snippets", "paragraphs"} {
		if len(out[s]) < 2 {
			panic("datasets: embedded wildchat_style.txt lacks section [" + s + "]")
		}
	}
	return out
}

// wildchatSplitStyle splits the material into its [sections]. Entries are
// lines, except in snippets and paragraphs, where "---" lines separate them.
func wildchatSplitStyle(text string) map[string][]string {
	out := map[string][]string{}
	multi := map[string]bool{"snippets": true, "paragraphs": true}
	var sec string
	var cur []string
	flush := func() {
		if len(cur) > 0 {
			out[sec] = append(out[sec], strings.TrimRight(strings.Join(cur, "\n"), "\n"))
		}
		cur = nil
	}
	for _, l := range strings.Split(text, "\n") {
		switch {
		case strings.HasPrefix(l, "#") && sec == "":
		case strings.HasPrefix(l, "[") && strings.HasSuffix(l, "]"):
			flush()
			sec = l[1 : len(l)-1]
		case multi[sec] && l == "---":
			flush()
		case multi[sec]:
			cur = append(cur, l)
		case strings.TrimSpace(l) != "":
			out[sec] = append(out[sec], strings.TrimSpace(l))
		}
	}
	flush()
	return out
}

// GenerateWildChatStyle returns n synthetic user prompts in the manner of
// WildChat's first user turns, for profiling without the real data: short
// questions, writing requests with constraints, a personal situation
// followed by an ask, pasted code with a question, pasted text (one to ten
// paragraphs) with a task, and lists of several questions. Lengths run from
// three words to about 800 (median about 30, as in WildChat, where most
// first turns are short). Prompt i depends only on seed and i.
func GenerateWildChatStyle(seed int64, n int) []Prompt {
	out := make([]Prompt, n)
	for i := range out {
		out[i] = wildchatStyleOne(seed, i)
	}
	return out
}

func wildchatStyleOne(seed int64, i int) Prompt {
	r := rand.New(rand.NewPCG(uint64(seed), 0x5eed_c4a7_0000_0000^uint64(i)))
	return Prompt{
		ID:       fmt.Sprintf("wildchat-style/%d/%d", seed, i),
		Text:     wildchatStylePrompt(r),
		Language: "English",
		Source:   "generated",
	}
}

// GenerateWildChatStyleConversations returns n synthetic conversations of
// the given number of exchanges (Prompt.Exchanges), for a multi-turn
// workload without the real data: the first user message is a
// GenerateWildChatStyle prompt, later ones are short follow-ups (a new
// question on a topic, a constraint on the last answer, or both), and the
// assistant's replies are one to three paragraphs of the generator's prose.
// Conversation i depends only on seed and i, and its first message is
// GenerateWildChatStyle(seed, …)[i]'s.
func GenerateWildChatStyleConversations(seed int64, n, turns int) []Prompt {
	out := make([]Prompt, n)
	for i := range out {
		out[i] = wildchatStyleConversation(seed, i, turns)
	}
	return out
}

func wildchatStyleConversation(seed int64, i, turns int) Prompt {
	p := wildchatStyleOne(seed, i)
	m := wildchatStyle
	r := rand.New(rand.NewPCG(uint64(seed), 0xc0_4e25_0000_0000^uint64(i)))
	for k := range turns {
		user := p.Text
		if k > 0 {
			var b strings.Builder
			if r.IntN(3) > 0 {
				b.WriteString(wildchatFill(r, wildchatPick(r, m["questions"])))
				wildchatFollowups(r, &b, 0, 1)
			} else {
				wildchatFollowups(r, &b, 1, 2)
			}
			user = strings.TrimSpace(b.String())
		}
		reply := strings.Join(wildchatDistinct(r, m["paragraphs"], 1+r.IntN(3)), "\n\n")
		p.Exchanges = append(p.Exchanges, Turn{User: user, Assistant: reply})
	}
	return p
}

func wildchatStylePrompt(r *rand.Rand) string {
	m := wildchatStyle
	var b strings.Builder
	switch k := r.IntN(20); {
	case k < 5: // a short question
		b.WriteString(wildchatFill(r, wildchatPick(r, m["questions"])))
		wildchatFollowups(r, &b, 0, 1)
	case k < 9: // a writing request with constraints
		b.WriteString(wildchatFill(r, wildchatPick(r, m["requests"])))
		wildchatFollowups(r, &b, 0, 3)
	case k < 12: // a situation, then an ask
		for _, s := range wildchatDistinct(r, m["situations"], 1+r.IntN(3)) {
			b.WriteString(s + " ")
		}
		if r.IntN(3) == 0 {
			b.WriteString("Here is some background:\n\n" + wildchatPick(r, m["paragraphs"]) + "\n\n")
		}
		if r.IntN(2) == 0 {
			b.WriteString(wildchatFill(r, wildchatPick(r, m["questions"])))
		} else {
			b.WriteString(wildchatFill(r, wildchatPick(r, m["requests"])))
		}
		wildchatFollowups(r, &b, 0, 2)
	case k < 15: // pasted code
		sn := wildchatPick(r, m["snippets"])
		lang, code, _ := strings.Cut(sn, "\n")
		b.WriteString(wildchatPick(r, m["code_asks"]) + "\n\n```" + lang + "\n" + code + "\n```")
		wildchatFollowups(r, &b, 0, 1)
	case k < 19: // pasted text
		b.WriteString(wildchatPick(r, m["text_asks"]) + "\n\n")
		b.WriteString(strings.Join(wildchatDistinct(r, m["paragraphs"], 1+r.IntN(10)), "\n\n"))
		wildchatFollowups(r, &b, 0, 1)
	default: // several questions at once
		b.WriteString("I have a few questions.\n")
		for j := range 3 + r.IntN(6) {
			fmt.Fprintf(&b, "%d. %s\n", j+1, wildchatFill(r, wildchatPick(r, m["questions"])))
		}
		if r.IntN(2) == 0 {
			b.WriteString("\nFor context, this is what I read:\n\n" + strings.Join(wildchatDistinct(r, m["paragraphs"], 1+r.IntN(3)), "\n\n"))
		}
		wildchatFollowups(r, &b, 1, 2)
	}
	s := strings.TrimSpace(b.String())
	if r.IntN(6) == 0 { // casual typing: no capital, no final full stop
		s = strings.ToLower(s[:1]) + s[1:]
		s = strings.TrimSuffix(s, ".")
	}
	return s
}

// wildchatFill replaces {topic} and {topic2} by two different topics.
func wildchatFill(r *rand.Rand, tmpl string) string {
	t := wildchatDistinct(r, wildchatStyle["topics"], 2)
	return strings.NewReplacer("{topic}", t[0], "{topic2}", t[1]).Replace(tmpl)
}

// wildchatFollowups appends between lo and hi distinct follow-up lines.
func wildchatFollowups(r *rand.Rand, b *strings.Builder, lo, hi int) {
	for _, f := range wildchatDistinct(r, wildchatStyle["followups"], lo+r.IntN(hi-lo+1)) {
		b.WriteString(" " + f)
	}
}

// wildchatDistinct returns k distinct entries of xs in random order.
func wildchatDistinct(r *rand.Rand, xs []string, k int) []string {
	idx := r.Perm(len(xs))[:min(k, len(xs))]
	out := make([]string, len(idx))
	for i, j := range idx {
		out[i] = xs[j]
	}
	return out
}

func wildchatPick(r *rand.Rand, xs []string) string { return xs[r.IntN(len(xs))] }
