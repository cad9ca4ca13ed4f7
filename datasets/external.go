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
// traffic behind one deployed system prompt does. dlmcache calibrate draws
// its requests from External first. Heldout is a second register of the
// same shape (household and travel notes) that calibration never sees:
// it tests a table on traffic it was not calibrated on (dlmcache lut
// verify, the served checks in docs/results.md).

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

// heldoutIntros and heldoutProse are Heldout's: no sentence of External's,
// the suites' or the training corpus's.
var heldoutIntros = map[string][]string{
	"lookup": {
		"Key cabinet log: each tenant below holds the key with the code beside the name.",
		"Guest list for the dinner. Every guest is seated at the table code shown.",
	},
	"arithmetic": {
		"Pantry count for the week. The quantities below stay as they are.",
		"Garden diary: these amounts were weighed at the harvest.",
	},
	"rule": {
		"Holiday card cipher: write each small letter as the capital paired with it.",
		"Treasure hunt key. Swap every lower case letter for the capital beside it.",
	},
	"sequence": {
		"The ferry calls at the harbours below, one after another.",
		"The recipe's steps, in the order the cook follows them.",
	},
	"span": {
		"The choir sings the pieces below in the order given.",
		"Our hiking route passes these huts one after the other.",
	},
}

var heldoutProse = []string{
	"Water the tomatoes early, before the sun is high.",
	"The train to the coast leaves from platform four.",
	"Keep the spare house key in the blue tin by the door.",
	"Bring a warm jacket, the evenings on the lake are cold.",
	"The bakery on the corner closes at noon on Sundays.",
	"Hotel breakfast is served on the terrace until ten.",
	"Cut the roses back after the first frost.",
	"The recycling bins are emptied every other Thursday.",
	"A day pass covers the buses and the cable car.",
	"Soak the beans overnight and rinse them twice.",
	"The museum is free on the first Sunday of the month.",
	"Feed the cat half a tin in the morning and half at night.",
	"Pack the tent poles in the long bag, not the rucksack.",
	"The old bridge is closed to cars for the summer.",
	"Sow the carrots in rows a hand apart.",
	"Check the tide table before walking out to the island.",
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

// ExternalSuites are the suites External and Heldout draw from: every
// suite, the long-answer copies (span) among them.
var ExternalSuites = []string{"lookup", "arithmetic", "rule", "sequence", "span"}

// A register is a generator of system messages the suites' generators
// never produce: its opening sentences per suite and its filler prose.
// External and Heldout are two of them, with disjoint sentences, so a
// request of one is never a request of the other.
type register struct {
	name   string              // the samples' ID prefix
	intros map[string][]string // per suite
	prose  []string            // filler sentences
	salt   uint64              // the random stream's, per register
}

var (
	externalRegister = register{name: "external", intros: externalIntros, prose: externalProse, salt: 0xe87e}
	heldoutRegister  = register{name: "heldout", intros: heldoutIntros, prose: heldoutProse, salt: 0x4e1d}
)

// External returns groups system messages, questions questions each (so
// groups·questions samples; their IDs are "external/G/Q"), cycling
// through ExternalSuites, with held-out data blocks (the Eval split's).
// Calibration draws its requests here.
func External(groups, questions int, seed int64) []Sample {
	return externalRegister.samples(groups, questions, seed)
}

// Heldout is External's counterpart for verification (IDs
// "heldout/G/Q"): the same suites, data formats and shapes, but opening
// sentences and filler (household, travel and garden notes) of its own,
// which neither calibration nor training ever sees. dlmcache lut verify's
// builtin requests and the served checks of docs/results.md draw here.
func Heldout(groups, questions int, seed int64) []Sample {
	return heldoutRegister.samples(groups, questions, seed)
}

func (g register) filler(r *rand.Rand, words int) []string {
	var out []string
	for n := 0; n < words; {
		s := g.prose[r.IntN(len(g.prose))]
		out = append(out, s)
		n += len(strings.Fields(s))
	}
	return out
}

func (g register) samples(groups, questions int, seed int64) []Sample {
	var out []Sample
	for i := range groups {
		suite := ExternalSuites[i%len(ExternalSuites)]
		st, _ := suiteByName(suite)
		r := rand.New(rand.NewPCG(uint64(seed), g.salt^uint64(i)))
		rows := between(r, 3, 22)
		var it item
		for {
			it = st.gen(r, rows)
			if splitOf(st.name, it.block) == Eval {
				break
			}
		}
		filler := g.filler(r, between(r, 0, 160))
		cut := r.IntN(len(filler) + 1)
		system := systemMessage(pick(r, g.intros[suite]), filler, cut, it.block, it.reminder)
		for q := range questions {
			user := it.user
			if q > 0 {
				user = externalQuestion(r, suite, it.block)
			}
			ans, err := Solve(suite, system, user)
			if err != nil {
				panic(fmt.Sprintf("datasets: %s %d/%d: %v", g.name, i, q, err))
			}
			out = append(out, Sample{Suite: suite, System: system, User: user, Answer: ans, ID: fmt.Sprintf("%s/%d/%d", g.name, i, q)})
		}
	}
	return out
}
