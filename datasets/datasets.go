package datasets

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strings"
)

// SuiteVersion is the version of the generators. It changes whenever the
// samples produced for a given (suite, split, seed, index, options) change,
// and it is mixed into every random stream.
const SuiteVersion = 6

// Sample is one chat request with its reference answer.
type Sample struct {
	Suite  string // suite name, one of Suites()
	System string // system message: instructions, data block and filler
	User   string // user turn: one short question
	Answer string // reference answer without the "## " marker
	ID     string // "suite/split/vN/sSEED/INDEX", unique per sample
	// History is the conversation before User (multi-turn samples): each
	// earlier question with its reference answer as the assistant's turn.
	History []Turn
	// Turn is the sample's turn in its conversation (1-based; 0: a
	// single-turn sample).
	Turn int
	// Reply is the assistant message a later turn of the conversation
	// carries for this one when it is not Target: a chat conversation's
	// recorded reply (ChatConversations).
	Reply string
}

// ChatSuite names the multi-turn workload built from chat conversations
// (WildChat's, or generated in their style). Its samples have no reference
// answer: they are not scored, and a bench compares answers with the
// uncached model's instead.
const ChatSuite = "wildchat"

// Scored reports whether the sample has a reference answer to check.
func (s Sample) Scored() bool { return s.Suite != ChatSuite }

// AssistantTurn is the assistant message that the conversation's next turn
// carries after this sample's question: Reply when set, else Target.
func (s Sample) AssistantTurn() string {
	if s.Reply != "" {
		return s.Reply
	}
	return s.Target()
}

// Turn is one earlier exchange of a conversation.
type Turn struct {
	User, Assistant string
}

// Target is the assistant text the model is trained to produce: "## " and
// the answer (the end-of-sequence token follows it).
func (s Sample) Target() string { return AnswerMarker + " " + s.Answer }

// Split tells training samples from evaluation samples.
type Split int

const (
	Train Split = iota // training samples
	Eval               // evaluation samples: held-out data blocks
)

func (s Split) String() string {
	switch s {
	case Train:
		return "train"
	case Eval:
		return "eval"
	}
	return fmt.Sprintf("Split(%d)", int(s))
}

// evalShare is one over the share of data blocks that belong to Eval.
const evalShare = 8

// splitOf returns the split that a data block of a suite belongs to.
func splitOf(suite, block string) Split {
	h := fnv.New64a()
	h.Write([]byte(suite))
	h.Write([]byte{0})
	h.Write([]byte(block))
	if h.Sum64()%evalShare == 0 {
		return Eval
	}
	return Train
}

// GenOptions sets the size of the system messages.
type GenOptions struct {
	// MinRows and MaxRows bound the rows of the data block: table rows
	// (lookup), constants (arithmetic, at most 24), code letters (rule, at
	// most 26) or list items (sequence). Each sample draws uniformly.
	MinRows, MaxRows int
	// MinFiller and MaxFiller bound the filler prose added around the data
	// block, in estimated tokens (EstimateTokens). Each sample draws
	// uniformly; 0 means no filler.
	MinFiller, MaxFiller int
}

// NumLevels is the number of curriculum levels that Level accepts.
const NumLevels = 3

// Level returns the options of a curriculum level: 0 short system messages
// (3–8 rows, little filler; about 45–150 prefix tokens with the bundled
// tokenizer, r ≈ 0.55–0.80 at gen length 16), 1 medium (80–300 tokens,
// r ≈ 0.70–0.89), 2 long (140–470 tokens, r ≈ 0.79–0.93). It panics when
// level is outside [0, NumLevels).
func Level(level int) GenOptions {
	switch level {
	case 0:
		return GenOptions{MinRows: 3, MaxRows: 8, MinFiller: 0, MaxFiller: 40}
	case 1:
		return GenOptions{MinRows: 6, MaxRows: 16, MinFiller: 30, MaxFiller: 120}
	case 2:
		return GenOptions{MinRows: 10, MaxRows: 26, MinFiller: 80, MaxFiller: 240}
	}
	panic(fmt.Sprintf("datasets: level %d outside [0, %d)", level, NumLevels))
}

// DefaultOptions returns the options used for evaluation: system messages of
// roughly 120 to 400 tokens, so that the shared-prefix ratio at gen length 16
// lies in [0.75, 0.95].
func DefaultOptions() GenOptions {
	return GenOptions{MinRows: 8, MaxRows: 24, MinFiller: 60, MaxFiller: 200}
}

