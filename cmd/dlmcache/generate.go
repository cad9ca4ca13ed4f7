package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/dlmcache/dlmcache/engine"
	"github.com/dlmcache/dlmcache/model"
	"github.com/dlmcache/dlmcache/model/sample"
)

type generateOptions struct {
	f *factory

	modelFlags
	System string
	Prompt string
	regimeFlags
	Temperature float64
	CFG         float64
	Remasking   string
	Threshold   float64
	Decoder     string
	Guide       string
	Seed        uint64
	JSON        bool
}

func (opts *generateOptions) run(ctx context.Context) error {
	if opts.System == "@-" && opts.Prompt == "@-" {
		return fmt.Errorf("--system and --prompt cannot both read standard input (@-)")
	}
	system, err := readTextArg(opts.f.In, opts.System)
	if err != nil {
		return fmt.Errorf("--system: %w", err)
	}
	userPrompt, err := readTextArg(opts.f.In, opts.Prompt)
	if err != nil {
		return fmt.Errorf("--prompt: %w", err)
	}
	t0 := time.Now()
	cfg := modelConfig(opts.f, opts.modelFlags, opts.regimeFlags)
	cfg.Log = nil // the lines below, in their order (none with --json)
	eng, err := engine.Build(cfg)
	if err != nil {
		return err
	}
	defer eng.Close()
	lm := eng.Model
	loadTime := time.Since(t0)
	if !opts.JSON {
		fmt.Fprintln(opts.f.ErrOut, "dlmcache:", lm.Describe())
	}
	prompt := userPrompt
	if prompt == "" && system == "" && lm.Card.DemoSystem != "" {
		system, prompt = lm.Card.DemoSystem, lm.Card.DemoPrompt
		if !opts.JSON {
			fmt.Fprintf(opts.f.ErrOut, "demo request from the model card (%d-character system message): %q\n", len(system), prompt)
		}
	}
	if prompt == "" {
		return fmt.Errorf("--prompt is required for model %s (it has no demo prompt)", lm.Name)
	}
	gen := eng.Gen
	dec, err := opts.sampler(lm, &gen)
	if err != nil {
		return err
	}
	gen = dec.Apply(gen)
	var guide *engine.Model
	if dec.Guided() {
		if err = eng.AddGuide(opts.Guide); err != nil {
			return err
		}
		guide = eng.Guide
		gen.Guide = guide.Network
		if !opts.JSON {
			fmt.Fprintln(opts.f.ErrOut, "dlmcache: guide", guide.Describe())
			fmt.Fprintln(opts.f.ErrOut, "dlmcache:", guidedLine(guide, dec))
		}
	}
	if line := lm.RegimeLine(gen); line != "" && !opts.JSON {
		fmt.Fprintln(opts.f.ErrOut, "dlmcache:", line)
	}
	ids, prefixLen, err := lm.Tokenizer.EncodeChat(system, prompt)
	if err != nil {
		return err
	}
	g, err := sample.Generate(ctx, lm.Network, ids, prefixLen, gen, nil)
	if err != nil {
		return err
	}
	answer := lm.AnswerText(g.Answer)
	if !opts.JSON {
		if lm.Card.RandomWeights {
			fmt.Fprintln(opts.f.ErrOut, "note: this model has random weights (a test checkpoint); its answers are noise")
		}
		fmt.Fprintln(opts.f.Out, answer)
		return nil
	}
	res := map[string]any{
		"model":            lm.Name,
		"fingerprint":      lm.Fingerprint,
		"arch":             lm.Config.ArchName(),
		"random_weights":   lm.Card.RandomWeights,
		"answer":           answer,
		"prompt_tokens":    len(ids),
		"prefix_tokens":    prefixLen,
		"ratio":            float64(prefixLen) / float64(len(ids)+gen.GenLength),
		"gen_length":       gen.GenLength,
		"steps":            g.Steps,
		"block_length":     gen.BlockLength,
		"nfe":              g.NFE,
		"decoder":          decoderOf(lm.Config, gen),
		"decoded":          g.Decoded,
		"load_seconds":     loadTime.Seconds(),
		"seconds":          g.Duration.Seconds(),
		"tokens_per_sec":   float64(gen.GenLength) / g.Duration.Seconds(),
		"rows_computed":    g.RowsComputed,
		"rows_full":        g.RowsFull,
		"flops":            g.FLOPs,
		"flops_full":       g.FLOPsFull,
		"answer_token_ids": g.Answer,
		// The answer's bytes as they are (base64): "answer" is JSON text,
		// where bytes that are not UTF-8 (a byte-level tokenizer's pieces)
		// read as U+FFFD.
		"answer_bytes": []byte(answer),
	}
	if guide != nil {
		// nfe and steps are the diffusion model's; the guide's own here.
		res["guide"] = guideRecord(guide, g.Guide)
	}
	enc := json.NewEncoder(opts.f.Out)
	enc.SetIndent("", "  ")
	return enc.Encode(res)
}

