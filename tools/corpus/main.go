// Command corpus generates the training corpus of dlmcache's bundled model:
// chat samples of every task suite (package datasets) with a curriculum from
// short to long system messages, tokenized for tools/train with the bundled
// tokenizer (models/llada-tiny; the suites' names are single tokens of it,
// datasets/names.txt) or, with -tokenizer ”, a byte-level BPE trained on
// them (written as tokenizer.json + tokenizer_config.json with LLaDA's
// special tokens and chat template).
//
//	go run ./tools/corpus                      # defaults: 200000 train, 200 eval per suite
//	go run ./tools/corpus -train 2000 -eval 20 -out /tmp/c -tokenizer '' -tokenizer-out /tmp/tok
//
// Outputs, under -out (default data/corpus):
//
//	train.jsonl  one JSON object a line, ordered by curriculum level, suites interleaved:
//	             {"suite": "lookup", "level": 0, "id": "lookup/train/v1/s1/17",
//	              "ids": [prompt ids: the chat-templated system + user turn + assistant header],
//	              "prefix_len": m (ids[:m] is the templated system message),
//	              "answer": [ids of "## answer", then <|endoftext|> once],
//	              "answer_text": "answer"}
//	eval.jsonl   the same for held-out system messages (datasets.Eval split) with
//	             datasets.DefaultOptions (level -1), the distribution `dlmcache eval` uses
//	meta.json    vocab_size, mask_id, eos_id, bos_id, eot_id, gen_length, suite_version,
//	             seed, suites, counts per split and suite, options, statistics;
//	             written last: a directory without it is incomplete
//
// and the tokenizer under -tokenizer-out (default models/llada-tiny). Every
// file is written atomically (temp file + rename). The same flags give the
// same bytes.
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
)

func main() {
	cfg := defaultConfig()
	fs := flag.NewFlagSet("corpus", flag.ExitOnError)
	fs.IntVar(&cfg.Train, "train", cfg.Train, "training samples in all (split over levels by -mix, then evenly over suites)")
	fs.IntVar(&cfg.Eval, "eval", cfg.Eval, "evaluation samples per suite (held-out system messages, datasets.DefaultOptions)")
	fs.Int64Var(&cfg.Seed, "seed", cfg.Seed, "generator seed")
	fs.IntVar(&cfg.Vocab, "vocab", cfg.Vocab, "tokenizer vocabulary size, special tokens included (≤ 4096)")
	fs.IntVar(&cfg.GenLength, "gen-length", cfg.GenLength, "answer slots; 0 picks the smallest of 16, 24, 32, … that holds every answer + EOS with a margin of 2")
	fs.StringVar(&cfg.Out, "out", cfg.Out, "corpus directory")
	fs.StringVar(&cfg.TokIn, "tokenizer", cfg.TokIn, "encode with this existing tokenizer directory; '' trains a new BPE into -tokenizer-out (then regenerate datasets/names.txt: go generate ./datasets)")
	fs.StringVar(&cfg.TokOut, "tokenizer-out", cfg.TokOut, "directory a newly trained tokenizer is written to (tokenizer.json, tokenizer_config.json)")
	mix := fs.String("mix", joinFloats(cfg.Mix), "share of training samples per curriculum level 0,1,2 (short to long system messages)")
	fs.IntVar(&cfg.TokSamples, "tokenizer-samples", cfg.TokSamples, "training samples the tokenizer learns from (evenly spaced; 0: all)")
	fs.IntVar(&cfg.Workers, "workers", cfg.Workers, "encoding goroutines")
	fs.Parse(os.Args[1:])
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "corpus: unexpected arguments %q\n", fs.Args())
		os.Exit(2)
	}
	var err error
	if cfg.Mix, err = parseFloats(*mix); err != nil {
		fmt.Fprintf(os.Stderr, "corpus: -mix: %v\n", err)
		os.Exit(2)
	}
	if err := run(cfg, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintf(os.Stderr, "corpus: %v\n", err)
		os.Exit(1)
	}
}

func defaultConfig() Config {
	return Config{
		Train:      200000,
		Eval:       200,
		Seed:       1,
		Vocab:      2048,
		Out:        "data/corpus",
		TokIn:      "models/llada-tiny",
		TokOut:     "models/llada-tiny",
		Mix:        []float64{0.3, 0.35, 0.35},
		TokSamples: 20000,
		Workers:    runtime.GOMAXPROCS(0),
	}
}

func joinFloats(xs []float64) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.FormatFloat(x, 'g', -1, 64)
	}
	return strings.Join(s, ",")
}

func parseFloats(s string) ([]float64, error) {
	var out []float64
	for _, f := range strings.Split(s, ",") {
		x, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil {
			return nil, err
		}
		out = append(out, x)
	}
	return out, nil
}
