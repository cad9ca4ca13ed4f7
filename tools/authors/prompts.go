//go:build ignore

// Command prompts writes the held-out requests the authors' reference
// implementations are run on (tools/authors/run.py): the first --limit
// held-out samples of every task suite (bench's --suite all, seed 1),
// rendered with the bundled model's chat template.
//
//	go run tools/authors/prompts.go -limit 4 > /tmp/prompts.json
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"

	"github.com/dlmcache/dlmcache/datasets"
	"github.com/dlmcache/dlmcache/model/tokenizer"
	"github.com/dlmcache/dlmcache/profile"
)

func main() {
	limit := flag.Int("limit", 4, "samples per suite")
	dir := flag.String("model", "models/llada-tiny", "model directory (its tokenizer and chat template)")
	flag.Parse()
	if err := run(*limit, *dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// run writes the first limit held-out samples of every suite, rendered
// with the chat template of the model in dir, to stdout as JSON.
func run(limit int, dir string) error {
	tok, err := tokenizer.Load(dir)
	if err != nil {
		return err
	}
	samples, err := profile.SuiteSamples([]string{"all"}, limit, 1, datasets.DefaultOptions())
	if err != nil {
		return err
	}
	type prompt struct {
		Suite     string  `json:"suite"`
		ID        string  `json:"id"`
		PromptIDs []int32 `json:"prompt_ids"`
		PrefixLen int     `json:"prefix_len"`
	}
	var out []prompt
	for _, s := range samples {
		ids, pl, err := tok.EncodeChat(s.System, s.User)
		if err != nil {
			return err
		}
		out = append(out, prompt{s.Suite, s.ID, ids, pl})
	}
	return json.NewEncoder(os.Stdout).Encode(out)
}
