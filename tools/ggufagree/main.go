// Command ggufagree runs the task suites' held-out samples through two
// checkpoints of the same model — typically a Hugging Face directory and a
// GGUF converted from it — with greedy decoding and no caching, the two
// taking turns request by request, and prints each one's per-suite accuracy
// and the fraction of answers identical to the first one's:
//
//	go run ./tools/ggufagree -a models/llada-tiny -b llada-tiny-q8_0.gguf -limit 50
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/dlmcache/dlmcache/cache"
	"github.com/dlmcache/dlmcache/datasets"
	"github.com/dlmcache/dlmcache/model"
	"github.com/dlmcache/dlmcache/model/cpu"
	"github.com/dlmcache/dlmcache/profile"
)

func main() {
	a := flag.String("a", "models/llada-tiny", "reference model (directory or GGUF)")
	b := flag.String("b", "", "model compared with it (directory or GGUF)")
	suites := flag.String("suite", "all", "task suites (comma-separated)")
	limit := flag.Int("limit", 50, "samples per suite")
	seed := flag.Int64("seed", 1, "sample seed")
	threads := flag.Int("threads", 0, "CPU threads (0: all cores)")
	asJSON := flag.Bool("json", false, "print JSON")
	flag.Parse()
	if err := run(*a, *b, strings.Split(*suites, ","), *limit, *seed, *threads, *asJSON); err != nil {
		fmt.Fprintln(os.Stderr, "ggufagree:", err)
		os.Exit(1)
	}
}

func run(pa, pb string, suites []string, limit int, seed int64, threads int, asJSON bool) error {
	if pb == "" {
		return fmt.Errorf("-b is required")
	}
	samples, err := profile.SuiteSamples(suites, limit, seed, datasets.DefaultOptions())
	if err != nil {
		return err
	}
	var es []*profile.Evaluator
	for _, p := range []string{pa, pb} {
		m, err := model.Load(p, cpu.New(threads))
		if err != nil {
			return err
		}
		defer m.Close()
		none, err := cache.New("none", cache.Options{})
		if err != nil {
			return err
		}
		gen := model.GenOptions{GenLength: m.Card.GenLength, Steps: m.Card.Steps, BlockLength: m.Card.BlockLength}
		es = append(es, &profile.Evaluator{Model: m, Method: none, Gen: none.Gen(gen)})
	}
	res, err := profile.EvaluateInterleaved(context.Background(), es, samples, nil)
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{"a": pa, "b": pb, "suites_a": res[0], "suites_b": res[1],
			"average_a": profile.Overall(res[0]), "average_b": profile.Overall(res[1])})
	}
	fmt.Printf("%-12s %8s %8s %8s\n", "suite", "acc a", "acc b", "agree")
	for i := range res[0] {
		ra, rb := res[0][i], res[1][i]
		ag := "-"
		if rb.AgreeNone != nil {
			ag = fmt.Sprintf("%.3f", *rb.AgreeNone)
		}
		fmt.Printf("%-12s %8.3f %8.3f %8s\n", ra.Suite, ra.Accuracy, rb.Accuracy, ag)
	}
	oa, ob := profile.Overall(res[0]), profile.Overall(res[1])
	ag := "-"
	if ob.AgreeNone != nil {
		ag = fmt.Sprintf("%.3f", *ob.AgreeNone)
	}
	fmt.Printf("%-12s %8.3f %8.3f %8s\n", "all", oa.Accuracy, ob.Accuracy, ag)
	return nil
}
