#!/usr/bin/env python3
"""Writes model/testdata/guided_golden.json, the parity goldens of the Go engine's guided decoder:

    /usr/bin/python3 tools/golden/make_guided_golden.py          # from the repo root

Guided diffusion (FlashDLM, arXiv 2505.21467, Algorithm 1), written here from the paper and the
"speculative" generator of its public code (ZhanqiuHu/flash-dlm-experimental,
guided_diffusion/diff_spec_utils_shifted.py: speculative_diffusion_generate, ARVerifier.batch_verify
and its deterministic and top-k-relative rules), not from this project's Go. The pair is the
fixtures that share a tokenizer (vocabulary and chat template): the diffusion model
model/testdata/tiny-llada-moe (tools/pyllada/decoder.py's LLaDA-MoE forward) and the guide
model/testdata/tiny-llama (tools/golden/make_causal_golden.py's Hugging Face Llama forward), both in
float64 from the stored weights, and again in float32: a case whose float32 run differs is refused.

The algorithm, per step, until the answer has no mask left:
  1. one forward of the diffusion model over the whole canvas; its proposals (drafts) are the argmax
     of every masked slot of the current block (with one block, the whole answer: FlashDLM's own
     setting); commits are left to right, so the masked slots are the block from the first one on;
  2. the guide holds the committed prefix (prompt and committed answer) but its last token in its
     cache (here a token list whose K/V are recomputed by a causal forward: the same numbers as a K/V
     cache; the first step pushes the prompt but its last token, one guide forward), and verifies
     the drafts in chunks of 32: each chunk is one guide forward over [the last committed token (or
     the previous chunk's last draft), the chunk's drafts but its last], whose rows predict the
     chunk's drafts (also for a last chunk of fewer than 32: FlashDLM's snapshot then feeds its last draft
     too and, when all are accepted, feeds it once more at the next step, a stale row not copied here);
     a draft is accepted while it is the guide's argmax (deterministic), or
     (topk_relative, tau) while it is in the guide's top k and p(draft) >= tau * p(top);
     at the first rejection the guide's top token is chosen there and verification stops;
     the cache keeps the fed tokens up to the last accepted draft;
  3. the chosen tokens are written into their slots; at a chosen EOS the remaining masks become
     EOS and decoding stops.
NFE: the diffusion model one per step; the guide one prefill plus one per verified chunk.

"oracle" cases replace the diffusion model by fixed drafts (a given answer, with its own token at
every slot): the guide's greedy answer with every 10th slot replaced by token 0, over 80 slots, so
that steps verify several chunks and stop inside one.

Each case records the prompt, gen and block length, the rule, the answer, both models' NFE, the
tokens committed at each step, and the smallest decision margins (the diffusion model's top-1 minus
top-2 logit at every verified draft; the guide's at every verified slot; for topk_relative the
smallest |log p(draft)/p(top) - log tau| and the gap between the k-th and (k+1)-th logit where the
draft sat at that boundary; LLaDA-MoE's smallest router gap over its forwards).
"""
import json
import math
import os
import sys
from dataclasses import fields

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tools"))

import make_golden as G  # noqa: E402  (encoder, chat framing, JSON writer)
import make_arch_golden as A  # noqa: E402  (router margins)
from make_causal_golden import CausalLM  # noqa: E402  (HF Llama reference)
from pyllada import safetensors_io as st  # noqa: E402
from pyllada.decoder import Decoder, DecoderConfig  # noqa: E402

GENERATOR = "tools/golden/make_guided_golden.py"
CHUNK = 32  # FlashDLM's verify_batch_size
TESTDATA = os.path.join(ROOT, "model", "testdata")


def load_dlm(name, dtype):
    d = os.path.join(TESTDATA, name)
    with open(os.path.join(d, "config.json")) as f:
        raw = json.load(f)
    known = {f.name for f in fields(DecoderConfig)}
    c = DecoderConfig(arch="llada-moe", **{k: v for k, v in raw.items() if k in known})
    m = Decoder(c)
    m.load_hf_state_dict(st.load_file(os.path.join(d, "model.safetensors")), d)
    return m.to(dtype).eval()


def load_guide(name, dtype):
    d = os.path.join(TESTDATA, name)
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    return CausalLM(cfg, st.load_file(os.path.join(d, "model.safetensors")), dtype), cfg


