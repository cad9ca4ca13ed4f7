// Package tokenizer reads, trains and runs byte-level BPE tokenizers in the
// Hugging Face tokenizer.json format, and renders chat prompts.
//
// Load reads a model directory's tokenizer.json and tokenizer_config.json.
// Supported: model BPE (vocab, merges as "a b" strings or [a, b] pairs,
// ignore_merges, unk_token, fuse_unk); added_tokens (special, lstrip,
// rstrip, single_word); normalizers NFC, NFD, NFKC, NFKD, Lowercase and
// Sequence; pre-tokenizers ByteLevel, Split (regex or string, every
// behaviour, invert), Digits and Sequence; post-processors ByteLevel,
// TemplateProcessing and Sequence (accepted and ignored: Encode never adds
// BOS/EOS — the chat template does); decoder ByteLevel. Anything else, or
// an unknown field, is refused with an error naming the file and the field,
// since silently ignoring it would tokenize differently from Hugging Face.
//
// Encode matches added tokens in the raw text first (leftmost, longest),
// then normalizes, pre-tokenizes and merges each piece's bytes by rank (a
// heap of candidate pairs over a linked list of symbols; results cached per
// piece). The GPT-2, Llama-3 and Qwen2 split regexes run as hand-written
// matchers (words.go: Go's regexp has no lookahead for `\s+(?!\S)`, and a
// general backtracking engine is slow), with Oniguruma's classes — \p{L}
// letters, \p{N} numbers, \s the White_Space property — and its case
// folding of ſ to s under (?i:...); any other pattern runs with
// github.com/dlclark/regexp2. When ByteLevel is the pre-tokenizer's last
// step, its byte-to-rune mapping is folded into the BPE (pieces stay raw
// text; each byte starts as its byte-level token), so text that is not
// UTF-8 still encodes byte by byte.
// Unlike Hugging Face, added tokens marked normalized are also matched in the
// raw text rather than the normalized one; this differs only when the
// normalizer changes an added token's text.
//
// `make hfcheck` compares Encode, Decode and ApplyChat with Hugging Face's
// Rust tokenizers (Node binding), @huggingface/tokenizers and
// @huggingface/jinja on Qwen3's released tokenizer.json and chat template
// (Qwen2's byte-level BPE with Qwen3's added tokens) and the test
// tokenizers, over a fixed corpus, 1,000 seeded random strings and a few KB
// of the repository's text, and decodes 300 random id lists per tokenizer
// (cut characters and stray bytes included: one U+FFFD per maximal
// ill-formed subpart, as Hugging Face).
//
// ApplyChat renders messages with the tokenizer_config.json chat template
// (Jinja, through github.com/nikolalohinski/gonja/v2, with trim_blocks and
// lstrip_blocks as Hugging Face sets them) or, without one, with LLaDA's
// format. EncodeChat returns a system+user prompt's ids and the length of
// its shared prefix, the templated system message.
//
// Train learns a byte-level BPE from texts with incremental pair counts;
// Save writes tokenizer.json and tokenizer_config.json (LLaDA's template)
// that Load reads back to the same tokenizer.
package tokenizer
