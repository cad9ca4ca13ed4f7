#!/usr/bin/env bash
# make bench: times the engine against baselines measured in the same run, and
# prints ratios (absolute times drift on a shared machine; ratios less so).
#   - the peak: F32 FMA (and BF16 vdpbf16ps where the CPU has it) GFLOP/s of a
#     register-only loop on $THREADS threads, model/cpu.PeakF32; every figure is also
#     given as a fraction of it;
#   - raw sgemm (OpenBLAS, 512×2048×2048) GFLOP/s, and the backend's MatMul
#     of the same shape on each GEMM library this machine has (OpenBLAS,
#     oneDNN: F32, and BF16 weights);
#   - the Go forward, one denoising step at sequence 512: l8-d256 and
#     l16-d2048 with the default GEMM library ($DLMCACHE_CPU_GEMM=auto),
#     both on OpenBLAS alone (auto runs l8-d256's smaller products on the
#     panel kernel on an AVX2 CPU without AVX-512), l16-d2048 with its
#     weights left in the memory map ($DLMCACHE_CPU_WEIGHTS=mapped; by
#     default those oneDNN multiplies are packed for it at load), and with
#     BF16 weights; the GEMM column says library/weights;
#   - the PyTorch reference forward on the same checkpoints and threads;
#   - a step that computes only 10% of the rows, as a fraction of the full step;
#   - both shapes converted to GGUF Q8_0 and Q4_0 (dlmcache convert) and run
#     with the weights kept quantized (the quant column says how their
#     products run: $DLMCACHE_CPU_QUANT, int8 by default), and one product
#     512×2048×2048 on one thread for each weight form (F32, Q8_0 and Q4_0,
#     each with int8 and with f32 activations).
# Each shape runs in a process of its own, which reports its peak RSS, and
# times 3 steps (l8-d256's 30).
# BENCH_ONLY='l8-d256(-q8_0|-q4_0)?' (a regular expression matching labels
# whole) runs only those rows, and writes only their checkpoints.
#
# scripts/bench.sh 8b (make bench-8b) times BF16 weights instead, into
# bench-out/8b: l16-d2048 in F32, the same draws in BF16 kept as BF16 and
# converted at load ($DLMCACHE_CPU_BF16=f32), and three 7–8B shapes in BF16,
# each a checkpoint in its architecture's Hugging Face layout under
# $DLMCACHE_BENCH_8B_DIR, loaded through its own config parser:
# LLaDA-8B-Instruct's (16.0 GB; one full step 7.3 TFLOP as Config.StepFLOPs
# counts it), Dream-v0-7B's (15.2 GB; 6.8 TFLOP) and LLaDA-MoE-7B-A1B's
# (14.7 GB; 1.2 TFLOP: the router and the 8 active experts of 64 only).
# One step each, no PyTorch column. Each checkpoint is written (once: kept
# when present) just before its run; BENCH_8B_REMOVE=1 deletes each of
# $DLMCACHE_BENCH_8B_DIR's after its run, so the disk holds one at a time
# (they take 46 GB together).
set -euo pipefail
cd "$(dirname "$0")/.."
MODE=${1:-default}
BENCH_DIR=${DLMCACHE_BENCH_DIR:-${TMPDIR:-/tmp}/dlmcache-bench}
BENCH_8B_DIR=${DLMCACHE_BENCH_8B_DIR:-${TMPDIR:-/tmp}/dlmcache-bench-8b}
THREADS=${THREADS:-$(nproc)}
case "$MODE" in
default)
	OUT=${BENCH_OUT:-bench-out}
	ITERS=3x
	# l8-d256's steps take milliseconds: 3 of them are a window that one
	# descheduling or the run's first, slower process moves by half.
	ITERS_SMALL=30x
	# label checkpoint dtype $DLMCACHE_CPU_BF16 $DLMCACHE_CPU_GEMM $DLMCACHE_CPU_WEIGHTS
	RUNS="l8-d256 $BENCH_DIR/l8-d256 f32 - auto packed
