#!/usr/bin/env python3
"""Greedy answers of a checkpoint on held-out prompts, from the PyTorch reference.

    /usr/bin/python3 tools/train/answers.py --model models/llada-tiny --corpus data/corpus \\
        --per-suite 5 --out train-out/answers.json

For the check "the Go engine and the PyTorch training code agree on this checkpoint":
the JSON lists, per case, the prompt ids, the decoding settings (gen_length from
meta.json, two tokens per step, one block unless --block-length), the greedy answer
ids (full gen_length slots) and the corpus answer. Decoding is the plain one-sample
sampler (pyllada.generate.generate), no batching, float32.
"""
import argparse
import json
import os
import sys

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
from pyllada.model import from_pretrained  # noqa: E402
from pyllada.generate import generate  # noqa: E402
from pyllada.report import write_json  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="models/llada-tiny")
    ap.add_argument("--corpus", default="data/corpus")
    ap.add_argument("--per-suite", type=int, default=5)
    ap.add_argument("--block-length", type=int, default=0)
    ap.add_argument("--gen-length", type=int, default=0, help="answer slots (default: the corpus's gen_length)")
    ap.add_argument("--steps", type=int, default=0, help="denoising steps (default: half the gen length)")
    ap.add_argument("--out", default="-")
    a = ap.parse_args()
    torch.set_num_threads(1)
    meta = json.load(open(os.path.join(a.corpus, "meta.json")))
    G = a.gen_length or int(meta["gen_length"])
    bl = a.block_length or int(meta.get("block_length", G))
    steps = a.steps or G // 2
    m = from_pretrained(a.model)
    eos = m.config.eos_token_id
    taken, cases = {}, []
    with open(os.path.join(a.corpus, "eval.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            if taken.get(r["suite"], 0) >= a.per_suite:
                continue
            taken[r["suite"]] = taken.get(r["suite"], 0) + 1
            out = generate(m, torch.tensor(r["ids"]), G, steps, bl)[0, len(r["ids"]):].tolist()
            got = out[:out.index(eos)] if eos in out else out
            want = r["answer"][:r["answer"].index(eos)] if eos in r["answer"] else r["answer"]
            cases.append({"id": r.get("id"), "suite": r["suite"], "prompt_ids": r["ids"],
                          "answer_ids": out, "expected_ids": r["answer"], "correct": got == want})
    res = {"model": a.model, "gen_length": G, "steps": steps, "block_length": bl, "temperature": 0.0,
           "remasking": "low_confidence", "cases": cases,
           "accuracy": sum(c["correct"] for c in cases) / max(1, len(cases))}
    if write_json(res, a.out):
        print(f"{len(cases)} cases, accuracy {res['accuracy']:.2f} -> {a.out}")


if __name__ == "__main__":
    main()
