package datasets

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// The other questions a suite's system message answers (suiteDef.others,
// for Shared and Conversations): the sample's question with the item it
// asks about replaced by each other item of the data block that gives a
// well-formed answer, in the block's order. Solve answers each of them.

// othersLookup asks for every other key of the table.
func othersLookup(system, user string) ([]string, error) {
	rows := lookupRow.FindAllStringSubmatch(system, -1)
	// The asked key as Solve finds it: the question's one word that is a key.
	asked, err := oneOf(user, func(w string) bool {
		return slices.ContainsFunc(rows, func(r []string) bool { return r[1] == w })
	})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, r := range rows {
		if r[1] != asked {
			out = append(out, strings.Replace(user, " "+asked, " "+r[1], 1))
		}
	}
	return out, nil
}

// othersArithmetic asks the same operation of every other constant whose
// answer stays positive.
func othersArithmetic(system, user string) ([]string, error) {
	m := arithQuestion.FindStringSubmatchIndex(user)
	if m == nil {
		return nil, fmt.Errorf("question %q is none of the forms %q", user, arithQuestions)
	}
	k, _ := strconv.Atoi(user[m[2]:m[3]])
	sub := user[m[4]:m[5]] == "from" || user[m[4]:m[5]] == "less than"
	asked := user[m[6]:m[7]]
	var out []string
	for _, r := range arithRow.FindAllStringSubmatch(system, -1) {
		v, _ := strconv.Atoi(r[2])
		if r[1] == asked || sub && v <= k {
			continue
		}
		out = append(out, user[:m[6]]+r[1]+user[m[7]:])
	}
	return out, nil
}

// othersRule shifts each input letter to the next coded letter of the
// table, once for each other position (the letters' pattern kept).
func othersRule(system, user string) ([]string, error) {
	var src []string
	for _, r := range ruleRow.FindAllStringSubmatch(system, -1) {
		src = append(src, r[1])
	}
	m := ruleQuestion.FindStringSubmatchIndex(user)
	if m == nil {
		return nil, fmt.Errorf("question %q has no spaced letters", user)
	}
	in := strings.Fields(user[m[2]:m[3]])
	idx := make([]int, len(in))
	for i, c := range in {
		if idx[i] = slices.Index(src, c); idx[i] < 0 {
			return nil, fmt.Errorf("letter %q has no code in the system message", c)
		}
	}
	var out []string
	for q := 1; q < len(src); q++ {
		letters := make([]string, len(in))
		for i := range in {
			letters[i] = src[(idx[i]+q)%len(src)]
		}
		out = append(out, user[:m[2]]+" "+strings.Join(letters, " "))
	}
	return out, nil
}

// othersSequence asks in the same direction about every other name that
// has a neighbour there.
func othersSequence(system, user string) ([]string, error) {
	words, qm, err := seqQuery("sequence", system, user, seqQuestion, "Which … comes right after|before …?")
	if err != nil {
		return nil, err
	}
	var out []string
	for i, w := range words {
		if w == qm[2] || qm[1] == "after" && i == len(words)-1 || qm[1] == "before" && i == 0 {
			continue
		}
		out = append(out, strings.TrimSuffix(user, qm[2]+"?")+w+"?")
	}
	return out, nil
}

// othersSpan asks for the same number of names after every other name
// that has that many after it.
func othersSpan(system, user string) ([]string, error) {
	words, qm, err := seqQuery("span", system, user, spanQuestion, "List the K … that come right after …, in order.")
	if err != nil {
		return nil, err
	}
	k, _ := strconv.Atoi(qm[1])
	var out []string
	for i, w := range words {
		if w != qm[2] && i+k < len(words) {
			out = append(out, strings.Replace(user, " after "+qm[2]+",", " after "+w+",", 1))
		}
	}
	return out, nil
}