l8-d256-openblas $BENCH_DIR/l8-d256 f32 - openblas mapped
l8-d256-q8_0 $BENCH_DIR/l8-d256-q8_0.gguf q8_0 - auto packed
l8-d256-q4_0 $BENCH_DIR/l8-d256-q4_0.gguf q4_0 - auto packed
l16-d2048 $BENCH_DIR/l16-d2048 f32 - auto packed
l16-d2048-openblas $BENCH_DIR/l16-d2048 f32 - openblas mapped
l16-d2048-mapped $BENCH_DIR/l16-d2048 f32 - auto mapped
l16-d2048-bf16 $BENCH_8B_DIR/l16-d2048-bf16 bf16 bf16 auto packed
l16-d2048-q8_0 $BENCH_DIR/l16-d2048-q8_0.gguf q8_0 - auto packed
l16-d2048-q4_0 $BENCH_DIR/l16-d2048-q4_0.gguf q4_0 - auto packed"
	;;
8b)
	OUT=${BENCH_OUT:-bench-out/8b}
	ITERS=1x
	RUNS="l16-d2048 $BENCH_DIR/l16-d2048 f32 - auto mapped
l16-d2048-bf16 $BENCH_8B_DIR/l16-d2048-bf16 bf16 bf16 auto mapped
l16-d2048-bf16-as-f32 $BENCH_8B_DIR/l16-d2048-bf16 bf16-as-f32 f32 auto mapped
llada-8b $BENCH_8B_DIR/llada-8b bf16 bf16 auto mapped
dream-7b $BENCH_8B_DIR/dream-7b bf16 bf16 auto mapped
llada-moe-7b $BENCH_8B_DIR/llada-moe-7b bf16 bf16 auto mapped"
	;;
*)
	echo "usage: $0 [8b]" >&2
	exit 2
	;;
esac
# BENCH_ONLY (an extended regular expression) keeps the runs whose label it
# matches whole, e.g. BENCH_ONLY='l8-d256(-q8_0|-q4_0)?'.
if [ -n "${BENCH_ONLY:-}" ]; then
	RUNS=$(grep -E "^($BENCH_ONLY) " <<< "$RUNS" || true)
	[ -n "$RUNS" ] || { echo "BENCH_ONLY=$BENCH_ONLY matches no run" >&2; exit 2; }
