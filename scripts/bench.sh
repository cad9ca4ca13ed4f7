#!/usr/bin/env bash
# make bench: times the engine against baselines measured in the same run, and
# prints ratios (absolute times drift on a shared machine; ratios less so).
#   - raw sgemm (OpenBLAS, 512×2048×2048) GFLOP/s: the machine's ceiling;
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
awk -v threads="$THREADS" '
FILENAME ~ /sgemm/ && /BenchmarkSgemmRaw/ { for (i = 1; i < NF; i++) if ($(i+1) == "GFLOP/s" && $i + 0 > sgemm) sgemm = $i + 0 }
FILENAME ~ /go.txt/ && /BenchmarkStep\// {
	split($1, p, "/"); shape = p[2]; kind = p[3]; sub(/-[0-9]+$/, "", kind)
	ns[shape "/" kind] = $3
	for (i = 1; i < NF; i++) if ($(i+1) == "GFLOP/s") gf[shape "/" kind] = $i
	if (!(shape in seen)) { seen[shape] = 1; order[++n] = shape }
}
FILENAME ~ /torch/ { tsec[$1] = $2; tgf[$1] = $3 }
END {
	printf "threads: %s   raw sgemm: %.1f GFLOP/s\n\n", threads, sgemm
	printf "| shape | Go step (s) | Go GFLOP/s | ÷ raw sgemm | PyTorch step (s) | Go speed ÷ PyTorch | 10%%-rows step ÷ full step |\n"
	printf "|---|---|---|---|---|---|---|\n"
	for (i = 1; i <= n; i++) {
		s = order[i]; full = ns[s "/full"] / 1e9; part = ns[s "/rows10"] / 1e9
		ts = (s in tsec) ? sprintf("%.3f", tsec[s]) : "n/a"
		vs = (s in tsec) ? sprintf("%.2f×", tsec[s] / full) : "n/a"
		printf "| %s | %.3f | %.1f | %.2f | %s | %s | %.3f |\n", s, full, gf[s "/full"], gf[s "/full"] / sgemm, ts, vs, part / full
	}
}' "$OUT/sgemm.txt" "$OUT/go.txt" "$OUT/torch.txt" | tee "$OUT/summary.md"
