// Command ggufagree runs the task suites' held-out samples through
// checkpoints of the same model — typically a Hugging Face directory and
// GGUFs converted from it — with greedy decoding and no caching, the models
// taking turns request by request, and prints each one's per-suite accuracy
// and the fraction of answers identical to the first one's (-a):
//
//	go run ./tools/ggufagree -a models/llada-tiny -b llada-tiny-q8_0.gguf,llada-tiny-q4_0.gguf -limit 50
//
// The CPU backend's settings come from the environment as for dlmcache
// (DLMCACHE_CPU_QUANT picks how quantized weights multiply); the output
// names the one used.
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
	"github.com/dlmcache/dlmcache/model/cpu"
	"github.com/dlmcache/dlmcache/model/load"
	"github.com/dlmcache/dlmcache/model/sample"
	"github.com/dlmcache/dlmcache/profile"
)

func main() {
	a := flag.String("a", "models/llada-tiny", "reference model (directory or GGUF)")
	b := flag.String("b", "", "models compared with it (directories or GGUFs, comma-separated)")
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
	paths := append([]string{pa}, strings.Split(pb, ",")...)
	samples, err := profile.SuiteSamples(suites, limit, seed, datasets.DefaultOptions())
	if err != nil {
		return err
	}
	var es []*profile.Evaluator
	be, err := cpu.NewFromEnv(threads)
	if err != nil {
		return err
	}
	for _, p := range paths {
		m, err := load.Load(p, be)
		if err != nil {
			return err
		}
		defer m.Close()
		none, err := cache.New("none", cache.Options{})
		if err != nil {
			return err
		}
		gen := sample.GenOptions{Regime: m.Card.Regime}
		es = append(es, &profile.Evaluator{Model: m, Method: none, Gen: none.Gen(gen)})
	}
	res, err := profile.EvaluateInterleaved(context.Background(), es, samples, nil)
	if err != nil {
		return err
	}
	if asJSON {
		out := map[string]any{"quant_products": be.QuantProducts(), "limit": limit, "seed": seed}
		var ms []map[string]any
		for i, p := range paths {
			o := profile.Overall(res[i])
			ms = append(ms, map[string]any{"model": p, "suites": res[i], "accuracy": o.Accuracy, "agreement": o.AgreeNone})
		}
		out["models"] = ms
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	fmt.Printf("quantized products: %s; %d samples per suite, seed %d\n", be.QuantProducts(), limit, seed)
	for i, p := range paths {
		fmt.Printf("model %d: %s\n", i, p)
	}
	fmt.Printf("%-12s", "suite")
	for i := range paths {
		fmt.Printf(" %8s", fmt.Sprintf("acc %d", i))
		if i > 0 {
			fmt.Printf(" %8s", fmt.Sprintf("agree %d", i))
		}
	}
	fmt.Println()
	row := func(name string, rs []profile.SuiteResult) {
		fmt.Printf("%-12s", name)
		for i, r := range rs {
			fmt.Printf(" %8.3f", r.Accuracy)
			if i > 0 {
				ag := "-"
				if r.AgreeNone != nil {
					ag = fmt.Sprintf("%.3f", *r.AgreeNone)
				}
				fmt.Printf(" %8s", ag)
			}
		}
		fmt.Println()
	}
	for s := range res[0] {
		rs := make([]profile.SuiteResult, len(paths))
		for i := range paths {
			rs[i] = res[i][s]
		}
		row(rs[0].Suite, rs)
	}
	all := make([]profile.SuiteResult, len(paths))
	for i := range paths {
		all[i] = profile.Overall(res[i])
	}
	row("all", all)
	return nil
}
