package datasets

import (
	"fmt"
	"math/rand/v2"
	"strings"
)

// External samples are requests whose system messages the suites'
// generators never produce: other opening sentences, filler prose of
// another register (operations notes, not the licence texts the model was
// trained among), 3–22 rows and 0–160 words of filler, in the suites'
// data and answer formats. Several questions share each system message, as
// traffic behind one deployed system prompt does. They test a cache table
// on traffic it was not calibrated on (dlmcache lut verify, the
// cross-request measurements in docs/results.md).

var externalIntros = map[string][]string{
	"lookup": {
		"Support desk notes for today. Each customer name below has an account code.",
		"Inventory sheet: every item name is paired with its bin code.",
	},
	"arithmetic": {
		"Budget worksheet. The amounts below are fixed for this conversation.",
		"Lab notebook: these quantities were measured this morning.",
	},
	"rule": {
		"Field radio protocol: spell every letter with the capital assigned to it.",
		"Puzzle of the week. Each lower case letter stands for the capital next to it.",
	},
	"sequence": {
		"The shuttle bus calls at the places below, one after the other.",
		"Steps of the onboarding checklist, in the order they happen.",
	},
	"span": {
		"The relay team runs its legs in the order listed below.",
		"Tonight's playlist: the tracks below play one after the other.",
	},
}

// externalProse is filler of another register than the training prose.
var externalProse = []string{
	"The morning shift starts at seven and ends at three.",
	"Please keep the loading dock clear after the last delivery.",
	"Coffee in the break room is refilled twice a day.",
	"Visitors sign in at the front desk and wear a badge.",
	"The weekly report goes out every Friday afternoon.",
	"Parking on the north side is reserved for guests.",
	"Printers on the second floor need a new toner cartridge.",
	"Meeting rooms can be booked up to two weeks ahead.",
	"The fire drill is planned for the first Tuesday of the month.",
	"Lost items are kept at reception for thirty days.",
	"Night staff should lock the side entrance at ten.",
	"Feedback forms are in the tray next to the door.",
	"The heating is switched off during the summer months.",
	"New laptops arrive with the standard software already installed.",
	"Deliveries larger than one pallet need a booked slot.",
	"The canteen serves soup and salad until two.",
}

func externalFiller(r *rand.Rand, words int) []string {
	var out []string
	for n := 0; n < words; {
		s := externalProse[r.IntN(len(externalProse))]
		out = append(out, s)
		n += len(strings.Fields(s))
	}
	return out
}

// externalQuestion asks another question about a system message's data
// block, in the suite's question format.
func externalQuestion(r *rand.Rand, suite, block string) string {
	switch suite {
	case "lookup":
		rows := lookupRow.FindAllStringSubmatch(block, -1)
		return fmt.Sprintf(pick(r, lookupQuestions), rows[r.IntN(len(rows))][1])
	case "arithmetic":
		rows := arithRow.FindAllStringSubmatch(block, -1)
		row := rows[r.IntN(len(rows))]
		k := 1 + r.IntN(arithMaxOperand)
		form := r.IntN(2)
		var v int
		fmt.Sscan(row[2], &v)
		if v > k && r.IntN(2) == 0 {
			form += 2
		}
		return fmt.Sprintf(arithQuestions[form], k, row[1])
	case "rule":
		rows := ruleRow.FindAllStringSubmatch(block, -1)
		in := make([]string, ruleInput)
		for j := range in {
			in[j] = rows[r.IntN(len(rows))][1]
		}
		return fmt.Sprintf(pick(r, ruleQuestions), strings.Join(in, " "))
	case "sequence":
		words, _ := seqWords(suite, block)
		noun := seqNoun(block)
		if r.IntN(2) == 0 {
			return fmt.Sprintf(seqQuestionText, noun, "after", words[r.IntN(len(words)-1)])
		}
		return fmt.Sprintf(seqQuestionText, noun, "before", words[1+r.IntN(len(words)-1)])
	case "span":
		words, _ := seqWords(suite, block)
		noun := seqNoun(block)
		k := between(r, spanMin, min(spanMax, len(words)-1))
		return fmt.Sprintf(spanQuestionText, k, noun, words[r.IntN(len(words)-k)])
	}
	panic("datasets: no external questions for suite " + suite)
}

// ExternalSuites are the suites External draws from: every suite, the
// long-answer copies (span) among them.
var ExternalSuites = []string{"lookup", "arithmetic", "rule", "sequence", "span"}

// External returns groups system messages, questions questions each (so
// groups·questions samples; their IDs are "external/G/Q"), cycling
// through ExternalSuites, with held-out data blocks (the Eval split's).
func External(groups, questions int, seed int64) []Sample {
	var out []Sample
	for g := range groups {
		suite := ExternalSuites[g%len(ExternalSuites)]
		st, _ := suiteByName(suite)
		r := rand.New(rand.NewPCG(uint64(seed), 0xe87e^uint64(g)))
		rows := between(r, 3, 22)
		var it item
		for {
			it = st.gen(r, rows)
			if splitOf(st.name, it.block) == Eval {
				break
			}
		}
		filler := externalFiller(r, between(r, 0, 160))
		cut := r.IntN(len(filler) + 1)
		system := systemMessage(pick(r, externalIntros[suite]), filler, cut, it.block, it.reminder)
		for q := range questions {
			user := it.user
			if q > 0 {
				user = externalQuestion(r, suite, it.block)
			}
			ans, err := Solve(suite, system, user)
			if err != nil {
				panic(fmt.Sprintf("datasets: external %d/%d: %v", g, q, err))
			}
			out = append(out, Sample{Suite: suite, System: system, User: user, Answer: ans, ID: fmt.Sprintf("external/%d/%d", g, q)})
		}
	}
	return out
}
