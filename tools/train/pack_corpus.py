#!/usr/bin/env python3
"""Packs a corpus split (<corpus>/train.jsonl of `go run ./tools/corpus`) into the compact
<corpus>/train.npz that train.py reads when the jsonl is absent: the same samples as int16
token arrays (prompts flat + offsets, answers flat + offsets, suite and level per sample),
compressed. For carrying a corpus to a machine where the jsonl (≈ 180 MB) is too large.

    python3 tools/train/pack_corpus.py --corpus data/corpus-long --split train --out DIR/train.npz
"""
import argparse
import json
import os

import numpy as np


def pack(path, out, suites):
    flat, offs, aflat, aoffs, suite, level = [], [0], [], [0], [], []
    with open(path) as f:
        for line in f:
            if not line.strip():
                continue
            r = json.loads(line)
            if r["suite"] not in suites:
                suites.append(r["suite"])
            flat.extend(r["ids"])
            offs.append(len(flat))
            aflat.extend(r["answer"])
            aoffs.append(len(aflat))
            suite.append(suites.index(r["suite"]))
            level.append(int(r.get("level", -1)))
    flat, aflat = np.asarray(flat), np.asarray(aflat)
    if len(flat) and (flat.max() > 32767 or aflat.max() > 32767 or min(flat.min(), aflat.min()) < 0):
        raise SystemExit(f"{path}: token ids outside int16")
    alen = np.diff(np.asarray(aoffs))
    tmp = out + ".tmp.npz"
    np.savez_compressed(tmp, flat=flat.astype(np.int16), offs=np.asarray(offs, np.int64),
                        aflat=aflat.astype(np.int16), aoffs=np.asarray(aoffs, np.int64), alen=alen.astype(np.int32),
                        suite=np.asarray(suite, np.int8), level=np.asarray(level, np.int8), suites=np.asarray(suites))
    os.replace(tmp, out)
    return len(suite)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--split", default="train")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    with open(os.path.join(a.corpus, "meta.json")) as f:
        suites = list(json.load(f).get("suites", []))
    n = pack(os.path.join(a.corpus, a.split + ".jsonl"), a.out, suites)
    print(f"{a.out}: {n} samples, {os.path.getsize(a.out) / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
