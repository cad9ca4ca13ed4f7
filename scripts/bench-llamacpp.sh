#!/usr/bin/env bash
# make bench-llamacpp LLAMACPP=DIR: dlmcache beside llama.cpp's
# llama-diffusion-cli on the same GGUF files, per denoising step.
#
# Given a llama.cpp source tree (DIR; a public mirror of ggml-org/llama.cpp
# with examples/diffusion), it
#   - builds llama-diffusion-cli and llama-quantize into DIR/build-dlmcache-ISA
#     with Debian's cmake: natively, or, under DLMCACHE_CPU_ISA=avx2, capped
#     as dlmcache's kernels are (GGML_NATIVE=OFF, AVX2/FMA/F16C on, AVX-512
#     off), so that both programs run the same instruction-set class;
#   - writes each shape as an F32 GGUF with `dlmcache convert` (the bundled
#     llada-tiny, and l16-d2048's random weights from tools/benchckpt),
#     and F16, BF16, Q8_0 and Q4_0 from it with llama.cpp's own
#     llama-quantize (its defaults: Q4_0 keeps a Q6_K output head);
#   - runs both programs on every file for ROUNDS rounds, alternating which
#     goes first, on THREADS threads, the same sequence (SEQ slots, prompt
#     included: llama.cpp's -ub) and one step a block of 32 (llama.cpp's
#     block schedule spends steps on the prompt's blocks too, so the
#     figure compared is the time of one step, a forward over SEQ rows,
#     not of an answer), recording per step, peak RSS, the processor and
#     the ISA cap;
#   - writes OUT/runs.jsonl (each run's answer too), OUT/summary.json and
#     OUT/summary.md (medians, dlmcache's speed-up per file, and how much of
#     each program's F32 answer its answer on the file keeps).
# Greedy on both sides: llama.cpp's CLI at --temp 0 still filters top-k 40
# and top-p 0.95 before its argmax; that costs the same per step, leaves
# the argmax as it is, and is why the programs' answers are not compared
# with each other: each program's answer on a file is compared with its own
# on the F32 file (bytes: llama.cpp's CLI prints no token ids).
# Never part of make test or CI. SHAPES (default "llada-tiny l16-d2048"),
# FORMATS (default "f32 f16 bf16 q8_0 q4_0"; any llama-quantize type in
# lower case: q3_k_m, q4_k_m, q5_k_m and q6_k make K-quant files, for l16-d2048 —
# llada-tiny's 128-wide rows are no whole super-block, so llama-quantize
# falls back there to 32-value types: Q5_0, Q5_1, IQ4_NL, Q8_0), ROUNDS (3),
# THREADS (nproc), SEQ (256), STEPS_PER_BLOCK (1), BENCH_LLAMACPP_OUT
# (bench-out/llamacpp).
set -euo pipefail
cd "$(dirname "$0")/.."
BENCH=bench-llamacpp
OUT=${BENCH_LLAMACPP_OUT:-bench-out/llamacpp}
[ -x /usr/bin/time ] || { echo "bench-llamacpp: /usr/bin/time is missing (apt-get install time): it measures peak RSS" >&2; exit 2; }
SHAPES=${SHAPES:-llada-tiny l16-d2048}
FORMATS=${FORMATS:-f32 f16 bf16 q8_0 q4_0}
ROUNDS=${ROUNDS:-3}
THREADS=${THREADS:-$(nproc)}
SEQ=${SEQ:-256}
BLOCK=32
# STEPS_PER_BLOCK (1) steps on each of llama.cpp's blocks, and as many
# in all on dlmcache's one block: more steps make the first, slower step
# (buffers and pages touched for the first time, in both programs) a
# smaller part of the per-step figure of a small model.
STEPS_PER_BLOCK=${STEPS_PER_BLOCK:-1}
STEPS=$((SEQ / BLOCK * STEPS_PER_BLOCK))
[ $((SEQ % BLOCK)) = 0 ] || { echo "bench-llamacpp: SEQ=$SEQ is not a multiple of $BLOCK" >&2; exit 2; }
PROMPT="List the planets of the solar system in order from the sun."
# The llama.cpp build, dlmcache's binary, gguf and the processor.
. scripts/llamacpp-common.sh