fi
# A run's checkpoint: written by tools/benchckpt (kept when present); a
# .gguf converted from the checkpoint its name starts with.
checkpoint() {
	local dir=$1 base=$1
	[[ $dir == *.gguf ]] && base=${dir%-*.gguf}
	go run ./tools/benchckpt -out "$(dirname "$base")" -shape "$(basename "$base")"
	if [[ $dir == *.gguf ]] && ! [ -e "$dir" ]; then
		local q=${dir##*-}
		go run ./cmd/dlmcache convert "$base" "$dir" --outtype "${q%.gguf}" >&2
	fi
}
# The default mode writes every checkpoint first; 8b writes each just
# before its run.
if [ "$MODE" = default ]; then
	while read -r label dir rest; do checkpoint "$dir"; done <<< "$RUNS"
fi
mkdir -p "$OUT"

# Three counts, the best of each kept: a burst of a few hundred
# milliseconds on a virtual machine's cores now and then runs at half
# rate (a Zen 5's F32 peak once read 264 GFLOP/s for its 476–491).
echo "== peak" >&2
GOMAXPROCS="$THREADS" go test ./model/cpu -run '^$' -bench 'BenchmarkPeak' -benchtime 5x -count 3 | tee "$OUT/peak.txt" >&2
echo "== raw sgemm" >&2
go test ./model/cpu -run '^$' -bench 'BenchmarkSgemmRaw|BenchmarkMatMulRaw' -benchtime 20x -count 1 | tee "$OUT/sgemm.txt" >&2
if [ "$MODE" = default ]; then
	echo "== quantized products (one thread)" >&2
	go test ./model/cpu -run '^$' -bench 'BenchmarkQuantMatMul/n512_in2048_out2048/' -benchtime 5x -count 1 | tee "$OUT/quant.txt" >&2
else
	: > "$OUT/quant.txt"
fi
echo "== Go forward" >&2
TESTBIN=$(realpath "$OUT")/model.test
go test -c -o "$TESTBIN" ./model
: > "$OUT/go.txt"
# How products with quantized weights run, as `dlmcache version` says it.
QUANT=$(go run ./cmd/dlmcache version --json | sed -n 's/^  "quant_products": "\(.*\)",*$/\1/p' | tr ' ' '_')
while read -r label dir dtype conv gemm weights; do
	[ "$MODE" = 8b ] && checkpoint "$dir" < /dev/null
	echo "== $label: load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
	shape=$(basename "$dir" .gguf)
	iters=$ITERS
	case $shape in l8-*) iters=${ITERS_SMALL:-$ITERS} ;; esac
	# A process per shape: its peak RSS is that shape's. The label
	# replaces the directory's name in the benchmark lines.
	echo "dtype $label $dtype" >> "$OUT/go.txt"
	echo "gemm $label $gemm/$weights" >> "$OUT/go.txt"
	echo "dir $label $shape" >> "$OUT/go.txt"
	echo "quant $label $QUANT" >> "$OUT/go.txt"
	(cd model && DLMCACHE_CPU_BF16="${conv/#-/bf16}" DLMCACHE_CPU_GEMM="$gemm" DLMCACHE_CPU_WEIGHTS="$weights" DLMCACHE_BENCH_DIR="$(dirname "$dir")" GOMAXPROCS="$THREADS" \
		"$TESTBIN" -test.run '^$' -test.bench "BenchmarkStep/^$shape\$/" -test.benchtime "$iters" -test.count 1 -test.timeout 60m) |
		sed "s|^BenchmarkStep/$shape/|BenchmarkStep/$label/|" | tee -a "$OUT/go.txt" >&2
	run=$((${run:-0} + 1))
	if [ "${BENCH_8B_REMOVE:-0}" = 1 ] && [ "$(dirname "$dir")" = "$BENCH_8B_DIR" ] &&
		! tail -n +$((run + 1)) <<< "$RUNS" | grep -q " $dir "; then
		echo "BENCH_8B_REMOVE=1: removing $dir" >&2
		rm -rf -- "$dir"
	fi
done <<< "$RUNS"
rm -f "$TESTBIN"
echo "== PyTorch forward" >&2
if [ "$MODE" = 8b ]; then
	echo "8b: no PyTorch column" >&2
	: > "$OUT/torch.txt"
elif /usr/bin/python3 -c 'import torch' 2>/dev/null; then
	# The F32 safetensors checkpoints that ran.
	TORCH_DIRS=$(awk '$3 == "f32" && $2 !~ /\.gguf$/ { print $2 }' <<< "$RUNS" | sort -u)
	if [ -n "$TORCH_DIRS" ]; then
		/usr/bin/python3 tools/bench/torch_step.py --threads "$THREADS" $TORCH_DIRS | tee "$OUT/torch.txt" >&2
	else
		: > "$OUT/torch.txt"
	fi
else
	echo "python3-torch is not installed (apt-get install python3-torch): PyTorch column skipped" >&2
	: > "$OUT/torch.txt"
fi

