#!/usr/bin/env python3
"""What a block-causal model answers on the sequence suite (docs/training.md, "Why the queue
suites stay low").

    /usr/bin/python3 tools/train/queue_diag.py --model models/llada-tiny-block --corpus data/corpus-long

Teacher-forced: one forward per training-split sample with "##" given and the rest of its
block masked; the first name's argmax right or wrong, by the list's length and the distance
from the list's end to the answer. Decoded: held-out samples under threshold decoding (0.95,
gen length 128); the answer's list index minus the asked name's, per question direction.
Layouts: the held-out "after" samples teacher-forced again with the list rewritten (the same
names, filler and position; train.bridge_prompt, the rungs of --bridge-layouts): as lookup-table
rows "* a = b" (one per neighbour pair) or "* a, b", as lines without the row marker, or as a
chain "a = b = c", under the sequence question or the lookup suite's ("What is the code for a?")
— which part of the list's layout the model's lookup needs. Span: held-out samples
teacher-forced, the first name and a later one with the answer given up to it.
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
    ap.add_argument("--skip-decode", action="store_true", help="no decoding (the layouts still use --decode samples)")
    ap.add_argument("--span", type=int, default=100, help="held-out span samples, teacher-forced")
    ap.add_argument("--device", default="cpu", help="torch device of the model's forwards (cuda: a GPU run's probes)")
    ap.add_argument("--out", help="also write the JSON here")
    args = ap.parse_args()
    torch.set_num_threads(1)
    dev = torch.device(args.device)
    m = from_pretrained(args.model).to(dev)
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

    def first_name(x, a):
        """Teacher-forced: prompt x, "##" given, the rest of its block masked; is the argmax a[1]?"""
        P = len(x)
        end = ((P + 1) // bs + 1) * bs
        with torch.no_grad():
            return int(m(torch.tensor([x + [a[0]] + [mask] * (end - P - 1)], device=dev))[0, P + 1].argmax()) == int(a[1])

    out = {"model": args.model}

    train = T.Corpus(os.path.join(args.corpus, "train.jsonl"), 128, eos, suites)
    idx = np.nonzero(train.suite == train.suites.index("sequence"))[0]
    idx = np.random.RandomState(0).permutation(idx)[:args.teacher]
    by = collections.defaultdict(lambda: [0, 0])
    for i in idx:
        p, a = train.prompt(i).tolist(), train.ans[i].tolist()
        names, e = list_names(p, heads, colon, comma, period)
        P = len(p)
        ok = first_name(p, a)
        for k in (("names", bucket(len(names), (6, 10, 16), ("3-5", "6-9", "10-15", "16+"))),
                  ("list end to answer", bucket(P - e, (40, 100, 200), ("<40", "40-99", "100-199", "200+"))),
                  ("all", "")):
            by[k][0] += 1
            by[k][1] += ok
    out["teacher_forced"] = {f"{k[0]} {k[1]}".strip(): {"n": n, "right": round(r / n, 3)} for k, (n, r) in sorted(by.items())}

    ev = T.Corpus(os.path.join(args.corpus, "eval.jsonl"), 128, eos, suites)
    idx = np.nonzero(ev.suite == ev.suites.index("sequence"))[0][:args.decode]
    prompts = [ev.prompt(i).tolist() for i in idx]
    outs = [] if args.skip_decode else generate_block_batch(m, prompts, 128, decoding="threshold", threshold=0.95, pad_id=eos)
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
    if not args.skip_decode:
        out["decoded"] = {"n": len(idx), "right": right,
                          "offsets": [{"direction": d, "offset": k, "n": n} for (d, k), n in sorted(offs.items(), key=lambda kv: (kv[0][0], kv[0][1] is None, kv[0][1] or 0))]}
    bv = T.bridge_vocab(os.path.join(args.model, "tokenizer.json"))
    eq, rng = voc["Ġ="], np.random.RandomState(0)
    probes = (("original", "list", 0.0, None),
              ("rows '* a = b', sequence question", "rows", 0.0, eq),
              ("rows '* a = b', lookup question", "rows", 1.0, eq),
              ("rows '* a, b', lookup question", "rows", 1.0, comma),
              ("rows '* a, b', sequence question", "rows", 0.0, comma),
              ("lines 'a = b', sequence question", "lines", 0.0, eq),
              ("lines 'a, b', sequence question", "lines", 0.0, comma),
              ("chain 'a = b = c', sequence question", "chain", 0.0, None),
              ("chain 'a = b = c', lookup question", "chain", 1.0, None),
              ("chain 'a ; b ; c' (a chain-any separator), sequence question", "chain", 0.0, voc[";"]),
              ("original, lookup question", "list", 1.0, None))

    lay = collections.defaultdict(lambda: [0, 0])
    for i, p in zip(idx, prompts):
        jq = max(j for j in range(len(p)) if p[j] in (after, before))
        if p[jq] != after:
            continue
        for name, layout, lq, sep in probes:
            x = T.bridge_prompt(p, bv, rng, layout, lq, sep).tolist()
            lay[name][0] += 1
            lay[name][1] += first_name(x, ev.ans[i])
    out["layouts"] = {k: {"n": n, "right": round(r / n, 3)} for k, (n, r) in lay.items()}

    # span, teacher-forced on held-out samples: the first name ("##" given), and a later name with
    # the answer given up to it (the previous answer name can key the lookup), the rest masked
    sidx = np.nonzero(ev.suite == ev.suites.index("span"))[0][:args.span]
    sp = {"first": [0, 0], "next, answer given up to it": [0, 0]}
    srng = np.random.RandomState(1)
    for i in sidx:
        p, a = ev.prompt(i).tolist(), [int(x) for x in T.strip_eos(ev.ans[i], eos)]
        sp["first"][0] += 1
        sp["first"][1] += first_name(p, a)
        k = 3 + 2 * srng.randint(0, (len(a) - 3) // 2)  # a later name: "## n1 , n2 , ..." has names at 1, 3, 5, ...
        P = len(p)
        end = ((P + k) // bs + 1) * bs
        with torch.no_grad():
            got = int(m(torch.tensor([p + a[:k] + [mask] * (end - P - k)], device=dev))[0, P + k].argmax())
        sp["next, answer given up to it"][0] += 1
        sp["next, answer given up to it"][1] += got == a[k]
    out["span_teacher_forced"] = {k: {"n": n, "right": round(r / max(n, 1), 3)} for k, (n, r) in sp.items()}
    text = json.dumps(out, indent=1)
    print(text)
    if args.out:
        with open(args.out + ".tmp", "w") as f:
            f.write(text + "\n")
        os.replace(args.out + ".tmp", args.out)


if __name__ == "__main__":
    main()
