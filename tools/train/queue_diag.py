#!/usr/bin/env python3
"""What a block-causal model answers on the sequence suite (docs/training.md, "Why the queue
suites stay low").

    /usr/bin/python3 tools/train/queue_diag.py --model models/llada-tiny-block --corpus data/corpus-long

Teacher-forced: one forward per training-split sample with "##" given and the rest of its
block masked; the first name's argmax right or wrong, by the list's length and the distance
from the list's end to the answer. Decoded: held-out samples under threshold decoding (0.95,
gen length 128); the answer's list index minus the asked name's, per question direction.
Layouts: the held-out "after" samples teacher-forced again with the list rewritten (the same
names, filler and position): as lookup-table rows "* a = b" (one per neighbour pair) or
"* a, b", or as a chain "a = b = c", under the sequence question or the lookup suite's
("What is the code for a?") — which part of the list's layout the model's lookup needs.
"""
import argparse
import collections
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE)))
import numpy as np  # noqa: E402
import torch  # noqa: E402

import train as T  # noqa: E402
from pyllada.generate import generate_block_batch  # noqa: E402
from pyllada.model import from_pretrained  # noqa: E402


def list_names(p, heads, colon, comma, period):
    """(names of the list, index of its closing period) in prompt ids p."""
    h = next(j for j in range(len(p) - 1) if p[j] in heads and p[j + 1] == colon)
    e = h + 2 + p[h + 2:].index(period)
    return [x for x in p[h + 2:e] if x != comma], e


def bucket(v, edges, names):
    return next((n for e, n in zip(edges, names) if v < e), names[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="models/llada-tiny-block")
    ap.add_argument("--corpus", default="data/corpus-long")
    ap.add_argument("--teacher", type=int, default=400, help="training-split samples, teacher-forced")
    ap.add_argument("--decode", type=int, default=50, help="held-out samples decoded (and rewritten: layouts)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    m = from_pretrained(args.model)
    m.eval()
    tok = json.load(open(os.path.join(args.model, "tokenizer.json")))
    voc = dict(tok["model"]["vocab"])
    for a in tok.get("added_tokens", []):
        voc[a["content"]] = a["id"]
    heads = {voc[h] for h in ("Route", "Order", "Queue")}
    colon, comma, period = voc[":"], voc[","], voc["."]
    after, before = voc["Ġafter"], voc["Ġbefore"]
    c, bs, mask, eos = m.config, m.config.block_size, m.config.mask_token_id, m.config.eos_token_id
    suites = ["lookup", "arithmetic", "rule", "sequence", "span"]
    out = {"model": args.model}

    train = T.Corpus(os.path.join(args.corpus, "train.jsonl"), 128, eos, suites)
    idx = np.nonzero(train.suite == train.suites.index("sequence"))[0]
    idx = np.random.RandomState(0).permutation(idx)[:args.teacher]
    by = collections.defaultdict(lambda: [0, 0])
    for i in idx:
        p, a = train.prompt(i).tolist(), train.ans[i].tolist()
        names, e = list_names(p, heads, colon, comma, period)
        P = len(p)
        end = ((P + 1) // bs + 1) * bs
        x = p + [a[0]] + [mask] * (end - P - 1)
        with torch.no_grad():
            ok = int(m(torch.tensor([x]))[0, P + 1].argmax()) == a[1]
        for k in (("names", bucket(len(names), (6, 10, 16), ("3-5", "6-9", "10-15", "16+"))),
                  ("list end to answer", bucket(P - e, (40, 100, 200), ("<40", "40-99", "100-199", "200+"))),
                  ("all", "")):
            by[k][0] += 1
            by[k][1] += ok
    out["teacher_forced"] = {f"{k[0]} {k[1]}".strip(): {"n": n, "right": round(r / n, 3)} for k, (n, r) in sorted(by.items())}

    ev = T.Corpus(os.path.join(args.corpus, "eval.jsonl"), 128, eos, suites)
    idx = np.nonzero(ev.suite == ev.suites.index("sequence"))[0][:args.decode]
    prompts = [ev.prompt(i).tolist() for i in idx]
    outs = generate_block_batch(m, prompts, 128, decoding="threshold", threshold=0.95, pad_id=eos)
    offs = collections.Counter()
    right = 0
    for i, p, o in zip(idx, prompts, outs):
        names, _ = list_names(p, heads, colon, comma, period)
        o = T.strip_eos(o, eos)
        right += o == T.strip_eos(ev.ans[i], eos)
        jq = max(j for j in range(len(p)) if p[j] in (after, before))  # the question's "after"/"before"
        q, d = p[jq + 1], "after" if p[jq] == after else "before"
        got = next((x for x in o if x in names), None)
        offs[(d, None if got is None else names.index(got) - names.index(q))] += 1
    out["decoded"] = {"n": len(idx), "right": right,
                      "offsets": [{"direction": d, "offset": k, "n": n} for (d, k), n in sorted(offs.items(), key=lambda kv: (kv[0][0], kv[0][1] is None, kv[0][1] or 0))]}
    eq, nl, star = voc["Ġ="], voc["Ċ"], voc["*"]
    lookq = [voc[x] for x in ("What", "Ġis", "Ġthe", "Ġcode", "Ġfor")]

    def rows(names, sep):
        return sum(([nl, star, a, sep, b] for a, b in zip(names, names[1:])), [])

    lay = collections.defaultdict(lambda: [0, 0])
    for i, p in zip(idx, prompts):
        jq = max(j for j in range(len(p)) if p[j] in (after, before))
        if p[jq] != after:
            continue
        names, e = list_names(p, heads, colon, comma, period)
        h = next(j for j in range(len(p) - 1) if p[j] in heads and p[j + 1] == colon)
        head, tail, ask = p[:h + 2], p[e + 1:], p[e + 1:jq - 4] + lookq + p[jq + 1:]  # "Which guest comes right after"
        for name, x in (("original", p),
                        ("rows '* a = b', sequence question", head + rows(names, eq) + tail),
                        ("rows '* a = b', lookup question", head + rows(names, eq) + ask),
                        ("rows '* a, b', lookup question", head + rows(names, comma) + ask),
                        ("chain 'a = b = c', sequence question",
                         head + sum(([eq, n] if k else [n] for k, n in enumerate(names)), []) + p[e:])):
            P = len(x)
            end = ((P + 1) // bs + 1) * bs
            with torch.no_grad():
                got = int(m(torch.tensor([x + [ev.ans[i][0]] + [mask] * (end - P - 1)]))[0, P + 1].argmax())
            lay[name][0] += 1
            lay[name][1] += got == int(ev.ans[i][1])
    out["layouts"] = {k: {"n": n, "right": round(r / n, 3)} for k, (n, r) in lay.items()}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