def top2_gap(lg):
    t = torch.topk(lg.to(torch.float64), 2).values
    return float(t[0] - t[1])


class Verifier:
    """The guide's side (FlashDLM's ARVerifier): cache = the token ids whose K/V the guide holds."""

    def __init__(self, model, rule, tau, k, margins):
        self.m, self.rule, self.tau, self.k, self.mg = model, rule, tau, k, margins
        self.cache, self.calls = [], 0

    def run(self, new):
        """One guide forward over cache + new; the logits of new's rows."""
        self.calls += 1
        ids = self.cache + new
        with torch.no_grad():
            return self.m.forward(ids, list(range(len(ids))))[len(self.cache):]

    def accept(self, lg, draft):
        lg = lg.to(torch.float64)
        top = int(lg.argmax())
        self.mg["guide"].append(top2_gap(lg))
        if self.rule == "deterministic":
            return draft == top, top
        probs = torch.softmax(lg, -1)
        tk = torch.topk(probs, self.k)
        ok = draft in tk.indices.tolist() and float(probs[draft]) >= self.tau * float(tk.values[0])
        if draft in tk.indices.tolist():
            self.mg["tau"].append(abs(float(lg[draft] - lg[top]) - math.log(self.tau)))
            s = torch.sort(lg, descending=True).values
            if float(lg[draft]) == float(s[self.k - 1]):  # the draft is the k-th: the boundary decides
                self.mg["topk"].append(float(s[self.k - 1] - s[self.k]))
        elif len(lg) > self.k:
            s = torch.sort(lg, descending=True).values
            if float(lg[draft]) == float(s[self.k]):
                self.mg["topk"].append(float(s[self.k - 1] - s[self.k]))
        return ok, top

    def verify(self, prefix, drafts, confs=None, keep=None):
        """The chosen tokens for drafts (confs: the diffusion model's softmax probability of each; with keep,
        a draft the rule rejects is kept all the same when its confidence is at least keep: dlmcache's
        guided+threshold:T, not FlashDLM's rule) and how many of them were kept so."""
        if len(self.cache) < len(prefix) - 1:  # the prefill: the prefix but its last token
            self.run(prefix[len(self.cache):-1])
            self.cache = list(prefix[:-1])
        last, chosen, i, kept = prefix[-1], [], 0, 0
        while i < len(drafts):
            chunk, acc = drafts[i:i + CHUNK], 0
            # the token before the chunk, then the chunk but its last: one row per draft verified (FlashDLM's
            # code feeds [last] + drafts[:31] also when fewer than 32 drafts are left, so that a fully accepted
            # step leaves the last draft in the cache, and the next step feeds it again: not copied here)
            inp = ([last] if i == 0 else [drafts[i - 1]]) + chunk[:-1]
            lg = self.run(inp)
            for j, d in enumerate(chunk):
                ok, top = self.accept(lg[j], d)
                if not ok and keep is not None:
                    self.mg["keep"].append(abs(confs[i + j] - keep))
                    if confs[i + j] >= keep:
                        ok, kept = True, kept + 1
                if ok:
                    chosen.append(d)
                    acc += 1
                else:
                    chosen.append(top)
                    break
            self.cache = (self.cache + inp)[:len(self.cache) + acc + 1]
            if acc < len(chunk):
                break
            i += CHUNK
        return chosen, kept


