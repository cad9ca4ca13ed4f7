#!/usr/bin/env bash
# make results: rerun every measurement behind docs/results.md and
# docs/profiling.md on the bundled model (or MODEL=...), writing the outputs
# and figures under results-out/ (OUT=...). It does not edit the docs: copy
# the tables you want from results-out/*.txt, results-out/*/bench.md and the
# figures from results-out/figures/. Every command runs in the model card's
# regime (the bundled model's: 128 answer slots, 64 steps, blocks of 32),
# where one uncached request costs ≈ 16× what it did in the old 16-slot
# regime, so the sample counts are smaller than they were: about 100 minutes
# on 2 cores. QUICK=1 runs every command with tiny sample counts (a smoke
# test of the pipeline, numbers meaningless).
set -euo pipefail
cd "$(dirname "$0")/.."
B=${BIN:-bin/dlmcache}
OUT=${OUT:-results-out}
M=(--model "${MODEL:-llada-tiny}")
mkdir -p "$OUT/figures"
ERR=$OUT/stderr.txt
: > "$ERR"
L50=20 L25=10 L10=6 PR=64 PRA=4 PM=4 PIC=()
if [ -n "${QUICK:-}" ]; then
	L50=2 L25=2 L10=2 PR=4 PRA=2 PM=1 PIC=(--picture-requests 1)
fi
step() { echo "== $*" >&2; }
t() { /usr/bin/time -f "%e s wall" "$@"; }

step "profile (docs/profiling.md)"
t $B profile "${M[@]}" --per-ratio $PR --out "$OUT/prof" --quiet > "$OUT/profile.txt"
t $B profile "${M[@]}" --all-steps --per-ratio $PRA --out "$OUT/profall" --quiet > "$OUT/profall.txt"
SIM=$OUT/prof/similarity.parquet KV=$OUT/prof/table-cosine.json RM=$OUT/prof/table-cosine-row-min.json
STEP=8
[ -n "${QUICK:-}" ] && STEP=1
$B sweep n --from "$SIM" --step $STEP --out "$OUT/sweep-n" > "$OUT/sweep-n.txt"
$B sweep n --from "$SIM" --step $STEP --similarity kv-row-min --out "$OUT/sweep-n-row-min" > "$OUT/sweep-n-row-min.txt"
$B plot depth "$KV" -o "$OUT/figures/depth.png"
$B plot depth "$RM" -o "$OUT/figures/depth-row-min.png"
$B plot heatmap "$OUT/profall/similarity.parquet" -o "$OUT/figures/heatmap.png"
$B plot heatmap "$OUT/profall/similarity.parquet" --similarity kv-row-min -o "$OUT/figures/heatmap-row-min.png"
$B plot convergence "$OUT/sweep-n/convergence.json" -o "$OUT/figures/convergence.png"
if [ -z "${MODEL:-}" ] && [ -z "${QUICK:-}" ]; then
	go run ./tools/profilereport -sim "$SIM" -all "$OUT/profall/similarity.parquet" > "$OUT/profilereport.txt"
fi

step "bench, sections 1-2 (docs/results.md)"
FIVE=none,prefix-all,bicache,block,bicache+block
t $B bench "${M[@]}" --lut "$KV" --limit $L50 --methods $FIVE --refresh 16 --out "$OUT/bench" --quiet > /dev/null
t $B bench "${M[@]}" --lut "$KV" --suite lookup --limit $L10 --questions-per-system 4 --methods $FIVE --refresh 16 --out "$OUT/bench-shared" --quiet > /dev/null
step "every registered method (section 5)"
t $B bench "${M[@]}" --lut "$KV" --limit $L10 --refresh 16 --out "$OUT/bench-all" --quiet > /dev/null
$B plot pareto "$OUT/bench-all/bench.json" -o "$OUT/figures/pareto.png"
step "deep sources, sections 3-4"
for s in store recompute request; do
	$B bench "${M[@]}" --lut "$KV" --limit $L25 --methods none,bicache,block,bicache+block --refresh 16 --deep-source "$s" --out "$OUT/bench-$s" --quiet > /dev/null 2>>"$ERR"
	$B bench "${M[@]}" --lut "$RM" --limit $L25 --methods none,bicache,block,bicache+block --refresh 16 --deep-source "$s" --out "$OUT/bench-row-min-$s" --quiet > /dev/null
done
$B bench "${M[@]}" --lut "$RM" --suite lookup --limit $L10 --questions-per-system 4 --methods none,bicache --refresh 16 --deep-source store --out "$OUT/bench-shared-row-min-store" --quiet > /dev/null

step "sweeps"
t $B sweep tau "${M[@]}" --from "$SIM" --limit $L25 --refresh 16 --deep-source recompute --out "$OUT/sweep-tau" --quiet > "$OUT/sweep-tau.txt" 2>>"$ERR"
t $B sweep refresh "${M[@]}" --lut "$KV" --limit $L50 --deep-source recompute "${PIC[@]}" --out "$OUT/sweep-refresh" --quiet > "$OUT/sweep-refresh.txt" 2>>"$ERR"
t $B sweep tau "${M[@]}" --from "$SIM" --similarity kv-row-min --refresh 16 --deep-source store --limit $L25 --taus 0.5,0.6,0.7,0.8,0.9,0.97 --out "$OUT/sweep-tau-row-min" --quiet > "$OUT/sweep-tau-row-min.txt"
$B plot sweep "$OUT/sweep-tau/sweep-tau.json" -o "$OUT/figures/sweep-tau.png"
$B plot sweep "$OUT/sweep-refresh/sweep-refresh.json" -o "$OUT/figures/sweep-refresh.png"
$B plot refresh "$OUT/sweep-refresh/sweep-refresh.json" -o "$OUT/figures/refresh.png"
$B plot refresh "$OUT/sweep-refresh/sweep-refresh.json" --similarity kv-row-min -o "$OUT/figures/refresh-row-min.png"
step "R sweep of the worst-row table with the request source (section 0: the configuration that holds the long answers)"
t $B sweep refresh "${M[@]}" --lut "$RM" --limit $L10 --deep-source request --picture-requests 2 "${PIC[@]}" --out "$OUT/sweep-refresh-row-min" --quiet > "$OUT/sweep-refresh-row-min.txt"
$B plot sweep "$OUT/sweep-refresh-row-min/sweep-refresh.json" -o "$OUT/figures/sweep-refresh-row-min.png"
$B plot refresh "$OUT/sweep-refresh-row-min/sweep-refresh.json" -o "$OUT/figures/refresh-request.png"
step "the configurations that keep the answers (section 0.3)"
t $B bench "${M[@]}" --lut "$RM" --limit $L50 --methods none,bicache --refresh 1 --out "$OUT/bench-r1" --quiet > /dev/null
t $B bench "${M[@]}" --lut "$RM" --limit $L50 --methods none,bicache,block,bicache+block --refresh 2 --out "$OUT/bench-r2" --quiet > /dev/null
step "prompt modules (Prompt Cache) vs depth"
t $B sweep modules "${M[@]}" --limit $PM --depths 0,1,2,3,4,6,8 --out "$OUT/sweep-modules" --quiet > "$OUT/sweep-modules.txt"

step "engine-level timings"
go test ./cache -run '^$' -bench BenchmarkMethods -benchtime 3x > "$OUT/bench-methods.txt"
echo "done: $OUT" >&2
grep -h average "$OUT"/bench*/bench.md >&2 || true
