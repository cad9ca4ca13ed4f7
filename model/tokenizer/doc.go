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
// then normalizes, pre-tokenizes (regexes run with github.com/dlclark/regexp2,
// which has the lookahead that `\s+(?!\S)` needs), maps bytes through GPT-2's
// bytes_to_unicode table and merges by rank; results are cached per word.
// Unlike Hugging Face, added tokens marked normalized are also matched in the
// raw text rather than the normalized one; this differs only when the
// normalizer changes an added token's text.
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