# What DLMCACHE_CPU_GEMM=auto picks on this machine, as `dlmcache version` says it.
GEMM_AUTO=$(DLMCACHE_CPU_GEMM=auto go run ./cmd/dlmcache version --json | sed -n 's/^  "gemm": "\(.*\)",*$/\1/p')
# The processor, and the kernels' instruction-set level (DLMCACHE_CPU_ISA caps
# it: avx2 measures the AVX2 paths on an AVX-512 machine), as `dlmcache version`
# says it: every summary records both.
ISA=$(go run ./cmd/dlmcache version --json | sed -n 's/^  "isa": "\(.*\)",*$/\1/p')
PROCESSOR="$(sed -n 's/^model name[[:space:]]*: *//p' /proc/cpuinfo | head -1 | tr -d '"\\') (family $(sed -n 's/^cpu family[[:space:]]*: *//p' /proc/cpuinfo | head -1), model $(sed -n 's/^model[[:space:]]*: *//p' /proc/cpuinfo | head -1))"
# Columns of `go test -bench`: name iterations ns/op GFLOP/s "GFLOP/s".
PEAKS=$(awk -v t="$THREADS" -f scripts/peaks.awk "$OUT/peak.txt")
awk -v threads="$THREADS" -v peaks="$PEAKS" -v json="$OUT/summary.json.tmp" -v gemmauto="$GEMM_AUTO" -v isa="$ISA" -v processor="$PROCESSOR" '
BEGIN { np = split(peaks, pw, " "); for (i = 1; i <= np; i++) { split(pw[i], kv, "="); peak[kv[1]] = kv[2] + 0 } }
FILENAME ~ /sgemm/ && /BenchmarkSgemmRaw/ { for (i = 1; i < NF; i++) if ($(i+1) == "GFLOP/s" && $i + 0 > sgemm) sgemm = $i + 0 }
FILENAME ~ /sgemm/ && /BenchmarkMatMulRaw\// {
	split($1, p, "/"); sub(/-[0-9]+$/, "", p[3])
	for (i = 1; i < NF; i++) if ($(i+1) == "GFLOP/s") raw[p[2] "/" p[3]] = $i + 0
}
FILENAME ~ /quant.txt/ && /BenchmarkQuantMatMul\// {
	split($1, p, "/"); sub(/-[0-9]+$/, "", p[3])
	for (i = 1; i < NF; i++) if ($(i+1) == "GFLOP/s") qraw[p[3]] = $i + 0
}
FILENAME ~ /go.txt/ && $1 == "gemm" { gemm[$2] = $3 }
FILENAME ~ /go.txt/ && $1 == "quant" { quant[$2] = $3 }
FILENAME ~ /go.txt/ && $1 == "dir" { base[$2] = $3 }
FILENAME ~ /go.txt/ && $1 == "dtype" { dtype[$2] = $3 }
FILENAME ~ /go.txt/ && /BenchmarkStep\// {
	split($1, p, "/"); shape = p[2]; kind = p[3]; sub(/-[0-9]+$/, "", kind)
	ns[shape "/" kind] = $3
	for (i = 1; i < NF; i++) {
		if ($(i+1) == "GFLOP/s") gf[shape "/" kind] = $i
		if ($(i+1) == "maxrss_bytes" && $i + 0 > rss[shape]) rss[shape] = $i + 0
		if ($(i+1) == "load_s") load[shape] = $i + 0
	}
	if (!(shape in seen)) { seen[shape] = 1; order[++n] = shape }
}
FILENAME ~ /torch/ { tsec[$1] = $2; tgf[$1] = $3 }
END {
	pk = peak["f32"]
	bf = ("bf16" in peak) ? sprintf("%.1f", peak["bf16"]) : "null"
	av = ("f32avx2" in peak) ? sprintf("%.1f", peak["f32avx2"]) : "null"
	i8 = ("int8" in peak) ? sprintf("%.1f", peak["int8"]) : "null"
	printf "threads: %s   peak F32: %.1f GFLOP/s (AVX2 lanes only: %s)   peak BF16: %s   peak int8: %s   raw OpenBLAS sgemm: %.1f GFLOP/s (%.2f of peak)\n\n", threads, pk, av, (bf == "null" ? "n/a (no AVX512-BF16)" : bf " GFLOP/s"), (i8 == "null" ? "n/a (no AVX2)" : i8 " GOP/s"), sgemm, (pk > 0 ? sgemm / pk : 0)
	printf "processor: %s   kernels: %s   GEMM auto: %s\n\n", processor, isa, gemmauto
	printf "raw MatMul 512×2048×2048 on all threads (GFLOP/s, ÷ F32 peak):"
	rj = ""
	for (k in raw) { printf "  %s %.1f (%.2f)", k, raw[k], (pk > 0 ? raw[k] / pk : 0); rj = rj (rj == "" ? "" : ", ") sprintf("\"%s\": %.2f", k, raw[k]) }
	printf "\n\n"
	printf "one MatMul 512×2048×2048 on one thread (GFLOP/s):"
	qj = ""
	for (k in qraw) { printf "  %s %.1f", k, qraw[k]; qj = qj (qj == "" ? "" : ", ") sprintf("\"%s\": %.2f", k, qraw[k]) }
	printf "\n\n"
	printf "| shape | weights | GEMM | quantized products | Go step (s) | Go GFLOP/s | ÷ F32 peak | ÷ peak of its format | ÷ raw sgemm | PyTorch step (s) | Go speed ÷ PyTorch | 10%%-rows step (s) | ÷ full step | load (s) | peak RSS (GB) |\n"
	printf "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"
	printf "{\"threads\": %s, \"peak_gflops_f32\": %.2f, \"peak_gflops_f32_avx2\": %s, \"peak_gflops_bf16\": %s, \"peak_gops_int8\": %s, \"sgemm_gflops\": %.2f, \"raw_matmul_gflops\": {%s}, \"quant_matmul_gflops_1thread\": {%s}, \"gemm_auto\": \"%s\", \"processor\": \"%s\", \"isa\": \"%s\", \"shapes\": [", threads, pk, av, bf, i8, sgemm, rj, qj, gemmauto, processor, isa > json
	for (i = 1; i <= n; i++) {
		s = order[i]; full = ns[s "/full"] / 1e9; part = ns[s "/rows10"] / 1e9
		b = (s in base) ? base[s] : s
		tk = (b in tsec) && (dtype[s] == "f32" || !(s in dtype))
		ts = tk ? sprintf("%.3f", tsec[b]) : "n/a"
		vs = tk ? sprintf("%.2f×", tsec[b] / full) : "n/a"
		fp = (pk > 0) ? gf[s "/full"] / pk : 0
		dt = (s in dtype) ? dtype[s] : "f32"
		# ÷ the peak of the instructions products of the format run on
		# (BF16 dot products, int8 dot products; F32 FMAs otherwise).
		fk = (dt ~ /^q/ && ("int8" in peak)) ? "int8" : (dt == "bf16" && ("bf16" in peak)) ? "bf16" : "f32"
		ff = (peak[fk] > 0) ? gf[s "/full"] / peak[fk] : 0
		gm = (s in gemm) ? gemm[s] : "auto"
		rb = (rss[s] > 0) ? sprintf("%.0f", rss[s]) : "null"
		rg = (rss[s] > 0) ? sprintf("%.2f", rss[s] / 1e9) : "n/a"
		qp = (dt ~ /^q/ && (s in quant)) ? quant[s] : ""
		gsub(/_/, " ", qp)
		printf "| %s | %s | %s | %s | %.3f | %.1f | %.2f | %.2f (%s) | %.2f | %s | %s | %.3f | %.3f | %.2f | %s |\n", s, dt, gm, (qp == "" ? "n/a" : qp), full, gf[s "/full"], fp, ff, fk, gf[s "/full"] / sgemm, ts, vs, part, part / full, load[s], rg
		printf "%s{\"shape\": \"%s\", \"dtype\": \"%s\", \"gemm\": \"%s\", \"quant_products\": %s, \"step_s\": %.4f, \"gflops\": %.2f, \"frac_peak\": %.3f, \"frac_format_peak\": %.3f, \"format_peak\": \"%s\", \"torch_step_s\": %s, \"rows10_step_s\": %.4f, \"rows10_frac\": %.3f, \"load_s\": %.3f, \"rss_bytes\": %s}", (i > 1 ? ", " : ""), s, dt, gm, (qp == "" ? "null" : "\"" qp "\""), full, gf[s "/full"], fp, ff, fk, (tk ? tsec[b] : "null"), part, part / full, load[s], rb > json
	}
	printf "]}\n" > json
}' "$OUT/sgemm.txt" "$OUT/quant.txt" "$OUT/go.txt" "$OUT/torch.txt" | tee "$OUT/summary.md"
mv "$OUT/summary.json.tmp" "$OUT/summary.json"