// Validate reports whether suite names a suite and opt is usable.
func Validate(suite string, opt GenOptions) error {
	if _, ok := suiteByName(suite); !ok {
		return fmt.Errorf("datasets: unknown suite %q (have %s)", suite, strings.Join(Suites(), ", "))
	}
	switch {
	case opt.MinRows < 1:
		return fmt.Errorf("datasets: MinRows %d < 1", opt.MinRows)
	case opt.MaxRows < opt.MinRows:
		return fmt.Errorf("datasets: MaxRows %d < MinRows %d", opt.MaxRows, opt.MinRows)
	case opt.MinFiller < 0:
		return fmt.Errorf("datasets: MinFiller %d < 0", opt.MinFiller)
	case opt.MaxFiller < opt.MinFiller:
		return fmt.Errorf("datasets: MaxFiller %d < MinFiller %d", opt.MaxFiller, opt.MinFiller)
	case opt.MaxFiller > 100000:
		return fmt.Errorf("datasets: MaxFiller %d > 100000", opt.MaxFiller)
	}
	return nil
}

// Generate returns n samples of a suite and split. Sample i depends only on
// (suite, split, seed, i, opt, SuiteVersion), so Generate(..., n)[:k] equals
// Generate(..., k). Generate panics when Validate(suite, opt) fails or n < 0;
// call Validate first on user input.
func Generate(suite string, split Split, seed int64, n int, opt GenOptions) []Sample {
	if err := Validate(suite, opt); err != nil {
		panic(err)
	}
	if n < 0 {
		panic(fmt.Sprintf("datasets: n %d < 0", n))
	}
	if split != Train && split != Eval {
		panic(fmt.Sprintf("datasets: unknown split %d", int(split)))
	}
	st, _ := suiteByName(suite)
	out := make([]Sample, n)
	for i := range out {
		out[i] = generateOne(st, split, seed, i, opt)
	}
	return out
}

// streamKey mixes everything a sample depends on into the second PCG seed.
func streamKey(suite string, split Split, i int, opt GenOptions) uint64 {
	h := fnv.New64a()
	h.Write([]byte(suite))
	var b [8]byte
	for _, v := range []int{SuiteVersion, int(split), i, opt.MinRows, opt.MaxRows, opt.MinFiller, opt.MaxFiller} {
		binary.LittleEndian.PutUint64(b[:], uint64(v))
		h.Write(b[:])
	}
	return h.Sum64()
}

func generateOne(st suiteDef, split Split, seed int64, i int, opt GenOptions) Sample {
	r := rand.New(rand.NewPCG(uint64(seed), streamKey(st.name, split, i, opt)))
	rows := between(r, opt.MinRows, opt.MaxRows)
	var it item
	for {
		it = st.gen(r, rows)
		if splitOf(st.name, it.block) == split {
			break
		}
	}
	filler := fillerSentences(r, between(r, opt.MinFiller, opt.MaxFiller))
	cut := 0
	if len(filler) > 0 {
		cut = r.IntN(len(filler) + 1)
	}
	return Sample{
		Suite:  st.name,
		System: systemMessage(it.intro, filler, cut, it.block, it.reminder),
		User:   it.user,
		Answer: it.answer,
		ID:     fmt.Sprintf("%s/%s/v%d/s%d/%d", st.name, split, SuiteVersion, seed, i),
	}
}

// systemMessage assembles a system message: the intro, the first cut filler
// sentences, the data block, the rest of the filler and the reminder, as
// paragraphs.
func systemMessage(intro string, filler []string, cut int, block, reminder string) string {
	parts := []string{intro}
	if cut > 0 {
		parts = append(parts, strings.Join(filler[:cut], " "))
	}
	parts = append(parts, block)
	if cut < len(filler) {
		parts = append(parts, strings.Join(filler[cut:], " "))
	}
	parts = append(parts, reminder)
	return strings.Join(parts, "\n\n")
}

// between draws uniformly from [lo, hi].
func between(r *rand.Rand, lo, hi int) int {
	if hi <= lo {
		return lo
	}
	return lo + r.IntN(hi-lo+1)
}

// pick returns a uniformly drawn element of xs.
func pick[T any](r *rand.Rand, xs []T) T { return xs[r.IntN(len(xs))] }