// sampler sets gen's sampling flags (temperature, CFG, seed, remasking,
// threshold) and returns the --decoder given, refusing a diffusion
// sampler's flags for an autoregressive model.
func (opts *generateOptions) sampler(lm *engine.Model, gen *sample.GenOptions) (sample.Decoding, error) {
	gen.Temperature, gen.CFGScale, gen.Seed = opts.Temperature, opts.CFG, opts.Seed
	dec, err := opts.decoding()
	if err != nil {
		return dec, err
	}
	if lm.Config.Causal {
		for _, f := range []struct {
			name string
			set  bool
		}{{"--cfg", opts.CFG != 0}, {"--remasking", opts.Remasking != ""}, {"--threshold", opts.Threshold != 0},
			{"--decoder", opts.Decoder != ""}, {"--guide", opts.Guide != ""}} {
			if f.set {
				return dec, fmt.Errorf("%s is a diffusion sampler's; model %s is autoregressive (greedy, or sampled with --temperature)", f.name, lm.Name)
			}
		}
	}
	switch {
	case opts.Threshold > 0:
		gen.Decoder = sample.Threshold{T: opts.Threshold}
	case opts.Remasking == "random":
		gen.Decoder = sample.RandomRemask{}
	case opts.Remasking == "low_confidence":
		gen.Decoder = sample.LowConfidence{}
	case opts.Remasking == "":
		// The model's default: low-confidence remasking, threshold
		// decoding for a block-causal model (genOptions).
	default:
		return dec, fmt.Errorf("--remasking %q: want low_confidence or random", opts.Remasking)
	}
	return dec, nil
}

func (opts *generateOptions) flags(fl *pflag.FlagSet) {
	opts.modelFlags.add(fl)
	fl.StringVar(&opts.System, "system", "", "system message (the shared prefix), TEXT, @FILE or @- (stdin); default: the bundled model's demo system message")
	fl.StringVar(&opts.Prompt, "prompt", "", "user prompt, TEXT, @FILE or @- (stdin); default: the bundled model's demo question")
	opts.regimeFlags.add(fl)
	fl.Float64Var(&opts.Temperature, "temperature", 0, "sampling temperature (Gumbel noise); 0 is greedy")
	fl.Float64Var(&opts.CFG, "cfg", 0, "classifier-free guidance scale; 0 disables")
	fl.StringVar(&opts.Remasking, "remasking", "", "remasking strategy: low_confidence or random; empty: the model's default (low_confidence, or threshold decoding at 0.95 for a block-causal model)")
	fl.Float64Var(&opts.Threshold, "threshold", 0, "Fast-dLLM threshold decoding: commit every token with confidence ≥ this (0 disables)")
	fl.StringVar(&opts.Decoder, "decoder", "", "decoder: schedule, threshold:T, guided (FlashDLM's guided diffusion: --guide verifies each block's proposals, committing the run it agrees with and its own token at the first disagreement) or guided:TAU[:K] (accept a proposal among the guide's top K, default 5, with probability ≥ TAU × its top one's), either with +threshold:T (also keep a proposal the guide rejects when the model's own confidence in it is ≥ T, e.g. guided+threshold:0.9); empty: --threshold/--remasking, or guided with --guide")
	addGuideFlag(fl, &opts.Guide)
	fl.Uint64Var(&opts.Seed, "seed", 0, "random seed (temperature > 0 or random remasking)")
	fl.BoolVar(&opts.JSON, "json", false, "print a JSON object with the answer, token counts and timings")
}

