#!/usr/bin/python3
"""An independent reference byte-level BPE encoder for model/tokenizer's tests.

Plain Python, no `tokenizers` package. It reads a Hugging Face tokenizer.json
and encodes a fixed list of strings; the Go tests compare model/tokenizer's
Encode with the ids written here.

It implements only what the fixtures use: added tokens (matched first,
leftmost-longest, lstrip/rstrip), the NFC normalizer, the ByteLevel
pre-tokenizer (GPT-2 regex) and Split(regex, Isolated), GPT-2's
bytes_to_unicode, and BPE by merge rank (lowest rank first, leftmost among
equals), written as a plain loop, not as the Go code's heap.

APPROXIMATION: Python's `re` has no \\p{L} / \\p{N}. They are replaced by
[^\\W\\d_] (letters) and \\d (decimal digits), which agree with the Unicode
classes on ASCII and Latin text (the test strings) but not on, for example,
other numerics such as '²' or combining marks. The Go tests use regexp2 with
the real classes.

Usage: tools/golden/bpe_ref.py model/tokenizer/testdata
writes testdata/golden.json for testdata/{gpt2,llama3,trained}/tokenizer.json.
"""
import json
import os
import re
import sys
import unicodedata

L = r"[^\W\d_]"
N = r"\d"
NOT_SPACE_L_N = r"(?:[^\s\w]|_)"
NOT_CRLF_L_N = r"(?:[^\r\n\w]|_)"

GPT2_HF = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
GPT2_PY = r"'s|'t|'re|'ve|'m|'ll|'d| ?%s+| ?%s+| ?%s+|\s+(?!\S)|\s+" % (L, N, NOT_SPACE_L_N)

LLAMA3_HF = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
LLAMA3_PY = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|%s?%s+|%s{1,3}| ?%s+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
             % (NOT_CRLF_L_N, L, N, NOT_SPACE_L_N))

QWEN2_HF = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
QWEN2_PY = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|%s?%s+|%s| ?%s+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
            % (NOT_CRLF_L_N, L, N, NOT_SPACE_L_N))

PATTERNS = {GPT2_HF: GPT2_PY, LLAMA3_HF: LLAMA3_PY, QWEN2_HF: QWEN2_PY}

CASES = [
    "Hello world",
    "hello hello the world",
    "The theater is in the world of   spaces",
    "  leading and trailing  ",
    "line one\nline two\n\n\nthree",
    "tabs\tand\r\nCRLF",
    "numbers 123 1234567 12.5",
    "I'm sure it's what they've said, I'd think. DON'T",
    "café naïve résumé",
    "aaaaaaa aaaa aaa",
    "<|startoftext|>Hello<|eot_id|>",
    "x <sep> y",
    "word<sep>word",
    "<|start_header_id|>system<|end_header_id|>\n\nYou are helpful.<|eot_id|>",
    "punct!!! ... ?? (parens) [brackets] {braces} a_b__c",
    "mixed 3rd 42nd x2y",
]


def bytes_to_unicode():
    """GPT-2's byte -> printable unicode symbol map."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


B2U = bytes_to_unicode()


class Ref:
    def __init__(self, path):
        with open(path, encoding="utf-8") as f:
            tj = json.load(f)
        m = tj["model"]
        assert m["type"] == "BPE"
        self.vocab = m["vocab"]
        self.ranks = {}
        for i, mg in enumerate(m["merges"]):
            a, b = mg.split(" ") if isinstance(mg, str) else mg
            self.ranks[(a, b)] = i
        self.added = sorted(tj.get("added_tokens") or [], key=lambda a: -len(a["content"]))
        self.nfc = (tj.get("normalizer") or {}).get("type") == "NFC"
        self.steps = []
        self._pre(tj["pre_tokenizer"])

    def _pre(self, p):
        t = p["type"]
        if t == "Sequence":
            for q in p["pretokenizers"]:
                self._pre(q)
        elif t == "ByteLevel":
            rx = re.compile(GPT2_PY) if p.get("use_regex", True) else None
            self.steps.append(("bytelevel", p.get("add_prefix_space", True), rx))
        elif t == "Split":
            assert p["behavior"] == "Isolated" and not p.get("invert")
            self.steps.append(("split", re.compile(PATTERNS[p["pattern"]["Regex"]])))
        else:
            raise ValueError("unsupported pre_tokenizer " + t)

    def split_added(self, text):
        """Yields (segment, None) and (None, id) pieces."""
        out = []
        start = i = 0
        while i < len(text):
            hit = next((a for a in self.added if text.startswith(a["content"], i)), None)
            if hit is None:
                i += 1
                continue
            seg = text[start:i]
            if hit["lstrip"]:
                seg = seg.rstrip()
            if seg:
                out.append((seg, None))
            out.append((None, hit["id"]))
            i += len(hit["content"])
            if hit["rstrip"]:
                while i < len(text) and text[i].isspace():
                    i += 1
            start = i
        if start < len(text):
            out.append((text[start:], None))
        return out

    @staticmethod
    def regex_pieces(rx, s):
        pieces, prev = [], 0
        for m in rx.finditer(s):
            if m.end() == m.start():
                continue
            if m.start() > prev:
                pieces.append(s[prev:m.start()])
            pieces.append(m.group())
            prev = m.end()
        if prev < len(s):
            pieces.append(s[prev:])
        return pieces

    def pretokenize(self, s):
        pieces = [s]
        for step in self.steps:
            nxt = []
            for p in pieces:
                if step[0] == "split":
                    nxt += self.regex_pieces(step[1], p)
                else:
                    _, prefix, rx = step
                    if prefix and not p.startswith(" "):
                        p = " " + p
                    parts = self.regex_pieces(rx, p) if rx else [p]
                    nxt += ["".join(B2U[b] for b in q.encode("utf-8")) for q in parts]
            pieces = nxt
        return pieces

    def bpe(self, word):
        syms = list(word)
        while len(syms) > 1:
            best, at = None, -1
            for i in range(len(syms) - 1):
                r = self.ranks.get((syms[i], syms[i + 1]))
                if r is not None and (best is None or r < best):
                    best, at = r, i
            if best is None:
                break
            syms[at:at + 2] = [syms[at] + syms[at + 1]]
        return [self.vocab[s] for s in syms]

    def encode(self, text):
        ids = []
        for seg, tid in self.split_added(text):
            if tid is not None:
                ids.append(tid)
                continue
            if self.nfc:
                seg = unicodedata.normalize("NFC", seg)
            for w in self.pretokenize(seg):
                ids += self.bpe(w)
        return ids


def main(testdata):
    golden = {}
    for name in ("gpt2", "llama3", "trained"):
        path = os.path.join(testdata, name, "tokenizer.json")
        if not os.path.exists(path):
            continue
        ref = Ref(path)
        golden[name] = [{"text": t, "ids": ref.encode(t)} for t in CASES]
    with open(os.path.join(testdata, "golden.json"), "w", encoding="utf-8") as f:
        json.dump(golden, f, ensure_ascii=False, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main(sys.argv[1])
