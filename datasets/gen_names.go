//go:build ignore

// gen_names writes names.txt: the candidate key and list names of the task
// suites, every lowercase word-initial token ("Ġ" + 3–7 letters) of the
// bundled tokenizer. A name that is one token is one recall unit for the
// model: the suites test whether a model reads its prefix, not whether it
// can match names spelt over several BPE pieces (docs/training.md). The
// package drops the reserved words (prose and fixed sentences) at init.
// Run it with `go generate ./datasets` after the tokenizer changes.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
)

func main() {
	data, err := os.ReadFile("../models/llada-tiny/tokenizer.json")
	if err != nil {
		fmt.Fprintln(os.Stderr, "gen_names:", err)
		os.Exit(1)
	}
	var tok struct {
		Model struct {
			Vocab map[string]int `json:"vocab"`
		} `json:"model"`
	}
	if err := json.Unmarshal(data, &tok); err != nil {
		fmt.Fprintln(os.Stderr, "gen_names: tokenizer.json:", err)
		os.Exit(1)
	}
	word := regexp.MustCompile(`^Ġ[a-z]{3,7}$`)
	var names []string
	for s := range tok.Model.Vocab {
		if word.MatchString(s) {
			names = append(names, strings.TrimPrefix(s, "Ġ"))
		}
	}
	sort.Strings(names)
	out := "# Single-token names of models/llada-tiny/tokenizer.json, written by gen_names.go.\n" +
		strings.Join(names, "\n") + "\n"
	if err := os.WriteFile("names.txt", []byte(out), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "gen_names:", err)
		os.Exit(1)
	}
}