# One run of each program: a JSON line with its per-step seconds and RSS.
# A llama.cpp run that prints no timing is run again once, then reported.
run_llama() { # file → JSON fields
	run_llama_once "$1" || run_llama_once "$1"
}
run_llama_once() {
	local log
	log=$(/usr/bin/time -f 'maxrss_kb %M' "$LLAMA" -m "$1" -p "$PROMPT" -ub "$SEQ" -b "$SEQ" -c "$SEQ" -t "$THREADS" \
		--diffusion-steps "$STEPS" --diffusion-block-length "$BLOCK" --temp 0 --seed 1 2>&1 </dev/null) || {
		echo "bench-llamacpp: llama-diffusion-cli failed on $1:" >&2
		tail -n 5 <<<"$log" >&2
		return 1
	}
	local ms rss
	ms=$(sed -n 's/.*total time: [0-9.]*ms, time per step: \([0-9.]*\)ms.*/\1/p' <<<"$log" | tail -n 1)
	rss=$(sed -n 's/^maxrss_kb \([0-9]*\)$/\1/p' <<<"$log" | tail -n 1)
	if [ -z "$ms" ] || [ -z "$rss" ]; then
		echo "bench-llamacpp: llama-diffusion-cli printed no time per step on $1; its last lines:" >&2
		tail -n 5 <<<"$log" >&2
		return 1
	fi
	# Its answer: the bytes printed between the timing line and time's,
	# less the log line's prefix (a timestamp and level) where it has one;
	# as text (bytes that are not UTF-8 read as U+FFFD) and as base64.
	local answer
	answer=$(python3 -c '
import base64, json, re, sys
lines = sys.stdin.buffer.read().split(b"\n")
start = max(i for i, l in enumerate(lines) if b"time per step:" in l) + 1
end = max(i for i, l in enumerate(lines) if l.startswith(b"maxrss_kb "))
raw = re.sub(rb"^\s*\d+\.\d+\.\d+\.\d+ [A-Z] ?", b"", b"\n".join(lines[start:end])).strip()
print("%s, \"answer_bytes\": \"%s\"" % (json.dumps(raw.decode("utf-8", "replace")), base64.b64encode(raw).decode()))
' < <(printf "%s" "$log"))
	echo "\"step_s\": $(awk "BEGIN{print $ms/1000}"), \"rss_bytes\": $((rss * 1024)), \"answer\": $answer"
}
run_dlm() { # file prompt-tokens → JSON fields
	local gen=$((SEQ - $2)) out
	out=$(/usr/bin/time -f 'maxrss_kb %M' "$DLM" generate --model "$1" --system "" --prompt "$PROMPT" --gen-length "$gen" \
		--block-length "$gen" --steps "$STEPS" --threads "$THREADS" --json 2>&1 </dev/null) || {
		echo "bench-llamacpp: dlmcache generate failed on $1:" >&2
		tail -n 5 <<<"$out" >&2
		return 1
	}
	python3 -c '
import base64, json, re, sys
text = sys.stdin.read()
d = json.loads(text[text.index("{"):text.rindex("}") + 1])
rss = int(re.findall(r"^maxrss_kb (\d+)$", text, re.M)[-1])
raw = base64.b64decode(d["answer_bytes"]).strip()
print("\"step_s\": %g, \"rss_bytes\": %d, \"prompt_tokens\": %d, \"step_flops\": %g, \"answer\": %s, \"answer_bytes\": \"%s\", \"answer_token_ids\": %s" % (
    d["seconds"] / d["nfe"], rss * 1024, d["prompt_tokens"], d["flops"] / d["nfe"], json.dumps(d["answer"].strip()), base64.b64encode(raw).decode(), json.dumps(d["answer_token_ids"])))
' <<<"$out"
}

# The peaks of the formats' instructions on THREADS threads under this ISA
# cap (BenchmarkPeak, as make bench measures them, the best of three
# counts): F32 FMA, BF16 dot products, int8 dot products, as
# "name=GFLOP/s" words.
echo "== peaks (BenchmarkPeak, $THREADS threads)" >&2
peaks=$(GOMAXPROCS="$THREADS" go test ./model/cpu -run '^$' -bench 'BenchmarkPeak' -benchtime 3x -count 3 |
	awk -v t="$THREADS" -f scripts/peaks.awk)
echo "peaks: $peaks" >&2

runs=$OUT/runs.jsonl
: >"$runs"
for shape in $SHAPES; do
	for fmt in $FORMATS; do
		file=$(gguf "$shape" "$fmt")
		# dlmcache's prompt length, so that its sequence is SEQ slots too.
		ptok=$("$DLM" generate --model "$file" --system "" --prompt "$PROMPT" --gen-length $BLOCK --steps 1 --json 2>/dev/null |
			sed -n 's/^  "prompt_tokens": \([0-9]*\),*$/\1/p')
		for r in $(seq 1 "$ROUNDS"); do
			echo "== $shape $fmt round $r/$ROUNDS: load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
			order="llama dlmcache"
			[ $((r % 2)) = 0 ] && order="dlmcache llama"
			for prog in $order; do
				if [ "$prog" = llama ]; then fields=$(run_llama "$file"); else fields=$(run_dlm "$file" "$ptok"); fi
				echo "{\"shape\": \"$shape\", \"format\": \"$fmt\", \"round\": $r, \"program\": \"$prog\", \"threads\": $THREADS, \"seq\": $SEQ, \"isa\": \"$ISA\", $fields}" >>"$runs"
			done
		done
	done
done

python3 - "$runs" "$OUT" "$cpu" "$ISA" "$THREADS" "$SEQ" "$STEPS" "$peaks" "$BLAS" <<'EOF'
import json, statistics, sys
runs, out, cpu, isa, threads, seq, steps, peakwords, blas = sys.argv[1:]
peaks = {k: float(v) for k, v in (w.split("=") for w in peakwords.split())}
# The peak a format is judged by: its products' instructions (int8 dot
# products for the quantized files, BF16 dot products for BF16 where the
# CPU has them, F32 FMAs otherwise; F16 as F32, the instructions F16
# products run on without AVX512-FP16).
def peak_of(fmt):
    k = "int8" if fmt.startswith(("q", "iq")) else "bf16" if fmt == "bf16" and "bf16" in peaks else "f32"
    return k, peaks.get(k)
rows = [json.loads(l) for l in open(runs)]
cells = {}
for r in rows:
    cells.setdefault((r["shape"], r["format"]), {}).setdefault(r["program"], []).append(r)
summary = {"processor": cpu, "isa": isa, "blas": blas, "threads": int(threads), "seq": int(seq), "steps": int(steps), "peaks": peaks, "files": []}
md = ["| shape | file | llama.cpp s/step | dlmcache s/step | dlmcache speed-up | llama.cpp ÷ peak | dlmcache ÷ peak | llama.cpp RSS | dlmcache RSS | llama.cpp ≡ F32 (bytes) | dlmcache ≡ F32 (tokens) |",
      "|---|---|---|---|---|---|---|---|---|---|---|"]
# How much of each program's answer on the shape's F32 file its answer on
# this file keeps: the matching blocks (difflib, no junk heuristic) of the
# two answers over the F32 answer's length. dlmcache's in tokens (its ids,
# less the end-of-text padding); llama.cpp's CLI prints text, no ids, so
# its in bytes of what it printed (bytes, not text: a byte-level
# tokenizer's answer, l16-d2048's, is mostly bytes that are not UTF-8, all
# one character as text; and most of l16-d2048's random vocabulary prints
# nothing, so its few bytes say little there). summary.json has dlmcache's
# bytes too.
import base64, difflib
def agreement(shape, fmt, prog, key="answer_bytes"):
    """(matched, F32 answer's length), or None for the F32 file."""
    ref = cells.get((shape, "f32"), {}).get(prog)
    if not ref or fmt == "f32":
        return None
    a, b = ref[0][key], cells[(shape, fmt)][prog][0][key]
    if key == "answer_bytes":
        a, b = base64.b64decode(a), base64.b64decode(b)
    else:  # token ids, less the end-of-text padding after the answer
        a, b = trim(a), trim(b)
    m = difflib.SequenceMatcher(None, a, b, autojunk=False)
    return sum(x.size for x in m.get_matching_blocks()), len(a)
def trim(ids):
    n = len(ids)
    while n > 1 and ids[n - 1] == ids[-1]:
        n -= 1
    return ids[:n]
def share(a):
    return None if a is None or a[1] == 0 else a[0] / a[1]
for (shape, fmt), progs in cells.items():
    med = lambda p, k: statistics.median(x[k] for x in progs[p])
    l, d = med("llama", "step_s"), med("dlmcache", "step_s")
    lr, dr = max(x["rss_bytes"] for x in progs["llama"]), max(x["rss_bytes"] for x in progs["dlmcache"])
    # Both programs do the same forward a step: dlmcache's count of its
    # FLOPs (the matrix products, attention's included).
    flops = statistics.median(x["step_flops"] for x in progs["dlmcache"])
    pk, pv = peak_of(fmt)
    lf, df = (flops / l / 1e9 / pv, flops / d / 1e9 / pv) if pv else (None, None)
    la, db, dt = agreement(shape, fmt, "llama"), agreement(shape, fmt, "dlmcache"), agreement(shape, fmt, "dlmcache", "answer_token_ids")
    summary["files"].append({"shape": shape, "format": fmt, "rounds": len(progs["llama"]),
        "llamacpp_step_s": l, "dlmcache_step_s": d, "speedup": l / d, "llamacpp_rss_bytes": lr, "dlmcache_rss_bytes": dr,
        "step_flops": flops, "peak": pk, "llamacpp_frac_peak": lf, "dlmcache_frac_peak": df,
        "llamacpp_agree_f32": share(la), "dlmcache_agree_f32": share(dt),
        "llamacpp_agree_f32_bytes": la, "dlmcache_agree_f32_bytes": db, "dlmcache_agree_f32_tokens": dt,
        "answers_repeat": all(len({x["answer"] for x in progs[p]}) == 1 for p in progs)})
    frac = lambda f: "n/a" if f is None else f"{f:.2f} ({pk})"
    agree = lambda a: "–" if a is None else "%d/%d" % a
    md.append(f"| {shape} | {fmt.upper()} | {l:.4g} | {d:.4g} | **{l / d:.2f}×** | {frac(lf)} | {frac(df)} | {lr / 1e9:.2f} GB | {dr / 1e9:.2f} GB | {agree(la)} | {agree(dt)} |")
head = f"{cpu}, kernels {isa} (OpenBLAS kernel: {blas.rsplit('(kernel ', 1)[-1].rstrip(')')}), {threads} threads, {seq} slots a step (prompt included), {steps} steps a run, medians of {max(len(p['llama']) for p in cells.values())} alternating rounds; peaks (GFLOP/s, int8 GOP/s): {', '.join(f'{k} {v:.0f}' for k, v in peaks.items())}; ÷ peak: dlmcache's FLOPs of the step (the same forward in both) a second over the peak of the format's instructions; ≡ F32: how much of the program's greedy answer on the F32 file its answer on this file keeps (difflib's matching blocks / the F32 answer's length), each program against itself, at these settings ({steps} steps for the whole answer): llama.cpp's in bytes of the text it printed (its CLI prints no token ids), dlmcache's in tokens.\n\n"
open(f"{out}/summary.json.tmp", "w").write(json.dumps(summary, indent=1) + "\n")
open(f"{out}/summary.md.tmp", "w").write(head + "\n".join(md) + "\n")
import os
os.replace(f"{out}/summary.json.tmp", f"{out}/summary.json")
os.replace(f"{out}/summary.md.tmp", f"{out}/summary.md")
print(head + "\n".join(md))
EOF
