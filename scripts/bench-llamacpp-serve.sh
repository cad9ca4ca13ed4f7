#!/usr/bin/env bash
# make bench-llamacpp-serve LLAMACPP=DIR: the figure a user moving from
# llama.cpp gets: the same shared-prefix chat requests answered by
# `dlmcache serve` on its default against one `llama-diffusion-cli` run
# each, on the same file, generation time per request.
#
# Given a llama.cpp source tree (DIR, as make bench-llamacpp takes it; its
# build is shared, scripts/llamacpp-common.sh), it
#   - writes the bundled llada-tiny as an F32 GGUF with `dlmcache convert`
#     (the file make bench-llamacpp times);
#   - writes N requests of `dlmcache loadtest` (the held-out system
#     messages, 4 questions each) to OUT/requests.jsonl
#     (loadtest --write-requests);
#   - serves the file with `dlmcache serve --model FILE` (with --lut TABLE
#     where TABLE names a table.json calibrated on that file: `dlmcache
#     profile --model FILE --out DIR && dlmcache calibrate --model FILE
#     --out DIR`; serve refuses a table of another file, make run's of
#     models/llada-tiny included, by its fingerprint; else its uncalibrated
#     default, and the summary says so) on THREADS threads;
#   - request by request (so that both programs meet the same load on a
#     shared machine), sends it with `dlmcache loadtest --clients 1
#     --requests 1` (the server log's generation time, gen_s, no queue; the
#     loadtest's latency and answer), then runs
#     `llama-diffusion-cli -sys SYSTEM -p USER` once on it, on
#     THREADS threads at --temp 0 (it still filters top-k 40 and top-p 0.95
#     before its argmax), with the served gen length, steps per block and
#     block length. Its block schedule lays blocks from the prompt's end
#     over a sequence (-ub) that is a whole number of blocks, so its answer
#     is the gen length rounded up to fill that sequence (up to a block
#     less one more slots), and its steps are the steps per block times the
#     sequence's blocks (a block past the answer costs it one forward).
#     The prompt's length is the server's (both tokenize the same
#     template). Recorded: its printed total time, the generation alone,
#     and the process's wall time, which includes loading the model;
#   - writes OUT/llamacpp.jsonl, OUT/summary.json and OUT/summary.md: the
#     median and p90 generation seconds per request of both, dlmcache's
#     speed-up, N, the processor, threads, whether a table was used and how
#     many answers were identical (not expected: different samplers).
# Never part of make test or CI. N (default 40), THREADS (nproc), TABLE
# (none), BENCH_LLAMACPP_SERVE_OUT (bench-out/llamacpp-serve).
set -euo pipefail
cd "$(dirname "$0")/.."
BENCH=bench-llamacpp-serve
OUT=${BENCH_LLAMACPP_SERVE_OUT:-bench-out/llamacpp-serve}
N=${N:-40}
THREADS=${THREADS:-$(nproc)}
TABLE=${TABLE:-}
command -v jq >/dev/null || { echo "$BENCH: jq is missing (apt-get install jq): it reads the requests" >&2; exit 2; }
if [ -n "$TABLE" ] && ! [ -e "$TABLE" ]; then
	echo "$BENCH: TABLE=$TABLE does not exist (a table.json calibrated on the GGUF file: dlmcache profile --model FILE --out DIR && dlmcache calibrate --model FILE --out DIR)" >&2
	exit 2
fi
# The llama.cpp build, dlmcache's binary, gguf and the processor.
. scripts/llamacpp-common.sh
file=$(gguf llada-tiny f32)
load_before=$(cut -d' ' -f1-3 /proc/loadavg)

# The requests, as the loadtest sends them.
"$DLM" loadtest --write-requests "$OUT/requests.jsonl" --clients 1 --requests "$N"

# dlmcache: a server on its default (or TABLE), one client.
sargs=(--model "$file" --threads "$THREADS" --addr 127.0.0.1:0)
[ -n "$TABLE" ] && sargs+=(--lut "$TABLE")
log=$OUT/serve.log
spid=
trap '[ -n "$spid" ] && kill "$spid" 2>/dev/null || true' EXIT
"$DLM" serve "${sargs[@]}" >"$log" 2>&1 &
spid=$!
url=
for _ in $(seq 240); do
	url=$(grep -o 'listening on http://[0-9.:]*' "$log" | cut -d' ' -f3) && [ -n "$url" ] && break
	kill -0 "$spid" 2>/dev/null || { echo "$BENCH: dlmcache serve ${sargs[*]} exited; its log:" >&2; cat "$log" >&2; exit 1; }
	sleep 0.5
