#!/usr/bin/env bash
# make serve-block: the exact block cache served (docs/serving.md, "Load
# test"): bench-block's shared-prefix and multi-turn workloads sent through
# dlmcache serve by dlmcache loadtest, llada-tiny-block with no cache
# (--method none) against the exact block cache + block store
# (--method exact-block; --store-answers for the conversations, which none
# has no store for), same model and decoder.
#   - shared: four questions under each system message of every suite;
#   - turns: four-turn conversations on every suite, each client sending a
#     conversation's turns in order with the server's own earlier answers.
# A server keeps what it stored, so every method and client count gets a
# fresh server, one level per run; the two methods take turns level by
# level. Each exact-block level compares its answers with none's at the
# same client count ("same answers as"). LIMIT (default 10) samples per
# suite, CLIENTS (default "1 8") the client counts, THREADS (default 0: all
# cores) the server's, SERVE_FLAGS (default none) more serve flags for
# both methods (e.g. "--workers 1"). Results: $OUT/{shared,turns}/loadtest.json (and
# the answers), summary.txt with every table, and the speed-ups at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${SERVE_OUT:-bench-out/served}
LIMIT=${LIMIT:-10}
CLIENTS=${CLIENTS:-1 8}
THREADS=${THREADS:-0}
read -r -a XFLAGS <<<"${SERVE_FLAGS:-}"
mkdir -p "$OUT"
rm -rf "$OUT/shared" "$OUT/turns"
go build -o "$OUT/dlmcache" ./cmd/dlmcache
D="$OUT/dlmcache"
{ grep -m1 'model name' /proc/cpuinfo; echo "cores: $(nproc)"; echo "load before: $(uptime)"; } | tee "$OUT/cpu.txt"
: > "$OUT/summary.txt"
spid=
trap '[ -n "$spid" ] && kill "$spid" 2>/dev/null || true' EXIT
declare -A tps
for wl in shared turns; do
	for c in $CLIENTS; do
		for m in none exact-block; do
			sargs=(--model models/llada-tiny-block --method "$m" --threads "$THREADS" --addr 127.0.0.1:0 "${XFLAGS[@]}")
			largs=(--suite all --limit "$LIMIT" --questions-per-system 4)
			if [ "$wl" = turns ]; then
				largs=(--suite all --limit "$LIMIT" --turns 4)
				[ "$m" = exact-block ] && sargs+=(--store-answers)
			fi
			log="$OUT/serve-$wl-$m-$c.log"
			"$D" serve "${sargs[@]}" >"$log" 2>&1 &
			spid=$!
			url=
			for _ in $(seq 120); do
				url=$(grep -o 'listening on http://[0-9.:]*' "$log" | cut -d' ' -f3) && [ -n "$url" ] && break
				kill -0 "$spid" 2>/dev/null || { cat "$log"; exit 1; }
				sleep 0.5
			done
			[ -n "$url" ] || { echo "serve did not start: $log"; exit 1; }
			echo "== dlmcache serve ${sargs[*]}; dlmcache loadtest --url $url ${largs[*]} --clients $c --out $OUT/$wl" | tee -a "$OUT/summary.txt"
			"$D" loadtest --url "$url" "${largs[@]}" --clients "$c" --out "$OUT/$wl" >"$OUT/level.txt"
			cat "$OUT/level.txt" >>"$OUT/summary.txt"
			tps[$wl/$m/$c]=$(awk 'NR == 2 { print $5 }' "$OUT/level.txt")
			kill "$spid"
			wait "$spid" 2>/dev/null || true
			spid=
		done
	done
done
rm -f "$OUT/level.txt"
echo "load after: $(uptime)" | tee -a "$OUT/cpu.txt"
for wl in shared turns; do
	for c in $CLIENTS; do
		awk -v w="$wl" -v c="$c" -v a="${tps[$wl/none/$c]}" -v b="${tps[$wl/exact-block/$c]}" \
			'BEGIN { printf "%s, %s clients: none %.1f, exact-block %.1f answer slots/s: %.2fx\n", w, c, a, b, b / a }'
	done
done | tee "$OUT/speedup.txt"
