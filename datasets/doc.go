// Package datasets generates the chat task suites that dlmcache trains its
// bundled model on and measures accuracy with.
//
// Every suite is a set of chat samples (system message, user turn, answer)
// whose answer can only be found by reading the system message: the system
// message holds a table, a set of named constants, a letter code or an ordered
// list, buried among filler prose, and the user turn asks one short question
// about it. This is exactly the situation that shared-prefix K/V caching can
// break, because a diffusion model's prefix keys and values depend on the
// user's text.
//
// Suites (see Suites):
//
//	lookup      "* sep = lef" rows;     "What is the code for sep?"     → lef
//	arithmetic  "let X = 17" rows;      "Add 4 to X."                   → 17 + 4 = 21
//	rule        "* c -> M" letter code; "Encode: c a b"                 → M Q B
//	sequence    "Order: sep, lef, dat."; "Which item comes right after lef?" → dat
//	span        the same lists, 18–26 names; "List the 17 items that come right after sep, in order."
//	            → lef, dat, … (the long-answer suite: 17–22 names, 34–44 answer tokens,
//	            at least two blocks of 32 answer slots)
//
// The model answers in the form "## answer" (Sample.Target); ExtractAnswer
// takes the text after the first "##" and CheckAnswer compares it strictly
// with Sample.Answer.
//
// Generation is deterministic: the same suite, split, seed, index, options
// and SuiteVersion give the same sample, and sample i does not depend on how
// many samples are asked for. Train and Eval samples never share a system
// message's data block (table, constants, code or list): the split of a data
// block is decided by a hash of its text, and each split rejects the blocks
// that hash into the other, so evaluation always runs on held-out tables and
// rules whatever the seeds.
//
// The system message's size is steered by GenOptions (rows in the data block,
// filler prose in estimated tokens); Level gives a curriculum from short to
// long system messages, and DefaultOptions gives system messages whose
// shared-prefix ratio r = prefix tokens / (prompt tokens + gen length) lies in
// [0.75, 0.95] for the bundled tokenizer and gen length 16.
//
// The filler prose (prose.txt, embedded) is a set of sentences extracted by
// gen_prose.go from license texts that Debian's base-files package ships in
// /usr/share/common-licenses. Keys, values and list items are drawn from
// names.txt (embedded, written by gen_names.go): the bundled tokenizer's
// single-token lowercase words, less every word of the filler and of the
// suites' fixed sentences, so each name is one token and no question names
// two keys.
package datasets

//go:generate go run gen_prose.go
//go:generate go run gen_names.go
