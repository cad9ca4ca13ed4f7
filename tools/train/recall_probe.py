#!/usr/bin/env python3
"""Associative-recall probe: how many optimizer steps a model needs to learn to read its prefix.

Every suite of the bundled model is, at heart, associative recall: find the row of
the system message that the question names and copy its value. This probe isolates
that skill on synthetic single-token data and measures how long the loss plateau
before it lasts, for LLaDA's architecture (tools/pyllada, RoPE) and for a plain
PyTorch transformer encoder (learned absolute positions) of the same width:

    k1 = v1  k2 = v2  ...  kP = vP  ?  kq  [MASK]  EOS EOS EOS     → predict vq

Keys are drawn without replacement from --keys tokens, values from --values tokens;
the loss is the cross-entropy of the masked value slot (no 1/t weighting: the slot
is always masked). Uniform over the in-context values is ln(pairs) nats; a model
that reads its prefix goes well below it.

    python3 tools/train/recall_probe.py --arch llada --layers 8 --pairs 3 --steps 1500
    python3 tools/train/recall_probe.py --arch vanilla --layers 8 --pairs 3 --steps 1500

Prints one JSON line every --log-every steps; single-threaded.
"""
import argparse
import json
import math
import os
import sys
import time

for _v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from pyllada.model import LLaDA, LLaDAConfig  # noqa: E402

V, MASK, EOS, EQ, Q = 256, 250, 251, 252, 253
FILLER = 200  # --filler tokens are drawn from [200, 240)
SLOTS = 4  # answer slots: the value and EOS padding


class Vanilla(nn.Module):
    def __init__(self, d, layers, heads):
        super().__init__()
        self.emb = nn.Embedding(V, d)
        self.pos = nn.Embedding(256, d)
        layer = nn.TransformerEncoderLayer(d, heads, 3 * d, 0.0, batch_first=True, norm_first=True)
        self.enc = nn.TransformerEncoder(layer, layers)
        self.out = nn.Linear(d, V)

    def forward(self, x):
        return self.out(self.enc(self.emb(x) + self.pos(torch.arange(x.shape[1]))))


def batch(g, n, pairs, keys, values, shared=False, filler=0):
    k = torch.stack([torch.randperm(keys, generator=g)[:pairs] for _ in range(n)])
    v = torch.randint(0 if shared else 100, (0 if shared else 100) + values, (n, pairs), generator=g)
    q = torch.randint(0, pairs, (n,), generator=g)
    rows = torch.stack([k, torch.full_like(k, EQ), v], -1).reshape(n, -1)
    r = torch.arange(n)
    pre = [torch.randint(FILLER, FILLER + 40, (n, filler), generator=g)] if filler else []  # prose
    return torch.cat(pre + [rows, torch.full((n, 1), Q), k[r, q][:, None], v[r, q][:, None],
                      torch.full((n, SLOTS - 1), EOS)], 1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arch", choices=["llada", "vanilla"], default="llada")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--d-model", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--keys", type=int, default=26)
    ap.add_argument("--values", type=int, default=26)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--log-every", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--init", choices=["torch", "train"], default="torch",
                    help="torch: PyTorch's default initialisation; train: train.py's init_weights")
    ap.add_argument("--wd", type=float, default=0.01, help="AdamW weight decay (train.py: 0.1)")
    ap.add_argument("--clip", type=float, default=0.0, help="gradient-norm clip, 0 = none (train.py: 1.0)")
    ap.add_argument("--filler", type=int, default=0,
                    help="random prose tokens before the pairs: how the plateau grows with irrelevant context")
    ap.add_argument("--shared-pool", action="store_true", help="keys and values drawn from the same tokens")
    a = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(a.seed)
    if a.arch == "llada":
        cfg = LLaDAConfig(d_model=a.d_model, n_layers=a.layers, n_heads=a.heads, n_kv_heads=a.heads,
                          mlp_hidden_size=3 * a.d_model, vocab_size=V, embedding_size=V,
                          mask_token_id=MASK, eos_token_id=EOS, pad_token_id=EOS)
        model = LLaDA(cfg)
        if a.init == "train":
            sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
            from train import init_weights
            init_weights(model, a.seed)
    else:
        model = Vanilla(a.d_model, a.layers, a.heads)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=a.wd)
    g = torch.Generator().manual_seed(a.seed + 1)
    t0, run = time.time(), []
    for step in range(a.steps):
        ids = batch(g, a.batch, a.pairs, a.keys, a.values, a.shared_pool, a.filler)
        slot = ids.shape[1] - SLOTS
        x = ids.clone()
        x[:, slot] = MASK
        ce = F.cross_entropy(model(x)[:, slot], ids[:, slot])
        opt.zero_grad(set_to_none=True)
        ce.backward()
        if a.clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
        opt.step()
        run.append(float(ce))
        if (step + 1) % a.log_every == 0:
            print(json.dumps({"arch": a.arch, "layers": a.layers, "pairs": a.pairs, "filler": a.filler, "step": step + 1,
                              "ce": round(sum(run) / len(run), 3), "uniform_in_context": round(math.log(a.pairs), 3),
                              "seconds": round(time.time() - t0)}), flush=True)
            run = []


if __name__ == "__main__":
    main()
