#!/usr/bin/env bash
# ladder.sh: the bridge ladder for llada-tiny-block (docs/training.md, "The bridge
# ladder") as one command: four stages from models/llada-tiny-block, each resuming the last
# one's checkpoint (a new --phase: fresh warm-up and cosine over its time budget, an eval and an
# export at its end), and after each the layout probe (queue_diag.py) on the stage's export.
# A stage whose probe row stays below GATE ends the ladder there: that rung's figures are the
# finding, and its export is what a run leaves.
#
#   CORPUS=corpus OUT=out tools/train/ladder.sh          # on a CUDA machine: about 8 min
#   DEVICE=cpu SCALE=0.05 BATCH_TOKENS=2048 EVAL_PER_SUITE=2 PROBE="--teacher 20 --decode 20 --span 10" \
#     CORPUS=data/corpus-long OUT=/tmp/ladder tools/train/ladder.sh     # a smoke run of every stage
#
# CORPUS holds train.jsonl or train.npz (pack_corpus.py), meta.json and eval.jsonl. OUT gets
# model/ (the export), L1.json … L4.json (the probes) and ladder.log; WORK (default $OUT/work)
# the checkpoint. DEVICE cuda or cpu (default cuda), SCALE multiplies every stage's seconds
# (default 1), GATE the probe's share right that lets the next stage start (default 0.9),
# PY the python (default python3), THREADS torch's threads (default 2).
set -euo pipefail
cd "$(dirname "$0")/../.."
CORPUS=${CORPUS:-corpus}
OUT=${OUT:-out}
WORK=${WORK:-$OUT/work}
DEVICE=${DEVICE:-cuda}
SCALE=${SCALE:-1}
GATE=${GATE:-0.9}
PY=${PY:-python3}
THREADS=${THREADS:-2}
BATCH_TOKENS=${BATCH_TOKENS:-65536}
MAX_BATCH=${MAX_BATCH:-384}
EVAL_PER_SUITE=${EVAL_PER_SUITE:-20}
PROBE=${PROBE:---teacher 200 --decode 200 --span 50}
for f in meta.json eval.jsonl; do
	[ -e "$CORPUS/$f" ] || { echo "ladder: $CORPUS/$f is missing (go run ./tools/corpus -out DIR; pack_corpus.py for train.npz)" >&2; exit 2; }
done
[ -e "$CORPUS/train.jsonl" ] || [ -e "$CORPUS/train.npz" ] || { echo "ladder: $CORPUS has neither train.jsonl nor train.npz" >&2; exit 2; }
mkdir -p "$OUT" "$WORK"
log() { echo "ladder: $*" | tee -a "$OUT/ladder.log"; }

# stage NAME SECONDS PROBE_ROW TRAINER_FLAGS...: one rung; PROBE_ROW is the layouts entry it must lift.
stage() {
	local name=$1 secs=$2 row=$3
	shift 3
	local budget
	budget=$(awk -v s="$secs" -v k="$SCALE" 'BEGIN { b = s * k; printf "%d", b < 1 ? 1 : b }')
	log "$name: $budget s, $*"
	"$PY" tools/train/train.py --corpus "$CORPUS" --work "$WORK" --out "$OUT/model" --resume \
		--init-from models/llada-tiny-block --phase "$name" --time-budget "$budget" \
		--block-causal --block-size 32 --max-steps 1000000 --lr 3e-4 --warmup 30 \
		--canvas 32,64,128,256 --canvas-weights 0.2,0.35,0.3,0.15 --block-pad-weight 0.05 \
		--eval-gen-length 128 --eval-decoding threshold --eval-batch 100 --recall-frac 0 \
		--suite-weights sequence=4,span=2,lookup=2,arithmetic=1,rule=1 --suite-mix exact \
		--curriculum linear --curriculum-start 1.0 --batch-tokens "$BATCH_TOKENS" --max-batch "$MAX_BATCH" \
		--threads "$THREADS" --device "$DEVICE" --ckpt-minutes 100 --eval-every 1000000 --eval-seconds 100000 \
		--eval-per-suite "$EVAL_PER_SUITE" --log-every 100 "$@" >>"$OUT/ladder.log" 2>&1
	for f in tokenizer.json tokenizer_config.json dlmcache.json; do cp models/llada-tiny-block/$f "$OUT/model/"; done
	# shellcheck disable=SC2086 # PROBE is a list of flags
	"$PY" tools/train/queue_diag.py --model "$OUT/model" --corpus "$CORPUS" --skip-decode --device "$DEVICE" \
		$PROBE --out "$OUT/$name.json" >/dev/null 2>>"$OUT/ladder.log"
	local right
	right=$("$PY" -c 'import json, sys; print(json.load(open(sys.argv[1]))["layouts"][sys.argv[2]]["right"])' "$OUT/$name.json" "$row")
	log "$name: probe \"$row\" $right (gate $GATE); eval $("$PY" -c 'import json, sys; e = json.load(open(sys.argv[1]))["eval"]; print(e["acc"], "mean", e["mean"])' "$OUT/model/train_state.json")"
	awk -v r="$right" -v g="$GATE" 'BEGIN { exit !(r >= g) }' || { log "$name did not reach the gate: the ladder stops here; $OUT/model is its export"; exit 0; }
}

stage L1 60 "rows '* a = b', sequence question" --sequence-bridge 0.6 --bridge-layouts rows=1
stage L2 120 "chain 'a ; b ; c' (a chain-any separator), sequence question" --sequence-bridge 0.6 --bridge-layouts rows=1,chain-any=2
stage L3 120 "original, lookup question" --sequence-bridge 0.6 --bridge-layouts chain-any=1,list=2 --bridge-lookup-q 1
stage L4 180 "original" --sequence-bridge 0.3 --bridge-layouts chain-any=1,list=1 --span-bridge 0.3
log "every rung passed; $OUT/model is L4's export: dlmcache eval --model $OUT/model --suite all --limit 50"
