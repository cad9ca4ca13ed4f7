#!/usr/bin/python3
"""Writes the small hand-made tokenizer.json fixtures of model/tokenizer.

Two fixtures share one vocabulary (the 256 GPT-2 byte symbols, id = byte
value, plus the hand-picked merges below):

  gpt2/      ByteLevel pre-tokenizer with the GPT-2 regex, NFC normalizer,
             merges in the "a b" string form, TemplateProcessing post-processor.
  llama3/    Sequence[Split(Llama-3 regex), ByteLevel(use_regex false)],
             merges in the [a, b] pair form, a tokenizer_config.json with
             LLaDA's chat template.

Usage: tools/golden/bpe_fixtures.py model/tokenizer/testdata
"""
import json
import os
import sys

from bpe_ref import bytes_to_unicode  # the GPT-2 byte symbols, shared with the reference encoder


B2U = bytes_to_unicode()

# Merges in rank order, written with readable stand-ins: ' ' for Ġ, '\n' for Ċ.
MERGES = [
    (" ", "t"), ("h", "e"), (" t", "he"), ("i", "n"), (" ", "a"), ("e", "r"),
    ("o", "n"), (" ", "w"), ("r", "e"), ("l", "l"), ("e", "ll"), ("h", "ell"),
    ("hell", "o"), (" ", "hello"), ("o", "r"), (" w", "or"), (" wor", "l"),
    (" worl", "d"), ("\n", "\n"), (" ", " "), ("  ", "  "), ("1", "2"),
    ("12", "3"), ("n", "g"), ("in", "g"), ("\u00e9",), ("a", "f"), ("c", "af"),
    ("caf", "\u00e9"), ("a", "a"), ("aa", "aa"), ("H", "ell"), ("Hell", "o"), (" ", "is"),
    ("i", "s"),
]

LLADA_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' %}"
    "{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"
)

LLAMA3 = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"


def mapped(s):
    return "".join(B2U[b] for b in s.encode("utf-8"))


def build():
    vocab = {B2U[b]: b for b in range(256)}
    merges = []
    for m in MERGES:
        if len(m) == 1:
            # a multi-byte character as one token: merge its bytes
            bs = [B2U[b] for b in m[0].encode("utf-8")]
            a, b = bs[0], "".join(bs[1:])
            assert len(bs) == 2
        else:
            a, b = mapped(m[0]), mapped(m[1])
        merges.append((a, b))
        if a + b not in vocab:
            vocab[a + b] = len(vocab)
    n = len(vocab)
    specials = ["<|startoftext|>", "<|endoftext|>", "<|eot_id|>",
                "<|start_header_id|>", "<|end_header_id|>", "<|mdm_mask|>"]
    added = [dict(id=n + 4 + i, content=s, single_word=False, lstrip=False, rstrip=False,
                  normalized=False, special=True) for i, s in enumerate(specials)]
    # a non-special added token that swallows the whitespace around it
    added.append(dict(id=n + 4 + len(specials), content="<sep>", single_word=False,
                      lstrip=True, rstrip=True, normalized=True, special=False))
    return vocab, merges, added


def model(vocab, merges, pair_form):
    return {
        "type": "BPE", "dropout": None, "unk_token": None,
        "continuing_subword_prefix": "", "end_of_word_suffix": "",
        "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
        "vocab": vocab,
        "merges": [[a, b] for a, b in merges] if pair_form else ["%s %s" % (a, b) for a, b in merges],
    }


def main(out):
    vocab, merges, added = build()
    bl = lambda rx: {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": rx}
    tp = {"type": "TemplateProcessing",
          "single": [{"SpecialToken": {"id": "<|startoftext|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
          "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
          "special_tokens": {"<|startoftext|>": {"id": "<|startoftext|>", "ids": [added[0]["id"]], "tokens": ["<|startoftext|>"]}}}
    gpt2 = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": {"type": "NFC"}, "pre_tokenizer": bl(True), "post_processor": tp,
        "decoder": bl(True), "model": model(vocab, merges, False),
    }
    llama3 = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": LLAMA3}, "behavior": "Isolated", "invert": False},
            bl(False)]},
        "post_processor": {"type": "Sequence", "processors": [bl(True), tp]},
        "decoder": bl(True), "model": model(vocab, merges, True),
    }
    for name, tok in (("gpt2", gpt2), ("llama3", llama3)):
        d = os.path.join(out, name)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
            json.dump(tok, f, ensure_ascii=False, indent=1)
            f.write("\n")
    with open(os.path.join(out, "llama3", "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({"bos_token": "<|startoftext|>", "eos_token": {"content": "<|endoftext|>"},
                   "chat_template": LLADA_TEMPLATE, "model_max_length": 4096}, f, ensure_ascii=False, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main(sys.argv[1])
