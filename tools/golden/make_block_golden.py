#!/usr/bin/env python3
"""Writes the golden fixture of the Go engine's block-causal (block diffusion) forward into
model/testdata/tiny-block/.

    /usr/bin/python3 tools/golden/make_block_golden.py            # from the repo root

The reference is tools/pyllada (written from the public LLaDA modeling code and REFERENCE.md,
not from this project's Go) with block_causal: attention is bidirectional inside a block and
causal between blocks, blocks absolute from position 0 (LLaDA 2.x / SDAR): the query at
position i attends the key at position j iff j // block_size <= i // block_size.

Random weights (seed 2468, F32 as stored), make_golden.py's tiny shape and tokenizer, and
config.json with "block_causal": true, "block_size": 8, "shift_logits": false. Files:
  config.json, model.safetensors, tokenizer.json, tokenizer_config.json (as tiny-f32),
  golden.safetensors (F32, computed in float64 from the stored weights):
      logits [n, embedding_size]   input_ids at positions 0..n-1 (n = 45: a 21-token prompt,
                                   answer tokens and masks; five full blocks of 8 and a partial one)
      k.{l}, v.{l} [n, kv_dim]     layer l keys (after RoPE) and values
      h.{l} [n, d_model]           hidden state entering layer l (h.{L}: last layer output, before ln_f)
      cut24.logits [24, E]         input_ids[:24] alone (three full blocks): equals logits[:24]
      cut29.logits [29, E]         input_ids[:29] alone (a partial last block): rows <24 equal logits[:24],
                                   rows 24..28 differ from logits[24:29] (block 3 is bidirectional)
      bidir.logits [n, E]          the same weights and input with block_causal off (the mask matters)
  golden.json: ids, positions, the block layout and the block decoding cases (threshold and the
  low-confidence fixed schedule) with per-step traces and decision margins.
"""
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_golden as G  # noqa: E402  (its tokenizer, chat framing, config shape, weight init)

from pyllada.model import LLaDA  # noqa: E402

BS = 8
SEED = 2468


def block_config():
    c = G.make_config()
    c.block_causal, c.block_size, c.shift_logits = True, BS, False
    return c


def step_margins(model, x, lo, hi, mask_id, threshold, k):
    """At one decoding step on canvas x (the sequence up to the current block's end hi): the smallest
    argmax logit gap over the block's masked slots, the smallest |confidence − threshold| (threshold
    decoding) and the gap between the k-th and (k+1)-th confidence (schedule)."""
    with torch.no_grad():
        lg = model(x[None, :hi])[0, lo:hi].to(torch.float64)
    m = x[lo:hi] == mask_id
    lg = lg[m]
    top2 = torch.topk(lg, 2, dim=-1).values
    p = torch.softmax(lg, dim=-1).max(-1).values
    ps = torch.sort(p, descending=True).values
    return (float((top2[:, 0] - top2[:, 1]).min()),
            float((p - threshold).abs().min()) if threshold is not None else float("inf"),
            float(ps[k - 1] - ps[k]) if len(ps) > k else float("inf"))


def gen_case(m64, m32, name, prompt_text, gen_length, decoding, threshold=None, steps=None):
    prompt = G.encode(prompt_text)
    out, trace = G.block_generate(m64, m32, name, prompt, gen_length, decoding, threshold, steps)
    P = len(prompt)
    x = torch.tensor(prompt + [G.MASK] * gen_length)
    min_lg = min_th = min_cg = float("inf")
    for t in trace:
        lo, hi = max(P, t["block"] * BS), t["n"]
        lg, th, cg = step_margins(m64, x, lo, hi, G.MASK, threshold, len(t["committed"]))
        min_lg, min_th, min_cg = min(min_lg, lg), min(min_th, th), min(min_cg, cg)
        for q in t["committed"]:
            x[q] = out[q - P]
    return {
        "name": name, "prompt_text": prompt_text, "prompt_ids": prompt, "gen_length": gen_length,
        "block_length": BS, "decoding": decoding, "threshold": threshold, "steps": steps,
        "temperature": 0.0, "mask_id": G.MASK, "eos_id": G.EOS,
        "output_ids": prompt + out, "answer_ids": out,
        "trace": trace, "nfe": len(trace),
        "min_argmax_logit_gap": min_lg, "min_threshold_gap": min_th if decoding == "threshold" else None,
        "min_confidence_gap": min_cg if decoding == "schedule" else None,
    }


