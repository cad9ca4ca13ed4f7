#!/usr/bin/env python3
"""Tiny synthetic corpus in the format of `go run ./tools/corpus` (for testing train.py).

    /usr/bin/python3 tools/train/make_synth.py --out /tmp/synth --train 4000 --eval 200

Byte-level ids (0..255 = bytes, specials 256..261 as in the golden tokenizer).
Suites: lookup (table in the system message), arith (a+b), rule (shift letters by k
given in the system message). train.jsonl/eval.jsonl lines:
{"suite", "ids": prompt ids, "prefix_len": system-part length, "answer": ids ending with EOS}.
"""
import argparse
import json
import os
import random

BOS, EOS, MASK, SH, EH, EOT = 256, 257, 258, 259, 260, 261


def enc(s):
    return list(s.encode())


def chat(system, user):
    ids = [BOS, SH] + enc("system") + [EH] + enc("\n\n" + system) + [EOT]
    prefix = len(ids)
    ids += [SH] + enc("user") + [EH] + enc("\n\n" + user) + [EOT] + [SH] + enc("assistant") + [EH] + enc("\n\n")
    return ids, prefix


def sample(rng, max_pairs=20):
    suite = rng.choice(["lookup", "arith", "rule"])
    if suite == "lookup":
        n = rng.randint(3, max_pairs)
        keys = rng.sample([a + b for a in "abcdefghij" for b in "klmnopqrst"], n)
        vals = [str(rng.randint(10, 99)) for _ in keys]
        system = "Table:\n" + "\n".join(f"{k}={v}" for k, v in zip(keys, vals))
        i = rng.randrange(n)
        user, ans = f"value of {keys[i]}?", vals[i]
    elif suite == "arith":
        a, b = rng.randint(0, 99), rng.randint(0, 99)
        system = "Add the numbers. " + "Be exact. " * rng.randint(0, 8)
        user, ans = f"{a}+{b}", str(a + b)
    else:
        k = rng.randint(1, 3)
        system = f"Shift every letter forward by {k}. " + "Only letters a-j. " * rng.randint(0, 6)
        w = "".join(rng.choice("abcdefg") for _ in range(rng.randint(2, 4)))
        user, ans = w, "".join(chr(ord(c) + k) for c in w)
    ids, prefix = chat(system, user)
    return {"suite": suite, "ids": ids, "prefix_len": prefix, "answer": enc("## " + ans) + [EOS]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--train", type=int, default=4000)
    ap.add_argument("--eval", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--vocab", type=int, default=262, help="vocab_size written to meta (>= 262)")
    ap.add_argument("--max-pairs", type=int, default=20)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    rng = random.Random(a.seed)
    for name, n in (("train", a.train), ("eval", a.eval)):
        with open(os.path.join(a.out, name + ".jsonl"), "w") as f:
            for _ in range(n):
                f.write(json.dumps(sample(rng, a.max_pairs)) + "\n")
    json.dump({"vocab_size": a.vocab, "mask_id": MASK, "eos_id": EOS, "bos_id": BOS, "gen_length": 12,
               "suites": ["lookup", "arith", "rule"], "version": "synth-1"},
              open(os.path.join(a.out, "meta.json"), "w"))


if __name__ == "__main__":
    main()
