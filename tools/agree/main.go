// Command agree checks that the Go engine and the PyTorch reference
// (tools/train/answers.py) give the same greedy answers on a checkpoint:
//
//	python3 tools/train/answers.py --model models/llada-tiny --corpus data/corpus --per-suite 5 --out answers.json
//	go run ./tools/agree -answers answers.json -model models/llada-tiny
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"slices"

	"github.com/dlmcache/dlmcache/model/cpu"
	"github.com/dlmcache/dlmcache/model/load"
	"github.com/dlmcache/dlmcache/model/sample"
	"github.com/dlmcache/dlmcache/regime"
)

type answers struct {
	regime.Regime
	Cases []struct {
		ID        string  `json:"id"`
		PromptIDs []int32 `json:"prompt_ids"`
		AnswerIDs []int32 `json:"answer_ids"`
	} `json:"cases"`
}

func main() {
	path := flag.String("answers", "answers.json", "answers.py output")
	dir := flag.String("model", "models/llada-tiny", "model directory")
	flag.Parse()
	same, n, err := run(*path, *dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("%d of %d greedy answers identical\n", same, n)
	if same != n {
		os.Exit(1)
	}
}

// run generates each case of the answers file at path greedily on the model
// in dir, printing each answer that differs; it returns how many are the
// same, of how many.
func run(path, dir string) (same, n int, err error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, err
	}
	var a answers
	if err := json.Unmarshal(raw, &a); err != nil {
		return 0, 0, err
	}
	m, err := load.Load(dir, cpu.New(0))
	if err != nil {
		return 0, 0, err
	}
	for _, c := range a.Cases {
		g, err := sample.Generate(context.Background(), m.Network, c.PromptIDs, 0, sample.GenOptions{Regime: a.Regime}, nil)
		if err != nil {
			return 0, 0, err
		}
		if slices.Equal(g.Answer, c.AnswerIDs) {
			same++
		} else {
			fmt.Printf("%s: Go %v, PyTorch %v\n", c.ID, g.Answer, c.AnswerIDs)
		}
	}
	return same, len(a.Cases), nil
}
