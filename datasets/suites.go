package datasets

import (
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// item is what a suite generator draws: the data block that carries the
// answer (its text decides the split), the instruction and answer-format
// sentences around it, the user's question and the answer.
type item struct {
	intro, block, reminder string
	user, answer           string
}

type suiteDef struct {
	name  string
	gen   func(r *rand.Rand, rows int) item
	solve func(system, user string) (string, error)
	// others lists the other questions the same system message answers,
	// in the question's own form (Shared): another key, constant, input
	// or name of its data block, in the block's order.
	others func(system, user string) ([]string, error)
}

var suiteDefs = []suiteDef{
	{"lookup", genLookup, solveLookup, othersLookup},
	{"arithmetic", genArithmetic, solveArithmetic, othersArithmetic},
	{"rule", genRule, solveRule, othersRule},
	{"sequence", genSequence, solveSequence, othersSequence},
	{"span", genSpan, solveSpan, othersSpan},
}

// Suites returns the suite names in a fixed order.
func Suites() []string {
	out := make([]string, len(suiteDefs))
	for i, s := range suiteDefs {
		out[i] = s.name
	}
	return out
}

func suiteByName(name string) (suiteDef, bool) {
	for _, s := range suiteDefs {
		if s.name == name {
			return s, true
		}
	}
	return suiteDef{}, false
}

// Solve computes the answer of a request from its text alone, by parsing the
// data block of the system message and the user's question. The generators'
// answers equal Solve's; it exists to prove that every answer is determined by
// the system message and the question.
func Solve(suite, system, user string) (string, error) {
	st, ok := suiteByName(suite)
	if !ok {
		return "", fmt.Errorf("datasets: unknown suite %q", suite)
	}
	return st.solve(system, user)
}

// ---- lookup ----------------------------------------------------------------

var (
	lookupIntros = []string{
		"You are a records assistant. The table below gives the code assigned to each name in this session.",
		"The registry for this session maps every name to a code. Answer from the registry only.",
		"Below is a lookup table of names and their codes. Codes change from session to session.",
	}
	lookupHeaders   = []string{"Table:", "Registry:", "Codes:"}
	lookupReminders = []string{
		"Reply with ## followed by the code only.",
		"Answer with ## and then the code, nothing else.",
	}
	lookupQuestions = []string{
		"What is the code for %s?",
		"Which code belongs to %s?",
		"Look up the code of %s.",
		"Give the code for %s.",
	}
	lookupRow = regexp.MustCompile(`(?m)^\* ([a-z]+) = ([a-z]+)$`)
)

func genLookup(r *rand.Rand, rows int) item {
	words := distinctWords(r, 2*rows, nil)
	keys, vals := words[:rows], words[rows:]
	var b strings.Builder
	b.WriteString(pick(r, lookupHeaders))
	for i := range keys {
		fmt.Fprintf(&b, "\n* %s = %s", keys[i], vals[i])
	}
	q := r.IntN(rows)
	return item{
		intro:    pick(r, lookupIntros),
		block:    b.String(),
		reminder: pick(r, lookupReminders),
		user:     fmt.Sprintf(pick(r, lookupQuestions), keys[q]),
		answer:   vals[q],
	}
}

func solveLookup(system, user string) (string, error) {
	table := map[string]string{}
	for _, m := range lookupRow.FindAllStringSubmatch(system, -1) {
		table[m[1]] = m[2]
	}
	key, err := oneOf(user, func(w string) bool { _, ok := table[w]; return ok })
	if err != nil {
		return "", fmt.Errorf("datasets: lookup: %w", err)
	}
	return table[key], nil
}

// oneOf returns the single word of text for which ok holds.
func oneOf(text string, ok func(string) bool) (string, error) {
	var found []string
	for _, w := range strings.FieldsFunc(text, func(c rune) bool { return c < 'a' || c > 'z' }) {
		if ok(w) && !slices.Contains(found, w) {
			found = append(found, w)
		}
	}
	if len(found) != 1 {
		return "", fmt.Errorf("question %q names %d known words %v, want 1", text, len(found), found)
	}
	return found[0], nil
}

// ---- arithmetic ------------------------------------------------------------

var (
	arithIntros = []string{
		"In this session the following constants are defined. Use them in every calculation.",
		"The variables below keep their values for the whole session.",
		"You are a calculator. These named values are set for this session.",
	}
	// The answer is the calculation with the constant's value written
	// out ("## 17 + 4 = 21"), checked whole: the value must come from the
	// system message and the result must be right. (Up to suite version 4
	// it was the result alone; a small model then has to look the value up
	// and add in one pass, with nothing supervising the lookup.)
	arithReminders = []string{
		"Reply with ## followed by the calculation with the value, like ## 7 + 2 = 9.",
		"Answer with ## and then the worked sum, for example ## 12 - 3 = 9, nothing else.",
	}
	// arithQuestions name the constant last, as every other suite's
	// question ends with its key (up to suite version 5 it was "Compute V +
	// 4.": the bundled model, whose lookup keys on the question's last word,
	// never retrieved the constant). Indexed by arithOps.
	arithQuestions = []string{"Add %d to %s.", "What is %d more than %s?", "Subtract %d from %s.", "What is %d less than %s?"}
	arithOps       = []string{"+", "+", "-", "-"}
	// arithNames are the constant names: capital letters without A and I,
	// which are also English words.
	arithNames = []byte("BCDEFGHJKLMNOPQRSTUVWXYZ")
	arithRow   = regexp.MustCompile(`(?m)^let ([A-Z]) = ([0-9]+)$`)
	// arithQuestion's connector decides the operation: "to" and "more
	// than" add, "from" and "less than" subtract.
	arithQuestion = regexp.MustCompile(`^(?:Add|Subtract|What is) ([0-9]+) (to|from|more than|less than) ([A-Z])[?.]$`)
)

const (
	// Constants lie in [1, arithMaxValue] and answers in [1, arithMaxValue +
	// arithMaxOperand], so that every number is one token of the bundled
	// tokenizer (it has " 1" … " 49").
	// Both were larger (40 and 9) up to suite version 3; the bundled model
	// did not learn the ≈700 sums in the steps this project can afford.
	arithMaxValue   = 20
	arithMaxOperand = 4 // the question's operand lies in [1, arithMaxOperand]
)

func genArithmetic(r *rand.Rand, rows int) item {
	rows = min(rows, len(arithNames))
	names := slices.Clone(arithNames)
	r.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
	names = names[:rows]
	vals := make([]int, rows)
	var b strings.Builder
	b.WriteString("Constants:")
	for i, n := range names {
		vals[i] = 1 + r.IntN(arithMaxValue)
		fmt.Fprintf(&b, "\nlet %c = %d", n, vals[i])
	}
	q := r.IntN(rows)
	k := 1 + r.IntN(arithMaxOperand)
	form := r.IntN(2) // a "+" question
	if vals[q] > k && r.IntN(2) == 0 {
		form += 2 // a "-" question
	}
	op, ans := arithOps[form], vals[q]+k
	if op == "-" {
		ans = vals[q] - k
	}
	return item{
		intro:    pick(r, arithIntros),
		block:    b.String(),
		reminder: pick(r, arithReminders),
		user:     fmt.Sprintf(arithQuestions[form], k, string(names[q])),
		answer:   arithAnswer(vals[q], op, k, ans),
	}
}

// arithAnswer is the worked answer "V op K = R".
func arithAnswer(v int, op string, k, r int) string { return fmt.Sprintf("%d %s %d = %d", v, op, k, r) }

func solveArithmetic(system, user string) (string, error) {
	vals := map[string]int{}
	for _, m := range arithRow.FindAllStringSubmatch(system, -1) {
		v, _ := strconv.Atoi(m[2])
		vals[m[1]] = v
	}
	m := arithQuestion.FindStringSubmatch(user)
	if m == nil {
		return "", fmt.Errorf("datasets: arithmetic: question %q is none of the forms %q", user, arithQuestions)
	}
	v, ok := vals[m[3]]
	if !ok {
		return "", fmt.Errorf("datasets: arithmetic: %s is not defined in the system message", m[3])
	}
	k, _ := strconv.Atoi(m[1])
	if m[2] == "from" || m[2] == "less than" {
		return arithAnswer(v, "-", k, v-k), nil
	}
	return arithAnswer(v, "+", k, v+k), nil
}

// ---- rule ------------------------------------------------------------------

var (
	ruleIntros = []string{
		"This session uses a secret letter code. Each small letter on the left is written as the capital on the right.",
		"Encode text with the letter substitution below: replace every letter by its capital partner.",
		"A letter cipher is active in this session. Swap each letter for the capital it points to.",
	}
	ruleReminders = []string{
		"Reply with ## followed by the coded letters, separated by spaces.",
		"Answer with ## and then the coded letters with spaces between them.",
	}
	// ruleQuestions end with the letters, so that the j-th input letter
	// always lies the same number of tokens before the j-th answer slot.
	ruleQuestions = []string{"Encode: %s", "Apply the code to: %s", "Write in code: %s"}
	ruleRow       = regexp.MustCompile(`(?m)^\* ([a-z]) -> ([A-Z])$`)
	// ruleCodes are the letters a code maps to: capitals, so that a letter
	// occurs once in the table, on the left (a model that finds the input
	// letter and copies what follows cannot land on the right-hand side), and
	// without A and I, which are English words.
	ruleCodes    = arithNames
	ruleQuestion = regexp.MustCompile(`((?: [a-z])+)$`)
)

// ruleInput is the number of letters in the user's input. It is fixed (it
// was 3–5 up to suite version 3): with a fixed length, slot j of the answer
// sits a fixed distance after input letter j, which is what a 1M-parameter
// model can learn to align in the steps this project can afford.
const ruleInput = 3

func genRule(r *rand.Rand, rows int) item {
	rows = min(rows, len(ruleCodes))
	src := r.Perm(26)[:rows]
	slices.Sort(src)
	dst := r.Perm(len(ruleCodes))[:rows]
	var b strings.Builder
	b.WriteString("Code:")
	for i := range src {
		fmt.Fprintf(&b, "\n* %c -> %c", 'a'+src[i], ruleCodes[dst[i]])
	}
	in, out := make([]string, ruleInput), make([]string, ruleInput)
	for j := range in {
		i := r.IntN(rows)
		in[j], out[j] = string(rune('a'+src[i])), string(ruleCodes[dst[i]])
	}
	return item{
		intro:    pick(r, ruleIntros),
		block:    b.String(),
		reminder: pick(r, ruleReminders),
		user:     fmt.Sprintf(pick(r, ruleQuestions), strings.Join(in, " ")),
		answer:   strings.Join(out, " "),
	}
}

func solveRule(system, user string) (string, error) {
	code := map[string]string{}
	for _, m := range ruleRow.FindAllStringSubmatch(system, -1) {
		code[m[1]] = m[2]
	}
	m := ruleQuestion.FindStringSubmatch(user)
	if m == nil {
		return "", fmt.Errorf("datasets: rule: question %q has no spaced letters", user)
	}
	in := strings.Fields(m[1])
	out := make([]string, len(in))
	for i, c := range in {
		d, ok := code[c]
		if !ok {
			return "", fmt.Errorf("datasets: rule: letter %q has no code in the system message", c)
		}
		out[i] = d
	}
	return strings.Join(out, " "), nil
}

// ---- sequence --------------------------------------------------------------

type seqStyle struct{ intro, header, noun string }

var (
	seqStyles = []seqStyle{
		{"Today's delivery route visits the stops below, in this order.", "Route:", "stop"},
		{"The items below are listed in a fixed order for this session.", "Order:", "item"},
		{"Guests are called in the order given below, one after another.", "Queue:", "guest"},
	}
	seqReminders = []string{
		"Reply with ## followed by the name only.",
		"Answer with ## and then the name, nothing else.",
	}
	seqList     = regexp.MustCompile(`(?m)^(?:Route|Order|Queue):((?: [a-z]+,)* [a-z]+)\.$`)
	seqQuestion = regexp.MustCompile(`^Which [a-z]+ comes right (after|before) ([a-z]+)\?$`)
)

// seqQuestionText is the sequence question, with the noun, the direction and
// the word to fill in.
const seqQuestionText = "Which %s comes right %s %s?"

// seqNoun is the noun of the list style whose header the list block
// opens with ("item" when none matches).
func seqNoun(block string) string {
	noun := "item"
	for _, st := range seqStyles {
		if strings.HasPrefix(block, st.header) {
			noun = st.noun
		}
	}
	return noun
}

func seqStyleTexts() []string {
	var out []string
	for _, s := range seqStyles {
		out = append(out, s.intro, s.header, s.noun)
	}
	return append(out, "after", "before")
}

func genSequence(r *rand.Rand, rows int) item {
	rows = max(rows, 2)
	words := distinctWords(r, rows, nil)
	st := pick(r, seqStyles)
	block := st.header + " " + strings.Join(words, ", ") + "."
	var user, ans string
	if r.IntN(2) == 0 {
		i := r.IntN(rows - 1)
		user, ans = fmt.Sprintf(seqQuestionText, st.noun, "after", words[i]), words[i+1]
	} else {
		i := 1 + r.IntN(rows-1)
		user, ans = fmt.Sprintf(seqQuestionText, st.noun, "before", words[i]), words[i-1]
	}
	return item{
		intro:    st.intro,
		block:    block,
		reminder: pick(r, seqReminders),
		user:     user,
		answer:   ans,
	}
}

// seqWords returns the ordered list of a sequence or span system message.
func seqWords(suite, system string) ([]string, error) {
	lm := seqList.FindStringSubmatch(system)
	if lm == nil {
		return nil, fmt.Errorf("datasets: %s: no list in the system message", suite)
	}
	var words []string
	for _, w := range strings.Split(lm[1], ",") {
		words = append(words, strings.TrimSpace(w))
	}
	return words, nil
}

// seqQuery reads a sample of a suite with sequence-style lists: the names
// listed in system, and user's match of q (form says what the question
// must look like).
func seqQuery(suite, system, user string, q *regexp.Regexp, form string) (words, match []string, err error) {
	if words, err = seqWords(suite, system); err != nil {
		return nil, nil, err
	}
	if match = q.FindStringSubmatch(user); match == nil {
		return nil, nil, fmt.Errorf("datasets: %s: question %q is not \"%s\"", suite, user, form)
	}
	return words, match, nil
}

func solveSequence(system, user string) (string, error) {
	words, qm, err := seqQuery("sequence", system, user, seqQuestion, "Which … comes right after|before …?")
	if err != nil {
		return "", err
	}
	i := slices.Index(words, qm[2])
	if i < 0 {
		return "", fmt.Errorf("datasets: sequence: %q is not in the list", qm[2])
	}
	switch {
	case qm[1] == "after" && i+1 < len(words):
		return words[i+1], nil
	case qm[1] == "before" && i > 0:
		return words[i-1], nil
	}
	return "", fmt.Errorf("datasets: sequence: nothing comes %s %q", qm[1], qm[2])
}

// ---- span ------------------------------------------------------------------

// The span suite is the long-answer suite: the answer is the next k (17–22)
// names of an ordered list after a given one, "## a, b, …", 33–41 tokens with
// the bundled tokenizer, so it spans at least two blocks of 32 answer slots.
// Its lists use the sequence suite's styles, so a span sample's data block
// reads like a sequence sample's.

// Span answer lengths (names listed).
const spanMin, spanMax = 17, 22

var (
	spanReminders = []string{
		"Reply with ## followed by the names, separated by commas.",
		"Answer with ## and then the names in order, nothing else.",
	}
	spanQuestion = regexp.MustCompile(`^List the (\d+) [a-z]+s that come right after ([a-z]+), in order\.$`)
)

// spanQuestionText is the span question, with the count, the noun and the
// word after which the span starts.
const spanQuestionText = "List the %d %ss that come right after %s, in order."

func genSpan(r *rand.Rand, rows int) item {
	k := between(r, spanMin, spanMax)
	n := max(rows, k+1) + r.IntN(4)
	words := distinctWords(r, n, nil)
	st := pick(r, seqStyles)
	i := r.IntN(n - k)
	return item{
		intro:    st.intro,
		block:    st.header + " " + strings.Join(words, ", ") + ".",
		reminder: pick(r, spanReminders),
		user:     fmt.Sprintf(spanQuestionText, k, st.noun, words[i]),
		answer:   strings.Join(words[i+1:i+1+k], ", "),
	}
}

func solveSpan(system, user string) (string, error) {
	words, qm, err := seqQuery("span", system, user, spanQuestion, "List the K … that come right after …, in order.")
	if err != nil {
		return "", err
	}
	k, err := strconv.Atoi(qm[1])
	if err != nil || k < 1 {
		return "", fmt.Errorf("datasets: span: bad count %q", qm[1])
	}
	i := slices.Index(words, qm[2])
	if i < 0 {
		return "", fmt.Errorf("datasets: span: %q is not in the list", qm[2])
	}
	if i+k >= len(words) {
		return "", fmt.Errorf("datasets: span: fewer than %d names follow %q", k, qm[2])
	}
	return strings.Join(words[i+1:i+1+k], ", "), nil
}
