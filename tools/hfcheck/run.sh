#!/usr/bin/env bash
# Cross-checks dlmcache's tokenizer and chat templates against Hugging Face's
# JavaScript implementations (@huggingface/tokenizers, @huggingface/jinja):
# the bundled tokenizer, the LLaDA-8B-shaped test tokenizer (LLaDA's split
# regex, added special tokens and chat template), GPT-2's, a trained one, and the Dream
# (Qwen2's split regex, ChatML template) and LLaDA-MoE fixtures' tokenizers.
# `make hfcheck` runs it; `make test` runs it where node is installed.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
command -v node >/dev/null && command -v npm >/dev/null || { echo "hfcheck: node and npm are required" >&2; exit 1; }
(cd tools/hfcheck && npm ci --no-audit --no-fund --loglevel=error)
cases=$(mktemp)
trap 'rm -f "$cases"' EXIT
go run ./tools/hfcheck models/llada-tiny model/tokenizer/testdata/llama3 model/tokenizer/testdata/gpt2 model/tokenizer/testdata/trained model/testdata/tiny-dream model/testdata/tiny-llada-moe >"$cases"
node tools/hfcheck/check.mjs "$cases"
