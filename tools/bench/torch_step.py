#!/usr/bin/env python3
"""Times the PyTorch reference forward (tools/pyllada) for one denoising step.

Same work as the Go benchmark BenchmarkStep/<shape>/full: a forward over 512
positions with every row computed and logits for the last 32 rows, on the
same checkpoint files and the same number of threads. Prints one line per
model directory:  <name> <seconds per step> <GFLOP/s>

    /usr/bin/python3 tools/bench/torch_step.py --threads 2 DIR...
"""
import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from pyllada.model import from_pretrained  # noqa: E402


def step_flops(c, n, r, lr):
    # Must match model.Config.StepFLOPs in Go.
    d, kv, hid = c.d_model, c.kv_dim, c.mlp_hidden_size
    per_layer = 2 * r * (2 * d * d + 2 * d * kv) + 2 * r * 3 * d * hid + 4 * r * n * d
    return c.n_layers * per_layer + 2 * lr * d * c.rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--min-seconds", type=float, default=3.0)
    ap.add_argument("dirs", nargs="+")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    for d in a.dirs:
        m = from_pretrained(d)
        c = m.config
        g = torch.Generator().manual_seed(1)
        ids = torch.randint(0, c.vocab_size, (1, a.seq), generator=g)
        lr = 32
        with torch.no_grad():
            def step():
                x = m(ids, return_hidden=True)
                return m.head(x[:, -lr:])
            step()  # warm up
            n, t0 = 0, time.perf_counter()
            while True:
                step()
                n += 1
                el = time.perf_counter() - t0
                if el >= a.min_seconds and n >= 2:
                    break
        sec = el / n
        print(f"{os.path.basename(os.path.normpath(d))} {sec:.6f} {step_flops(c, a.seq, a.seq, lr) / sec / 1e9:.2f}")
        sys.stdout.flush()
        del m


if __name__ == "__main__":
    main()