def guided(dlm, guide, prompt, gen_length, block_length, rule="deterministic", tau=None, k=5, oracle=None, keep=None):
    c = dlm.config
    mask, eos = c.mask_token_id, c.eos_token_id
    seq = list(prompt) + [mask] * gen_length
    mg = {"dlm": [], "guide": [], "tau": [], "topk": [], "router": [], "keep": []}
    ver = Verifier(guide, rule, tau, k, mg)
    nfe, trace, stopped = 0, [], False
    block_length = block_length or gen_length
    for b in range(gen_length // block_length):
        bs, be = len(prompt) + b * block_length, len(prompt) + (b + 1) * block_length
        while not stopped and mask in seq[bs:be]:
            pos = [p for p in range(bs, be) if seq[p] == mask]
            assert pos == list(range(pos[0], be)), "masked slots not a suffix of the block"
            nfe += 1
            confs = None
            if oracle is not None:
                drafts = [oracle[p - len(prompt)] for p in pos]
            else:
                with torch.no_grad():
                    lg = dlm(torch.tensor([seq]))[0]
                if c.moe:
                    mg["router"].append(A.router_margin(dlm, seq))
                drafts = [int(lg[p].argmax()) for p in pos]
                confs = [float(torch.softmax(lg[p].to(torch.float64), -1).max()) for p in pos]
                mg["dlm"].extend(top2_gap(lg[p]) for p in pos)
            chosen, kept = ver.verify(seq[:pos[0]], drafts, confs, keep)
            if oracle is None:  # only the verified drafts' margins count
                mg["dlm"] = mg["dlm"][:len(mg["dlm"]) - len(drafts) + len(chosen)]
            step = []
            for p, ch in zip(pos, chosen):
                assert ch != mask, "the guide chose the mask token"
                seq[p] = ch
                step.append(ch)
                if ch == eos:
                    seq = [eos if t == mask else t for t in seq]
                    stopped = True
                    break
            kept = min(kept, sum(1 for d, ch in zip(drafts, step) if d == ch))  # none after an EOS cut
            trace.append({"committed": step, "accepted": sum(1 for d, ch in zip(drafts, step) if d == ch), "kept": kept})
    ans = seq[len(prompt):]
    return {"answer_ids": ans, "nfe": nfe, "guide_nfe": ver.calls, "trace": trace,
            "decoded": len(ans) if not stopped else sum(len(s["committed"]) for s in trace),
            "min_margins": {k2: (min(v) if v else None) for k2, v in mg.items()}}


def greedy(guide, prompt, gen_length, eos):
    ids = list(prompt)
    while len(ids) < len(prompt) + gen_length:
        with torch.no_grad():
            ids.append(int(guide.forward(ids, list(range(len(ids))))[-1].argmax()))
        if ids[-1] == eos:
            break
    return ids[len(prompt):] + [eos] * (len(prompt) + gen_length - len(ids))


def main():
    sid = {s: 256 + i for i, s in enumerate(A.LLADA_SPECIALS)}
    dlm64, dlm32 = load_dlm("tiny-llada-moe", torch.float64), load_dlm("tiny-llada-moe", torch.float32)
    (g64, gcfg), (g32, _) = load_guide("tiny-llama", torch.float64), load_guide("tiny-llama", torch.float32)
    eos = dlm64.config.eos_token_id
    assert gcfg["vocab_size"] == dlm64.config.vocab_size and gcfg["eos_token_id"] == eos

    def enc(system, user):
        return G.encode(G.chat(system, user), sid)
    prompts = [
        ("terse", enc("You are terse.", "Say hi.")),
        ("sum", enc(None, "2+2?")),
        ("attic", enc("You are a tutor. Answer in one line.", "What is in the attic at night?")),
        ("cat", enc(None, "The cat sat on")),
        ("ada", enc("Name: Ada.", "Hi! What is your name?")),
        ("list", enc(None, "List three colours.")),
        ("code", enc("You write Go.", "func main() {")),
        ("rain", enc(None, "Why is the sky grey before rain?")),
        ("kv", enc("k=v", "x?")),
        ("count", enc(None, "Count: 1, 2, 3,")),
    ]
    plan = [  # name, gen length, block length (0: one block), rule, tau, k
        (0, 32, 0, "deterministic", None, 5), (1, 32, 0, "deterministic", None, 5),
        (2, 32, 0, "deterministic", None, 5), (3, 48, 16, "deterministic", None, 5),
        (4, 32, 0, "deterministic", None, 5), (5, 32, 8, "deterministic", None, 5),
        (6, 40, 0, "deterministic", None, 5), (7, 32, 0, "deterministic", None, 5),
        (8, 32, 0, "topk_relative", 0.5, 2), (9, 32, 0, "topk_relative", 0.1, 50),
        (2, 32, 16, "topk_relative", 0.0001, 272), (0, 32, 0, "topk_relative", 0.001, 272),
        (5, 48, 0, "topk_relative", 0.02, 100), (6, 40, 8, "topk_relative", 0.1, 272),
    ]
    # guided+threshold:T (not FlashDLM's: a rejected draft the diffusion model is at least T sure of is kept)
    keeps = [  # prompt, gen length, block length, rule, tau, k, keep
        (2, 32, 0, "deterministic", None, 5, 0.16), (5, 32, 0, "deterministic", None, 5, 0.12),
        (1, 32, 0, "deterministic", None, 5, 0.16), (3, 48, 16, "deterministic", None, 5, 0.1),
        (8, 32, 0, "topk_relative", 0.5, 2, 0.2),
    ]
    cases = []
    for i, gl, bl, rule, tau, k in plan:
        name, p = prompts[i]
        r = guided(dlm64, g64, p, gl, bl, rule, tau, k)
        r32 = guided(dlm32, g32, p, gl, bl, rule, tau, k)
        assert (r["answer_ids"], r["nfe"], r["guide_nfe"]) == (r32["answer_ids"], r32["nfe"], r32["guide_nfe"]), \
            f"{name}: float32 and float64 runs differ"
        if rule == "deterministic":
            assert r["answer_ids"] == greedy(g64, p, gl, eos), f"{name}: not the guide's greedy answer"
        cases.append({"name": f"{name}/{rule}" + (f"/{tau}/{k}" if tau else "") + (f"/block{bl}" if bl else ""),
                      "prompt_ids": p, "gen_length": gl, "block_length": bl, "rule": rule, "tau": tau, "top_k": k,
                      **r})
    for i, gl, bl, rule, tau, k, keep in keeps:
        name, p = prompts[i]
        r = guided(dlm64, g64, p, gl, bl, rule, tau, k, keep=keep)
        r32 = guided(dlm32, g32, p, gl, bl, rule, tau, k, keep=keep)
        assert (r["answer_ids"], r["nfe"], r["guide_nfe"]) == (r32["answer_ids"], r32["nfe"], r32["guide_nfe"]), \
            f"{name} keep {keep}: float32 and float64 runs differ"
        cases.append({"name": f"{name}/{rule}" + (f"/{tau}/{k}" if tau else "") + (f"/block{bl}" if bl else "") + f"/keep{keep}",
                      "prompt_ids": p, "gen_length": gl, "block_length": bl, "rule": rule, "tau": tau, "top_k": k,
                      "keep": keep, **r})
    kept = [(sum(st["kept"] for st in c["trace"]), c["decoded"]) for c in cases if c.get("keep")]
    assert any(0 < k < d for k, d in kept), f"no keep case kept some drafts but not all: {kept}; pick other thresholds"
    # oracle drafts: the guide's greedy answer, every 10th slot replaced by token 0
    name, p = prompts[1]
    want = greedy(g64, p, 80, eos)
    assert eos not in want[:79], "the guide stops early; pick another prompt for the oracle case"
    for every in (0, 10):
        oracle = [0 if every and (j + 1) % every == 0 else t for j, t in enumerate(want)]
        r = guided(dlm64, g64, p, 80, 0, oracle=oracle)
        r32 = guided(dlm32, g32, p, 80, 0, oracle=oracle)
        assert (r["answer_ids"], r["guide_nfe"]) == (r32["answer_ids"], r32["guide_nfe"]), "oracle: float32 differs"
        cases.append({"name": f"oracle/every{every}", "prompt_ids": p, "gen_length": 80, "block_length": 0,
                      "rule": "deterministic", "tau": None, "top_k": 5, "oracle_ids": oracle, **r})
    out = {"description": "Golden guided decodings (FlashDLM's guided diffusion) of an independent PyTorch implementation "
                          "(tools/golden/make_guided_golden.py) on the diffusion model tiny-llada-moe guided by tiny-llama, "
                          "float64 from the stored weights.",
           "generator": GENERATOR, "dlm": "tiny-llada-moe", "guide": "tiny-llama", "chunk": CHUNK, "cases": cases}
    G.write_json(os.path.join(TESTDATA, "guided_golden.json"), out, 1)
    for c in cases:
        steps = len(c["trace"])
        print(f'{c["name"]:32s} nfe {c["nfe"]:3d} guide {c["guide_nfe"]:3d} decoded {c["decoded"]:3d} '
              f'accept/step {c["decoded"] / steps:.2f}', {k: (float("%.3g" % v) if v is not None else None)
                                                          for k, v in c["min_margins"].items()})


if __name__ == "__main__":
    main()
