#!/usr/bin/env bash
# make run: a generation, the cosine profile, the budgeted method search
# that writes profile-out/table.json and lut verify's verdict on it (the
# Makefile's comment above `run` says what each step leaves).
#
# The guided decoder: when GUIDE (default models/llada-tiny-ar, the bundled
# AR guide) holds weights (model.safetensors), calibrate and lut verify get
# --guide GUIDE, so the search considers guided settings (calibrate
# --guide's grid; the Makefile says what they cost) beside the others and
# the table records the guide; when it holds none, one line says so and
# the run is the unguided one.
#
# --resume continues profile-out/search.jsonl only when it was started in
# the same guide state: a log of an unguided search, met by a guided run
# (the guide's weights arrived), or the reverse, is set aside as
# search-unguided.jsonl / search-guided.jsonl and the search starts afresh.
# A log from another guide (retrained weights) is refused by calibrate
# itself, with the two fingerprints: remove profile-out/search.jsonl.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-bin/dlmcache}
OUT=${OUT:-profile-out}
GUIDE=${GUIDE:-models/llada-tiny-ar}
# shellcheck disable=SC2206 # the flags are words, as make passes them
CALIBRATE_FLAGS=(${CALIBRATE_FLAGS:---ratios 0.2,0.5,0.7,1 --per-ratio 60 --risk 0.05})
# shellcheck disable=SC2206
VERIFY_FLAGS=(${VERIFY_FLAGS:---groups 15 --gate loss})

guide=()
if [ -e "$GUIDE/model.safetensors" ]; then
	guide=(--guide "$GUIDE")
	echo "make run: guide $GUIDE: calibrate searches guided settings beside the others, lut verify decodes the table's guided choices with it"
else
	echo "make run: $GUIDE holds no weights (no model.safetensors): calibrating without the guided decoder"
fi

log=$OUT/search.jsonl
if [ -s "$log" ]; then
	was=unguided
	if head -n 1 "$log" | grep -q '"guide":'; then
		was=guided
	fi
	now=unguided
	if [ ${#guide[@]} -gt 0 ]; then
		now=guided
	fi
	if [ "$was" != "$now" ]; then
		echo "make run: $log holds a search run $([ "$was" = guided ] && echo with || echo without) a guide, this run is $now: set aside as $OUT/search-$was.jsonl, searching afresh"
		mv "$log" "$OUT/search-$was.jsonl"
	fi
fi

set -x
"$BIN" generate
"$BIN" profile --out "$OUT"
"$BIN" calibrate --out "$OUT" --resume "${CALIBRATE_FLAGS[@]}" "${guide[@]}"
"$BIN" lut verify "$OUT/table.json" --quiet "${VERIFY_FLAGS[@]}" "${guide[@]}"
