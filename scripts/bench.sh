#!/usr/bin/env bash
# make bench: times the engine against baselines measured in the same run, and
# prints ratios (absolute times drift on a shared machine; ratios less so).
#   - the peak: F32 FMA (and BF16 vdpbf16ps where the CPU has it) GFLOP/s of a
#     register-only loop on $THREADS threads, model/cpu.PeakF32; every figure is also
#     given as a fraction of it;
#   - raw sgemm (OpenBLAS, 512×2048×2048) GFLOP/s;
#   - the Go forward, one denoising step at sequence 512, for two shapes;
#   - the PyTorch reference forward on the same checkpoints and threads;
#   - a step that computes only 10% of the rows, as a fraction of the full step.
set -euo pipefail
cd "$(dirname "$0")/.."
BENCH_DIR=${DLMCACHE_BENCH_DIR:-${TMPDIR:-/tmp}/dlmcache-bench}
THREADS=${THREADS:-$(nproc)}
OUT=${BENCH_OUT:-bench-out}
mkdir -p "$OUT"
go run ./tools/benchckpt -out "$BENCH_DIR"

echo "== peak" >&2
GOMAXPROCS="$THREADS" go test ./model/cpu -run '^$' -bench 'BenchmarkPeak' -benchtime 3x -count 1 | tee "$OUT/peak.txt" >&2
echo "== raw sgemm" >&2
go test ./model/cpu -run '^$' -bench 'BenchmarkSgemmRaw' -benchtime 20x -count 1 | tee "$OUT/sgemm.txt" >&2
echo "== Go forward" >&2
DLMCACHE_BENCH_DIR="$BENCH_DIR" go test ./model -run '^$' -bench 'BenchmarkStep' -benchtime 3x -count 1 -timeout 30m | tee "$OUT/go.txt" >&2
echo "== PyTorch forward" >&2
if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
	/usr/bin/python3 tools/bench/torch_step.py --threads "$THREADS" "$BENCH_DIR"/l8-d256 "$BENCH_DIR"/l16-d2048 | tee "$OUT/torch.txt" >&2
else
	echo "python3-torch is not installed (apt-get install python3-torch): PyTorch column skipped" >&2
	: > "$OUT/torch.txt"
fi

# Columns of `go test -bench`: name iterations ns/op GFLOP/s "GFLOP/s".
awk -v threads="$THREADS" -v json="$OUT/summary.json.tmp" '
FILENAME ~ /peak/ && /BenchmarkPeak\// {
	split($1, p, "/"); sub(/-[0-9]+$/, "", p[3])
	if (p[3] == "threads" threads) for (i = 1; i < NF; i++) if ($(i+1) == "GFLOP/s") peak[p[2]] = $i + 0
}
FILENAME ~ /sgemm/ && /BenchmarkSgemmRaw/ { for (i = 1; i < NF; i++) if ($(i+1) == "GFLOP/s" && $i + 0 > sgemm) sgemm = $i + 0 }
FILENAME ~ /go.txt/ && /BenchmarkStep\// {
	split($1, p, "/"); shape = p[2]; kind = p[3]; sub(/-[0-9]+$/, "", kind)
	ns[shape "/" kind] = $3
	for (i = 1; i < NF; i++) if ($(i+1) == "GFLOP/s") gf[shape "/" kind] = $i
	if (!(shape in seen)) { seen[shape] = 1; order[++n] = shape }
}
FILENAME ~ /torch/ { tsec[$1] = $2; tgf[$1] = $3 }
END {
	pk = peak["f32"]
	bf = ("bf16" in peak) ? sprintf("%.1f", peak["bf16"]) : "null"
	printf "threads: %s   peak F32: %.1f GFLOP/s   peak BF16: %s   raw sgemm: %.1f GFLOP/s (%.2f of peak)\n\n", threads, pk, (bf == "null" ? "n/a (no AVX512-BF16)" : bf " GFLOP/s"), sgemm, (pk > 0 ? sgemm / pk : 0)
	printf "| shape | Go step (s) | Go GFLOP/s | ÷ peak | ÷ raw sgemm | PyTorch step (s) | Go speed ÷ PyTorch | 10%%-rows step ÷ full step |\n"
	printf "|---|---|---|---|---|---|---|---|\n"
	printf "{\"threads\": %s, \"peak_gflops_f32\": %.2f, \"peak_gflops_bf16\": %s, \"sgemm_gflops\": %.2f, \"shapes\": [", threads, pk, bf, sgemm > json
	for (i = 1; i <= n; i++) {
		s = order[i]; full = ns[s "/full"] / 1e9; part = ns[s "/rows10"] / 1e9
		ts = (s in tsec) ? sprintf("%.3f", tsec[s]) : "n/a"
		vs = (s in tsec) ? sprintf("%.2f×", tsec[s] / full) : "n/a"
		fp = (pk > 0) ? gf[s "/full"] / pk : 0
		printf "| %s | %.3f | %.1f | %.2f | %.2f | %s | %s | %.3f |\n", s, full, gf[s "/full"], fp, gf[s "/full"] / sgemm, ts, vs, part / full
		printf "%s{\"shape\": \"%s\", \"dtype\": \"f32\", \"step_s\": %.4f, \"gflops\": %.2f, \"frac_peak\": %.3f, \"torch_step_s\": %s, \"rows10_frac\": %.3f, \"rss_bytes\": null}", (i > 1 ? ", " : ""), s, full, gf[s "/full"], fp, ((s in tsec) ? tsec[s] : "null"), part / full > json
	}
	printf "]}\n" > json
}' "$OUT/peak.txt" "$OUT/sgemm.txt" "$OUT/go.txt" "$OUT/torch.txt" | tee "$OUT/summary.md"
mv "$OUT/summary.json.tmp" "$OUT/summary.json"