done
[ -n "$url" ] || { echo "$BENCH: dlmcache serve ${sargs[*]} did not start within 2 minutes: $log" >&2; exit 1; }
# "gen 128/64/32": the served gen length, steps and block length.
read -r GEN STEPS BLOCK < <(sed -n 's/.* gen \([0-9]*\)\/\([0-9]*\)\/\([0-9]*\),.*/\1 \2 \3/p' "$log" | head -n 1) || true
method=$(sed -n 's/.*, method \([^ ,(]*\).*/\1/p' "$log" | head -n 1)
[ -n "${BLOCK:-}" ] || { echo "$BENCH: no \"gen G/S/B\" in dlmcache serve's first line: $log" >&2; exit 1; }
echo "== dlmcache serve ${sargs[*]} ($method, gen $GEN, $STEPS steps, blocks of $BLOCK): $N requests, 1 client; load average $load_before" >&2
# One llama-diffusion-cli run on request i: a JSON line on stdout, or,
# where its log lacks the total time or the answer (the log is written by a
# thread that the process's exit can cut short), a note and status 1.
run_llama() { # i request prompt-tokens ub steps
	local i=$1 req=$2 ptok=$3 ub=$4 steps=$5 t0 t1 out
	t0=$(date +%s%N)
	if ! out=$("$LLAMA" -m "$file" -sys "$(jq -r .system <<<"$req")" -p "$(jq -r .user <<<"$req")" -ub "$ub" -b "$ub" -c "$ub" \
		-t "$THREADS" --diffusion-steps "$steps" --diffusion-block-length "$BLOCK" --temp 0 --seed 1 2>&1 </dev/null); then
		echo "$BENCH: llama-diffusion-cli failed on request $i:" >&2
		tail -n 5 <<<"$out" >&2
		exit 1
	fi
	t1=$(date +%s%N)
	printf '%s\n' "$out" >"$OUT/llamacpp-logs/$i.log"
	python3 -c '
import json, re, sys
text, key, wall = sys.stdin.read(), sys.argv[1], float(sys.argv[2])
ptok, ub, steps, block, per_block = map(int, sys.argv[3:])
# Its forwards: each block decodes until no mask is left in it (k masks:
# per_block steps, or k + 1 where fewer; an empty block one).
fwd = 0
for start in range(ptok, ptok + ub, block):
    k = max(0, min(start + block, ub) - start)
    fwd += per_block if k >= per_block else k + 1
# Its answer: the log entry after the total time, an empty line then the
# text up to the next entry.
m = re.search(r"^total time: ([0-9.]+)ms", text, re.M)
lines = text[m.end():].split("\n")[1:] if m else []
ans = None
for j, line in enumerate(lines):
    if re.fullmatch(r"\d+\.\d+\.\d+\.\d+ I ", line):
        ans = []
        for t in lines[j + 1:]:
            if re.match(r"\d+\.\d+\.\d+\.\d+ [DIWE] ", t):
                break
            ans.append(t)
        break
if ans is None:
    sys.exit("bench-llamacpp-serve: llama-diffusion-cli printed no total time or no answer; its last lines:\n" + "\n".join(text.splitlines()[-3:]))
print(json.dumps({"key": key, "prompt_tokens": ptok, "ub": ub, "steps": steps, "forwards": fwd, "total_s": float(m.group(1)) / 1000, "wall_s": wall, "answer": "\n".join(ans)}))
' "$(jq -r .key <<<"$req")" "$(awk "BEGIN{print ($t1 - $t0) / 1e9}")" "$ptok" "$ub" "$steps" "$BLOCK" "$per_block" <<<"$out"
}

# Request by request, dlmcache then llama.cpp, so that both meet the same
# load: one loadtest of the request against the server, then one
# llama-diffusion-cli process on it.
per_block=$((STEPS * BLOCK / GEN))
runs=$OUT/llamacpp.jsonl
: >"$runs"
: >"$OUT/served.txt"
rm -rf "$OUT/loadtest" "$OUT/llamacpp-logs"
mkdir -p "$OUT/loadtest" "$OUT/llamacpp-logs"
i=0
while IFS= read -r req; do
	i=$((i + 1))
	[ $((i % 10)) = 1 ] && echo "== request $i/$N: load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
	printf '%s\n' "$req" >"$OUT/loadtest/$i.jsonl"
	"$DLM" loadtest --url "$url" --clients 1 --requests 1 --requests-file "$OUT/loadtest/$i.jsonl" --out "$OUT/loadtest/$i" --label dlmcache --agree-with "" >"$OUT/loadtest/$i.txt" </dev/null
	# Its line in the server's log (written as the response ends).
	served=
	for _ in $(seq 50); do
		served=$(grep ' POST /v1/chat/completions 200 ' "$log" | sed -n "${i}p") && [ -n "$served" ] && break
		sleep 0.1
	done
	[ -n "$served" ] || { echo "$BENCH: dlmcache serve logged no answer to request $i: $log" >&2; exit 1; }
	sed 's/.* prompt=\([0-9]*\) .* gen=\([0-9]*\) nfe=\([0-9]*\) .* gen_s=\([0-9.]*\).*/\1 \2 \3 \4/' <<<"$served" >>"$OUT/served.txt"
	read -r ptok gen _ < <(tail -n 1 "$OUT/served.txt")
	ub=$(((ptok + gen + BLOCK - 1) / BLOCK * BLOCK))
	steps=$((per_block * ub / BLOCK))
	ok=
	for _ in 1 2 3; do
		if line=$(run_llama "$i" "$req" "$ptok" "$ub" "$steps"); then
			ok=1
			break
		fi
	done
	[ -n "$ok" ] || { echo "$BENCH: llama-diffusion-cli gave no total time or answer on request $i in 3 runs: $OUT/llamacpp-logs/$i.log" >&2; exit 1; }
	echo "$line" >>"$runs"