// decoding is --decoder, checked against --guide, --threshold and
// --remasking: --guide alone means guided, guided needs --guide.
func (opts *generateOptions) decoding() (sample.Decoding, error) {
	dec, err := sample.ParseDecoding(opts.Decoder)
	if err != nil {
		return dec, fmt.Errorf("--decoder: %w", err)
	}
	if dec.IsDefault() && opts.Guide != "" {
		dec = sample.Decoding{Kind: sample.DecodeGuided}
	}
	switch {
	case !dec.IsDefault() && (opts.Threshold != 0 || opts.Remasking != ""):
		return dec, fmt.Errorf("--decoder %s and --threshold/--remasking both choose the decoder: give one", dec)
	case dec.Guided() && opts.Guide == "":
		return dec, fmt.Errorf("--decoder %s needs --guide MODEL: an autoregressive LM with the model's vocabulary and chat template", dec)
	case !dec.Guided() && opts.Guide != "":
		return dec, fmt.Errorf("--guide is the guided decoder's; --decoder %s takes none", dec)
	}
	return dec, nil
}

// readTextArg returns s, the contents of the file when s is @FILE, or
// standard input (in) when s is @-; one trailing newline run is dropped.
func readTextArg(in io.Reader, s string) (string, error) {
	if !strings.HasPrefix(s, "@") {
		return s, nil
	}
	var b []byte
	var err error
	if s == "@-" {
		b, err = io.ReadAll(in)
	} else {
		b, err = os.ReadFile(s[1:])
	}
	if err != nil {
		return "", err
	}
	return strings.TrimRight(string(b), "\n"), nil
}

// decoderOf is the decoder generate's record names: decoderName's, or
// for an autoregressive model "autoregressive" (greedy) or
// "autoregressive:T" (sampled at temperature T).
func decoderOf(c *model.Config, gen sample.GenOptions) string {
	if c.Causal {
		if gen.Temperature > 0 {
			return fmt.Sprintf("autoregressive:%g", gen.Temperature)
		}
		return "autoregressive"
	}
	return decoderName(gen.Decoder)
}

// decoderName is the decoder a record names: low_confidence (also the
// nil default), random, or threshold:T.
func decoderName(d sample.Decoder) string {
	switch d := d.(type) {
	case sample.Threshold:
		return fmt.Sprintf("threshold:%g", d.T)
	case sample.RandomRemask:
		return "random"
	case nil, sample.LowConfidence:
		return "low_confidence"
	case sample.Guided:
		return sample.DecodingOf(sample.GenOptions{Decoder: d}).String()
	}
	return fmt.Sprintf("%T", d)
}

func newCmdGenerate(f *factory, runF func(*generateOptions) error) *cobra.Command {
	return newCommand(&generateOptions{f: f}, runF, &cobra.Command{
		Use:   "generate",
		Short: "Run one request end to end and print the answer",
		Long: `Generate runs one chat request (system message + user prompt) through the
diffusion sampler with no caching and prints the answer. An autoregressive
model (Qwen2ForCausalLM, LlamaForCausalLM) decodes one token per forward
instead, greedy or sampled with --temperature, with the request's K/V cached
exactly (each token computes one row per layer); --gen-length bounds its
answer, which ends at its EOS token.

The system message and the prompt may be given inline, as @FILE, or as @-
(standard input).`,
		Example: `  dlmcache generate --prompt "What is the value of key ab12?" --system @system.txt
  dlmcache generate --model /path/to/LLaDA-8B-Instruct --gen-length 256 --steps 128 --block-length 32 --json
  dlmcache generate --model /path/to/Qwen2.5-0.5B-Instruct --prompt "Say hi." --gen-length 64`,
		Args: cobra.NoArgs,
	})
}
