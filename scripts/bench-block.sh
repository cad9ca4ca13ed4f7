#!/usr/bin/env bash
# make bench-block: block diffusion on the bundled models (docs/serving.md,
# "Block-causal models: the exact block cache").
#   - suites: llada-tiny-block beside llada-tiny on the same held-out
#     samples (accuracy, tokens/s, NFE, rows computed, prefix tokens
#     shared), none and the exact block cache (which llada-tiny, being
#     bidirectional, skips);
#   - shared: four questions under each system message of every suite,
#     llada-tiny-block with no cache against the exact block cache + block
#     store (same model, same decoder);
#   - turns: four-turn conversations on every suite, each turn's answered
#     conversation kept in the store (--store-answers), the same two;
#   - chat: WildChat-style four-turn conversations (recorded replies as
#     history) under the bundled support system message, the same two.
# The methods take turns request by request, so the speed-ups are ratios of
# one run. LIMIT (default 20) samples per suite, CHAT_LIMIT (default 8)
# chat conversations, THREADS (default 0: all cores) for the timed runs
# (docs/results.md gives them at 1 and 2).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${BENCH_OUT:-bench-out/block}
LIMIT=${LIMIT:-20}
CHAT_LIMIT=${CHAT_LIMIT:-8}
THREADS=${THREADS:-0}
mkdir -p "$OUT"
go build -o "$OUT/dlmcache" ./cmd/dlmcache
D="$OUT/dlmcache"
grep -m1 'model name' /proc/cpuinfo | tee "$OUT/cpu.txt"
set -x
"$D" bench --model models/llada-tiny-block --compare-model llada-tiny --methods none,exact-block --suite all --limit "$LIMIT" --quiet --out "$OUT/suites"
"$D" bench --model models/llada-tiny-block --methods none,exact-block --suite all --limit "$LIMIT" --questions-per-system 4 --threads "$THREADS" --quiet --out "$OUT/shared"
"$D" bench --model models/llada-tiny-block --methods none,exact-block --suite all --limit "$LIMIT" --turns 4 --store-answers --threads "$THREADS" --quiet --out "$OUT/turns"
"$D" bench --model models/llada-tiny-block --methods none,exact-block --suite arithmetic --limit "$CHAT_LIMIT" --turns 4 \
	--wildchat builtin --chat-system "$(cat datasets/systems/support.txt)" --store-answers --threads "$THREADS" --quiet --out "$OUT/chat"