def main():
    out_dir = os.path.join(G.ROOT, "model", "testdata", "tiny-block")
    c = block_config()
    m = LLaDA(c).to(torch.float64)
    G.init_weights(m, SEED)
    m64, m32 = G.save_checkpoint(m, out_dir, "F32", SEED, "tools/golden/make_block_golden.py")

    # a 21-token prompt (not a multiple of 8), three committed answer tokens, then masks and
    # two more committed tokens: 45 positions = blocks 0..4 full, block 5 partial (40..44)
    prompt = G.encode(G.chat(None, "Hi Ada"))[:21]
    assert len(prompt) == 21
    ids = prompt + G.encode("## ") + [G.MASK] * 10 + G.encode("ok") + [G.MASK] * 9
    n = len(ids)
    assert n == 45, n
    pos = list(range(n))
    with torch.no_grad():
        lg, tensors = G.reference_tensors(m64, ids, pos)
        lg32 = m32(torch.tensor([ids]), torch.tensor(pos))
        tensors["cut24.logits"] = m64(torch.tensor([ids[:24]]))[0]
        tensors["cut29.logits"] = m64(torch.tensor([ids[:29]]))[0]
        m64.config.block_causal = False
        tensors["bidir.logits"] = m64(torch.tensor([ids]))[0]
        m64.config.block_causal = True
    assert float((tensors["cut24.logits"] - lg[0, :24]).abs().max()) < 1e-12
    assert float((tensors["cut29.logits"][:24] - lg[0, :24]).abs().max()) < 1e-12
    assert float((tensors["cut29.logits"][24:] - lg[0, 24:29]).abs().max()) > 1e-3
    assert float((tensors["bidir.logits"] - lg[0]).abs().max()) > 1e-1
    rel32 = G.rel_error32(lg32, lg)
    G.save_golden_tensors(out_dir, tensors, "tools/golden/make_block_golden.py")

    gens = [
        gen_case(m64, m32, "threshold", G.chat("You are terse.", "Say hi."), 24, "threshold", threshold=0.12),
        gen_case(m64, m32, "schedule", G.chat(None, "2+2?"), 24, "schedule", steps=12),
    ]
    gj = {
        "description": "Golden outputs of the independent PyTorch LLaDA reference (tools/pyllada) with "
                       "block-causal attention, for this random-weights checkpoint. Reference computed in "
                       "float64 from the stored weights.",
        "generator": "tools/golden/make_block_golden.py",
        "seed": SEED,
        "weights_dtype": "F32",
        "config": {**G.config_json(c), "block_causal": True, "block_size": BS, "shift_logits": False},
        "attention": "block-causal: query at position i attends key at position j iff j // block_size <= "
                     "i // block_size (blocks absolute, aligned at position 0; the prompt's tail shares the "
                     "first answer block)",
        "input_ids": ids,
        "position_ids": pos,
        "prompt_length": len(prompt),
        "tensors": {
            **G.TENSOR_NOTES,
            "cut24.logits": "[24, embedding_size] logits of input_ids[:24] alone (equal to logits[:24])",
            "cut29.logits": "[29, embedding_size] logits of input_ids[:29] alone (rows 24..28: a partial block)",
            "bidir.logits": "[n, embedding_size] the same input with block_causal off",
        },
        "float32_torch_logits_rel_error": rel32,
        "generate": gens,
        "sampler_notes": "Block decoding (pyllada generate_block_batch), temperature 0. Canvas prompt ⊕ MASK×gen_length; "
                         "blocks absolute (the first answer block also holds the prompt's tail, never masked; the "
                         "canvas end may cut the last block short), filled left to right; each step feeds the "
                         "sequence up to the current block's end only (trace[].n) and computes x0 = argmax over all "
                         "embedding_size logits, confidence = softmax(logits)[x0] in fp64, over the block's masked "
                         "slots. threshold: commit every masked slot of the block with confidence >= threshold, at "
                         "least the most confident one (LLaDA 2.x). schedule: steps·block_length/gen_length steps "
                         "per block; step i commits num_transfer_tokens(masked in block, steps per block)[i] "
                         "top-confidence slots, steps committing nothing skipped. A row stops after the block that "
                         "completes an EOS run to the canvas end (the rest filled with EOS). trace[].committed: the "
                         "canvas indices committed at each step; trace[].block: the absolute block index.",
    }
    G.write_json(os.path.join(out_dir, "golden.json"), gj, 1)
    print(out_dir, "logits std %.3f" % float(lg[0].std()), "f32 rel err %.2e" % rel32,
          [(g["name"], g["nfe"], g["min_argmax_logit_gap"], g["min_threshold_gap"], g["min_confidence_gap"])
           for g in gens])


if __name__ == "__main__":
    main()
