package main

import "github.com/spf13/cobra"

// The command tree, and each command's help (what --help and docs/cli/
// show) and positional arguments. What a command does is its options type,
// in the command's own file (bench.go, lut_show.go, …): its fields, the
// flags that fill them (flags), the positional arguments (setArgs) and the
// work (run). newCommand (root.go) joins the two. A new command is an
// options type in a file of its own and a constructor here.

func newRootCmd(f *factory) *cobra.Command {
	root := &cobra.Command{
		Use:   "dlmcache",
		Short: "Shared-prefix K/V caching for diffusion language models",
		Long: `dlmcache measures, per diffusion language model, how deep a shared
prompt prefix's keys and values can be reused across requests, writes that as a
ratio→depth lookup table, and serves requests with it.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(f.Out)
	root.SetErr(f.ErrOut)
	root.AddCommand(newCmdGenerate(f, nil), newCmdProfile(f, nil), newCmdCalibrate(f, nil), newCmdEval(f, nil), newCmdBench(f, nil), newCmdLut(f), newCmdSweep(f), newCmdPlot(f), newCmdServe(f, nil), newCmdVersion(f, nil), newCmdLoadtest(f, nil), newCmdConvert(f, nil))
	root.AddCommand(newCmdGenDocs())
	addFlagCompletions(root)
	return root
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

func newCmdProfile(f *factory, runF func(*profileOptions) error) *cobra.Command {
	return newCommand(&profileOptions{f: f}, runF, &cobra.Command{
		Use:   "profile",
		Short: "Measure prefix K/V similarity per layer and build the ratio→depth table",
		Long: `Profile samples requests into shared-prefix-ratio bins (system prompts ×
WildChat or WildChat-style user prompts), runs each through the model twice —
the prefix alone (the K/V a cross-request cache would hold) and the full input
string with no caching (the reference) — and records the cosine similarity of
the prefix's K, V and K⊕V at every layer (and every denoising step with
--all-steps), and of its worst row's K⊕V. It writes, to --out:

  similarity.parquet  one row per (request, layer, step), run parameters in the metadata
  table-cosine.json   the ratio→depth estimate at --tau by --similarity (rebuild at any τ
                      with dlmcache lut build); an estimate, not checked against answers:
                      dlmcache calibrate turns it into table.json, the table to serve
  table-cosine-row-min.json  the same by the worst prefix row (when --similarity is kv)
  run.json            the run's parameters, unfilled bins and duration

Each finished request is logged first to similarity.partial.jsonl, so an
interrupted run continues with --resume. --shard K/N runs one of N disjoint
parts (for several machines); dlmcache lut build --from merges them.`,
		Example: `  dlmcache profile                                   # bundled model, builtin data
  dlmcache profile --model llada --data wildchat/*.parquet --per-ratio 64 --shard 0/4 --out prof-0`,
		Args: cobra.NoArgs,
	})
}

func newCmdCalibrate(f *factory, runF func(*calibrateOptions) error) *cobra.Command {
	return newCommand(&calibrateOptions{f: f}, runF, &cobra.Command{
		Use:   "calibrate",
		Short: "Check each ratio bin's depth against the model's own answers and write a calibrated table",
		Long: `Calibrate samples requests into ratio bins (--ratios, coarser than a profile's:
each needs enough answer tokens for the bound) as profile does, answers each with no caching (greedy: the
reference), then with BiCache at candidate depths, per deep source (store:
the prefix K/V shared across requests; request: the request's own first
step). Per bin and source it keeps the deepest depth whose agreement with
the reference — per whole answer (--gate answer, the default) or per answer
token (--gate token) — has a one-sided Wilson lower bound (--confidence) of
at least --agreement. The search starts at the cosine table's depth and walks
up while depths pass, or down until one does; depth 0 (no reuse) always
does. No reference answers are needed: the uncached answer is the
reference, so WildChat prompts (--data) calibrate too.

It writes, to --out:

  table.json         the table (format dlmcache.lut/v2) with each bin's calibrated depth
                     per source, its agreement, sample count and every depth tried
                     (dlmcache lut show prints them); serve --lut uses them
  calibration.jsonl  every reference answer and every (request, source, depth) outcome,
                     written before it is used: --resume continues an interrupted run
                     to the identical table

--shard K/N evaluates every depth for one of N disjoint parts of the
requests (for several machines: deploy/k8s/); --merge DIR,DIR,... then
searches their merged outcomes and writes the table one run would have.`,
		Example: `  dlmcache profile --out prof && dlmcache calibrate --mode depth --lut prof/table-cosine.json --data suites,external --out calib
  dlmcache calibrate --mode depth --lut prof/table-cosine.json --shard 0/4 --out calib-0     # on four machines
  dlmcache calibrate --mode depth --lut prof/table-cosine.json --merge calib-0,calib-1,calib-2,calib-3 --out calib`,
		Args: cobra.NoArgs,
	})
}

func newCmdEval(f *factory, runF func(*evalOptions) error) *cobra.Command {
	return newCommand(&evalOptions{f: f}, runF, &cobra.Command{
		Use:   "eval",
		Short: "Accuracy and throughput on the task suites (held-out system messages)",
		Long: `Eval generates answers for held-out samples of the task suites (system
messages never seen in training) and checks the text after "##" strictly.
It reports per-suite accuracy, tokens/s, forward evaluations, the fraction of
layer-rows computed and the mean shared-prefix ratio.

Methods:` + methodsHelp(),
		Example: `  dlmcache eval --suite all --limit 50
  dlmcache eval --suite lookup --method bicache --lut out/table.json --json`,
		Args: cobra.NoArgs,
	})
}

func newCmdBench(f *factory, runF func(*benchOptions) error) *cobra.Command {
	return newCommand(&benchOptions{f: f}, runF, &cobra.Command{
		Use:   "bench",
		Short: "Side-by-side throughput and accuracy of caching methods on task suites",
		Long: `Bench runs the same held-out samples through each caching method, one request
at a time, and prints tokens/s and accuracy per method and suite with deltas
against none, and for compositions and variants against their base
(bicache+block against block, bicache-elastic against bicache, …). Every
method gets a fresh prefix store, so the first request of each system
message pays for computing its prefix. The methods take turns request by
request (the order rotating), so that a slow spell on a shared machine
slows them alike; the speed-ups are ratios of the same run.

Methods:` + methodsHelp(),
		Example: `  dlmcache bench --lut out/table.json --limit 20 --out bench-out`,
		Args:    cobra.NoArgs,
	})
}

func newCmdLut(f *factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "lut",
		Short: "Build, show, compare and check ratio→depth tables",
	}
	cmd.AddCommand(newCmdLutBuild(f, nil), newCmdLutShow(f, nil), newCmdLutDiff(f, nil), newCmdLutCheck(f, nil), newCmdLutVerify(f, nil))
	return cmd
}

func newCmdLutBuild(f *factory, runF func(*lutBuildOptions) error) *cobra.Command {
	return newCommand(&lutBuildOptions{f: f}, runF, &cobra.Command{
		Use:   "build --from similarity.parquet... --tau X --out table-cosine.json",
		Short: "Rebuild a table from similarity files at any τ, merging shards, without the model",
		Args:  cobra.NoArgs,
	})
}

func newCmdLutShow(f *factory, runF func(*lutShowOptions) error) *cobra.Command {
	return newCommand(&lutShowOptions{f: f}, runF, &cobra.Command{
		Use:   "show table.json",
		Short: "Print a table readably",
		Args:  cobra.ExactArgs(1),
	})
}

func newCmdLutDiff(f *factory, runF func(*lutDiffOptions) error) *cobra.Command {
	return newCommand(&lutDiffOptions{f: f}, runF, &cobra.Command{
		Use:   "diff A.json B.json",
		Short: "L1 distance between two tables' depths (mean over bins both filled)",
		Args:  cobra.ExactArgs(2),
	})
}

func newCmdLutCheck(f *factory, runF func(*lutCheckOptions) error) *cobra.Command {
	return newCommand(&lutCheckOptions{f: f}, runF, &cobra.Command{
		Use:   "check table.json [--model M]",
		Short: "Say whether a table fits a model, regime and method, and why not",
		Long: `Check refuses (exit status 2) a table profiled or calibrated on another
model, in another regime (gen length, steps, block length: the model's
defaults, or the flags) or, for a calibrated table, for another method.`,
		Args: cobra.ExactArgs(1),
	})
}

func newCmdLutVerify(f *factory, runF func(*lutVerifyOptions) error) *cobra.Command {
	return newCommand(&lutVerifyOptions{f: f}, runF, &cobra.Command{
		Use:   "verify table.json",
		Short: "Replay held-out requests through what serve --lut runs with the table; fail when it loses accuracy",
		Long: `Verify replays held-out requests, in order, through what serve --lut would
run with the table and no other flag (a calibrated table's per-request
choice, the chosen methods on one prefix store so that requests sharing a
system message share its K/V as behind serve; bicache for a table without
choices), and answers each with no caching too, in every answer-length
class the table knows (the regime's gen length for every request, one block
for those whose answer fits one). Per ratio bin and class it reports the
methods served, the agreement of the answers with the uncached ones — per
token and per whole answer —, the accuracy of both, and the speed-up.

It exits with status 1 when the table loses more than --max-loss points of
accuracy against none over the requests with reference answers (--gate
accuracy, the default), or with --gate answer/token when a bin's agreement
is below --agreement: a gate to put in CI before deploying a table.

--requests builtin (default) is datasets.Heldout — system messages neither
the suites' generators nor calibration's (datasets.External) ever produce
(openings and filler of their own, 3–22 rows, 0–160 words), 4 questions
each, --groups of them — and --groups held-out
samples of every suite, the long-answer span suite among them. Otherwise a
JSON Lines file, one request a line: {"system": "...", "user": "...",
"answer": "..." (optional), "suite": "..."}.

A table calibrated with --guide (calibrate --guide: its record names the
guide) whose choices decode with the guided decoder needs --guide: the
guide it was calibrated with (its fingerprint checked against the table's
record, as serve --lut checks it), its shared prefixes from a block store
of its own as behind serve; the report adds the guide's work (guided
steps, tokens a step, NFE, time in each model, prefix store hits). Such a
table is refused without --guide, and with another guide; --guide with a
table that records none is refused.`,
		Example: `  dlmcache lut verify calib/table.json                          # the calibrated table, its deep source
  dlmcache lut verify prof/table-cosine.json                      # a cosine estimate, served as bicache (fails the gate)
  dlmcache lut verify calib/table.json --requests held-out.jsonl
  dlmcache lut verify calib/table.json --guide models/llada-tiny-ar # a table calibrate --guide wrote`,
		Args: cobra.ExactArgs(1),
	})
}

func newCmdSweep(f *factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sweep",
		Short: "Parameter analyses: table convergence vs N, accuracy/throughput vs τ and vs R, prompt-module reuse vs depth",
	}
	cmd.AddCommand(newCmdSweepN(f, nil), newCmdSweepTau(f, nil), newCmdSweepRefresh(f, nil), newCmdSweepModules(f, nil))
	return cmd
}

func newCmdSweepN(f *factory, runF func(*sweepNOptions) error) *cobra.Command {
	return newCommand(&sweepNOptions{f: f}, runF, &cobra.Command{
		Use:   "n --from similarity.parquet...",
		Short: "Table convergence: L1 between tables from the first N and N-step requests per bin",
		Args:  cobra.NoArgs,
	})
}

func newCmdSweepTau(f *factory, runF func(*sweepTauOptions) error) *cobra.Command {
	return newCommand(&sweepTauOptions{f: f}, runF, &cobra.Command{
		Use:   "tau --from similarity.parquet",
		Short: "Accuracy and throughput of BiCache vs the threshold τ (tables rebuilt without rerunning the profile)",
		Args:  cobra.NoArgs,
	})
}

func newCmdSweepRefresh(f *factory, runF func(*sweepRefreshOptions) error) *cobra.Command {
	return newCommand(&sweepRefreshOptions{f: f}, runF, &cobra.Command{
		Use:   "refresh --lut table.json",
		Short: "Accuracy and throughput of BiCache vs the deep-layer refresh period R, and the deep-layer similarity picture",
		Long: `Sweep refresh evaluates BiCache at several refresh periods R, and measures, per
layer, how similar the prefix K/V are to the ones the request really has at
each step when they are reused across requests (computed alone), computed
once per request (stale after step 1), or refreshed every R steps.`,
		Args: cobra.NoArgs,
	})
}

func newCmdSweepModules(f *factory, runF func(*sweepModulesOptions) error) *cobra.Command {
	return newCommand(&sweepModulesOptions{f: f}, runF, &cobra.Command{
		Use:   "modules",
		Short: "Accuracy vs depth of Prompt Cache's module reuse (modules computed alone at reserved positions) against the whole request",
		Long: `Sweep modules cuts each sample's system message into prompt modules (the
template's head and each paragraph), computes each module's K/V once, alone,
at its reserved position ids, and reuses them in the first d layers, the
deeper layers computed every --refresh steps. Two layouts: contiguous, and
gap (a module declared before the last paragraph but not imported, so the
ids jump). Each point's accuracy and agreement are against the same tokens
computed whole. Writes sweep-modules.json.`,
		Args: cobra.NoArgs,
	})
}

func newCmdPlot(f *factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "plot",
		Short: "Figures (PNG or SVG) from profile and sweep outputs",
	}
	for _, k := range []struct{ name, in, short string }{
		{"heatmap", "similarity.parquet", "mean prefix K/V similarity over layers × steps (profile --all-steps)"},
		{"depth", "table.json", "safe depth vs shared-prefix ratio, with spread"},
		{"convergence", "convergence.json", "table L1 distance vs requests per bin (sweep n)"},
		{"sweep", "sweep-tau.json|sweep-refresh.json", "accuracy and throughput vs τ or R"},
		{"refresh", "sweep-refresh.json", "deep-layer similarity: cross-request vs stale vs refreshed"},
		{"pareto", "bench.json|table.json", "accuracy vs speed-up over none, one point per method, with the Pareto front (dlmcache bench); for a calibrated table, one panel per ratio bin and answer-length class: every setting tried, answers kept vs speed-up, the choice marked"},
	} {
		cmd.AddCommand(newCmdPlotKind(f, k.name, k.in, k.short, nil))
	}
	return cmd
}

func newCmdPlotKind(f *factory, kind, in, short string, runF func(*plotOptions) error) *cobra.Command {
	return newCommand(&plotOptions{f: f, kind: kind}, runF, &cobra.Command{
		Use:   kind + " " + in + " -o FILE.png|FILE.svg",
		Short: short,
		Args:  cobra.ExactArgs(1),
	})
}

func newCmdServe(f *factory, runF func(*serveOptions) error) *cobra.Command {
	return newCommand(&serveOptions{f: f}, runF, &cobra.Command{
		Use:   "serve",
		Short: "Serve an OpenAI-compatible HTTP API with shared-prefix caching",
		Long: `Serve answers POST /v1/chat/completions and POST /v1/completions in
OpenAI's shapes, with GET /metrics (Prometheus text) and GET /healthz.

A chat's leading system messages are the shared prefix: requests with the
same one (and the same cache_salt) share its stored K/V. max_tokens sets the
gen length (rounded up to whole blocks) and caps the returned tokens
(finish_reason "length" when it cuts); stop strings cut the answer;
gen_length, steps, block_length and cache_salt are accepted as extra fields;
stream=true streams server-sent events (a chunk per committed block;
stream_options.include_usage; dlmcache_stream_canvas adds the canvas after
every step); with --modules, "modules": ["name", …] imports prompt modules
(GET /v1/modules lists them) that open the system message; tools, tool_choice, response_format and logprobs are refused
with a 400 naming the field. GET /health answers as /healthz does.

With no --method, a block-causal model (config.json "block_causal") is
served with exact-block and a block store of the model's block size unless
--store-blocks says otherwise: committed blocks' K/V are computed once and
every full block of a shared prefix or an earlier turn is reused at every
layer, with the answers of computing every row.

With --lut and no --method, a calibrated table (table.json from dlmcache
calibrate) serves each request with the method, knobs and decoder it chose
for the request's ratio bin and answer-length class (the table method; the
response's dlmcache.method and /metrics' dlmcache_method_requests_total say
which); a v2 table serves bicache at its calibrated depths. A table no
calibration checked (profile's table-cosine*.json) is refused unless
--allow-uncalibrated; a table made for another model is refused at start.

A streamed response goes through a bounded buffer of its own with a write
deadline: a client that stops reading is cut (--stream-buffer-bytes,
--write-timeout) and never holds up the generations batched with it.

SIGINT or SIGTERM stop accepting, let the requests in flight finish for up
to --grace, answer those still running with 503, and exit.

Methods:` + methodsHelp(),
		Example: `  dlmcache serve --model model/testdata/tiny-bf16
  dlmcache serve --lut out/table.json --addr 127.0.0.1:8080 --cache-bytes 2147483648
  curl -s localhost:8080/v1/chat/completions -d '{"messages":[{"role":"system","content":"Be terse."},{"role":"user","content":"Hi"}]}'`,
		Args: cobra.NoArgs,
	})
}

func newCmdVersion(f *factory, runF func(*versionOptions) error) *cobra.Command {
	return newCommand(&versionOptions{f: f}, runF, &cobra.Command{
		Use:   "version",
		Short: "Print the version, commit, backend, BLAS kernel, GEMM library, quantized products and ISA level in use",
		Args:  cobra.NoArgs,
	})
}

func newCmdLoadtest(f *factory, runF func(*loadtestOptions) error) *cobra.Command {
	return newCommand(&loadtestOptions{f: f}, runF, &cobra.Command{
		Use:   "loadtest --url URL",
		Short: "Load a running dlmcache serve with concurrent streaming clients: tokens/s, latency, time to first block",
		Long: `Loadtest sends chat requests to a running server (dlmcache serve, or any
OpenAI-compatible one that streams) from 1, 2, 4, … concurrent clients,
each streaming (stream: true), and reports per level: requests/s, answer
slots decoded per second (the dlmcache object's gen_length; completion
tokens for other servers), p50/p99 latency and p50/p99 time to the first
block (the first chunk with text), and errors. --out DIR keeps the results
in DIR/loadtest.json under --label (the server's method by default), so runs
against servers with different methods add up (and a label's runs at other
client counts: a count run again replaces its level); --plot draws tokens/s
and p99 latency against clients for every label there. It keeps each
level's answers too (DIR/loadtest-answers.json), and compares each level's
answers, request by request, with those of the --agree-with label (none by
default) at the same client count: the same answers as the server without
a cache.

Against dlmcache serve it also reports, per level, what the server said of
each request: its generation time alone (no queue) as answer slots per
second, the method that served it (with a calibrated table, each
request's choice), and the shared-prefix tokens it found in the prefix
store; and, for the requests with a reference answer, the accuracy
(the held-out set carries them: compare a server with --lut against one
without on the same requests).

Requests: the held-out set of lut verify (--requests-file builtin, the
default: 4 questions per system message, and each suite's held-out
samples), a JSON Lines file of {"system", "user"} (with "answer" and
"suite", checked), or, with --suite, the workloads of dlmcache bench on the
held-out task suites: --questions-per-system Q asks each system message Q
questions of its suite, and --turns T makes each a conversation of T
turns. bench's flags give the same requests in the same order; with
--suite each level sends the whole workload once (--requests to change).
A client sends a conversation's turns one after another as a chat client
does: each turn's messages are the system message, the earlier questions
each followed by the server's own answer to it, and the new question, so
that a server with a block store (serve --store-answers) finds the
earlier turns there. The levels then report each turn too; its accuracy
is against the exact answer of its question (the earlier turns carry the
server's answers, right or wrong, where bench's carry the references).

A server keeps what a level stored for the next: to compare caches, give
each level a fresh server (one --clients count per run, the same --out).`,
		Example: `  dlmcache serve --addr 127.0.0.1:8080 & dlmcache loadtest --url http://127.0.0.1:8080 --out load
  dlmcache serve --lut calib/table.json --addr 127.0.0.1:8081 & dlmcache loadtest --url http://127.0.0.1:8081 --out load --plot docs/figures/loadtest.png
  dlmcache serve --model models/llada-tiny-block --addr 127.0.0.1:8082 & dlmcache loadtest --url http://127.0.0.1:8082 --suite all --limit 10 --questions-per-system 4 --clients 8
  dlmcache serve --model models/llada-tiny-block --store-answers --addr 127.0.0.1:8083 & dlmcache loadtest --url http://127.0.0.1:8083 --suite all --limit 10 --turns 4 --clients 8`,
		Args: cobra.NoArgs,
	})
}

func newCmdConvert(f *factory, runF func(*convertOptions) error) *cobra.Command {
	return newCommand(&convertOptions{f: f}, runF, &cobra.Command{
		Use:   "convert SRC OUT",
		Short: "Convert a Hugging Face LLaDA checkpoint to GGUF, or a GGUF back to safetensors",
		Long: `convert writes a Hugging Face LLaDA model directory (or a bundled model's
name) as a GGUF file laid out as llama.cpp's convert_hf_to_gguf.py lays it out
(architecture llada, its tensor names and metadata keys, q/k rows permuted for
ggml's RoPE, the tokenizer as tokenizer.ggml.*), so that llama.cpp's
llama-diffusion-cli and dlmcache both run it. 2-D weights take --outtype; 1-D
tensors and norms stay F32, and a weight whose rows are not a multiple of 32
is written F16 where Q8_0 or Q4_0 is asked, as llama.cpp does. A Q4_0 file
keeps its output head Q8_0 (llama-quantize keeps it at 6 bits).

Given a .gguf file as SRC, convert writes it back as a model directory OUT
(config.json, model.safetensors, tokenizer.json, tokenizer_config.json),
which is lossless for F32, F16 and BF16 files; quantized files are refused.`,
		Example: `  dlmcache convert llada-tiny llada-tiny-q8_0.gguf --outtype q8_0
  dlmcache convert llada-tiny llada-tiny-q4_0.gguf --outtype q4_0
  dlmcache convert ~/models/LLaDA-8B-Instruct llada-8b-bf16.gguf
  dlmcache convert llada-tiny-f32.gguf ./llada-tiny-back`,
		Args: cobra.ExactArgs(2),
	})
}