done <"$OUT/requests.jsonl"
kill "$spid"
wait "$spid" 2>/dev/null || true
spid=

python3 - "$OUT" "$cpu" "$cpu_family" "$cpu_model" "$THREADS" "$N" "$TABLE" "$method" "$GEN" "$STEPS" "$BLOCK" "$load_before; $(cut -d' ' -f1-3 /proc/loadavg)" <<'EOF'
import json, os, statistics, sys
out, cpu, family, model, threads, n, table, method, gen, steps, block, load = sys.argv[1:]
served = [l.split() for l in open(f"{out}/served.txt")]
dlm = [float(s[3]) for s in served]
llama = [json.loads(l) for l in open(f"{out}/llamacpp.jsonl")]
reqs = [json.loads(l) for l in open(f"{out}/requests.jsonl")]
# Each request's loadtest: its latency, errors and answer.
lvs = [json.load(open(f"{out}/loadtest/{i + 1}/loadtest.json"))["dlmcache"][0] for i in range(len(served))]
lat = [l["latency_p50_s"] for l in lvs]
answers = {}
for i in range(len(served)):
    answers.update(json.load(open(f"{out}/loadtest/{i + 1}/loadtest-answers.json"))["dlmcache"]["1"])
same = sum(answers.get(r["key"], "").strip() == l["answer"].strip() for r, l in zip(reqs, llama))
def p90(xs):
    s = sorted(xs)
    return s[min(len(s) - 1, int(0.9 * len(s)))]
def fig(xs):
    return {"median_s": statistics.median(xs), "p90_s": p90(xs)}
L, W = [l["total_s"] for l in llama], [l["wall_s"] for l in llama]
summary = {"processor": cpu, "cpu_family": int(family), "cpu_model": int(model), "threads": int(threads), "requests": int(n),
    "calibrated_table": table or None, "method": method, "gen_length": int(gen), "steps": int(steps), "block_length": int(block),
    "load_average_start_end": load,
    "dlmcache_generation": fig(dlm), "dlmcache_latency": fig(lat), "dlmcache_errors": sum(l["errors"] for l in lvs),
    "speedup_paired_median": statistics.median(l["total_s"] / d for l, d in zip(llama, dlm)),
    "llamacpp_generation": fig(L), "llamacpp_process_wall": fig(W),
    "llamacpp_steps_median": statistics.median(l["steps"] for l in llama),
    "llamacpp_forwards_median": statistics.median(l["forwards"] for l in llama),
    "dlmcache_forwards_median": statistics.median(int(s[2]) for s in served),
    "prompt_tokens_median": statistics.median(int(s[0]) for s in served),
    "speedup_median": statistics.median(L) / statistics.median(dlm), "speedup_vs_wall_median": statistics.median(W) / statistics.median(dlm),
    "identical_answers": same}
cal = f"calibrated table {table}" if table else "no calibrated table (serve's uncalibrated default)"
head = (f"{cpu} (family {family}, model {model}), {threads} threads, {n} shared-prefix requests one at a time, "
        f"dlmcache serve: method {method}, {cal}; gen {gen}, {steps} steps, blocks of {block}. "
        f"Load average (1, 5, 15 min) at the start; at the end: {load}.\n\n")
md = ["| program | generation s/request, median | p90 | dlmcache speed-up (median) |", "|---|---|---|---|",
      f"| dlmcache serve (server's gen_s) | {statistics.median(dlm):.3f} | {p90(dlm):.3f} | |",
      f"| llama-diffusion-cli (its total time) | {statistics.median(L):.3f} | {p90(L):.3f} | **{statistics.median(L) / statistics.median(dlm):.2f}×** |",
      f"| llama-diffusion-cli (process wall time, model load included) | {statistics.median(W):.3f} | {p90(W):.3f} | {statistics.median(W) / statistics.median(dlm):.2f}× |",
      "", f"dlmcache loadtest latency per request {statistics.median(lat):.3f} s median; "
      f"llama.cpp's total time over dlmcache's gen_s request by request: {summary['speedup_paired_median']:.2f}× median; prompts of {statistics.median(int(s[0]) for s in served):g} tokens (median); "
      f"forwards a request (median): dlmcache {statistics.median(int(s[2]) for s in served):g}, "
      f"llama.cpp {statistics.median(l['forwards'] for l in llama):g} (of --diffusion-steps {statistics.median(l['steps'] for l in llama):g}); "
      f"identical answers: {same} of {len(llama)} (different samplers: not expected)."]
# Written whole or not at all: .tmp, then renamed.
for name, text in (("summary.json", json.dumps(summary, indent=1)), ("summary.md", head + "\n".join(md))):
    with open(f"{out}/{name}.tmp", "w") as f:
        f.write(text + "\n")
    os.replace(f"{out}/{name}.tmp", f"{out}/{name}")
print(head + "\n".join(md))
EOF
