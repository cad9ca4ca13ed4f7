#!/usr/bin/env python3
"""Writes the golden fixtures of the Go engine's numerical check into model/testdata/.

    /usr/bin/python3 tools/golden/make_golden.py            # from the repo root

For each of tiny-f32/ and tiny-bf16/ (random weights, fixed seeds):
  config.json, model.safetensors (LLaDA HF names; F32 resp. BF16),
  tokenizer.json (byte-level BPE: the 256 GPT-2 byte symbols at ids 0..255 = the byte
  values, no merges, specials at 256..261), tokenizer_config.json,
  golden.safetensors (F32):
      logits [n, embedding_size]   fixed input (input_ids, positions 0..n-1)
      k.{l}, v.{l} [n, kv_dim]     layer l keys (after RoPE) and values
      h.{l} [n, d_model]           hidden state entering layer l (h.{L} = last layer output, before ln_f)
      pos2.logits, pos2.k.{l}, pos2.v.{l}   same for pos2 input (non-contiguous positions)
  golden.json: ids, positions, greedy generation cases (with per-step trace and
  the smallest decision margins), tokenizer cases.

The reference is computed in float64 from the stored weights (BF16 weights are
upcast exactly), so the Go float32 forward should match to ~1e-6 relative.
"""
import json
import os
import sys

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))

from pyllada import safetensors_io as st  # noqa: E402
from pyllada.model import LLaDA, LLaDAConfig, save_pretrained  # noqa: E402
from pyllada.generate import generate, generate_block_batch  # noqa: E402
from bpe_ref import bytes_to_unicode  # noqa: E402  (GPT-2's byte -> printable unicode symbol map)

SPECIALS = ["<|startoftext|>", "<|endoftext|>", "<|mdm_mask|>",
            "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
SPECIAL_ID = {s: 256 + i for i, s in enumerate(SPECIALS)}
BOS, EOS, MASK = SPECIAL_ID["<|startoftext|>"], SPECIAL_ID["<|endoftext|>"], SPECIAL_ID["<|mdm_mask|>"]


def added_tokens(sid):
    """tokenizer.json's added_tokens for the specials sid (content -> id)."""
    return [{"id": i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": True} for s, i in sid.items()]


def added_tokens_decoder(sid):
    """tokenizer_config.json's added_tokens_decoder for the specials sid."""
    return {str(i): {"content": s, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False,
                     "special": True} for s, i in sid.items()}


def byte_bpe():
    """tokenizer.json's model: byte-level BPE without merges, ids 0..255 the bytes (GPT-2's
    printable symbols)."""
    b2u = bytes_to_unicode()
    return {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
            "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
            "ignore_merges": False, "vocab": {b2u[b]: b for b in range(256)}, "merges": []}


def tokenizer_json():
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added_tokens(SPECIAL_ID),
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": byte_bpe(),
    }


def tokenizer_config_json():
    return {
        "bos_token": "<|startoftext|>",
        "eos_token": "<|endoftext|>",
        "pad_token": "<|endoftext|>",
        "added_tokens_decoder": added_tokens_decoder(SPECIAL_ID),
        "clean_up_tokenization_spaces": False,
        "model_max_length": 4096,
        "tokenizer_class": "PreTrainedTokenizerFast",
    }


def encode(text, sid=SPECIAL_ID):
    """Reference encoder for these tokenizers (specials sid: content -> id): specials split out,
    everything else = UTF-8 bytes (no merges, so no pre-tokenizer's split changes the ids)."""
    ids, i = [], 0
    while i < len(text):
        for s, t in sid.items():
            if text.startswith(s, i):
                ids.append(t)
                i += len(s)
                break
        else:
            j = i
            while j < len(text) and not any(text.startswith(s, j) for s in sid):
                j += 1
            ids.extend(text[i:j].encode("utf-8"))
            i = j
    return ids


def chat(system, user):
    s = "<|startoftext|>"
    if system is not None:
        s += "<|start_header_id|>system<|end_header_id|>\n\n" + system + "<|eot_id|>"
    return s + "<|start_header_id|>user<|end_header_id|>\n\n" + user + \
        "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"


def make_config():
    return LLaDAConfig(d_model=64, n_layers=3, n_heads=4, n_kv_heads=4, mlp_hidden_size=96,
                       vocab_size=300, embedding_size=320, rope_theta=10000.0, rms_norm_eps=1e-5,
                       mask_token_id=MASK, eos_token_id=EOS, pad_token_id=EOS, max_sequence_length=1024,
                       extra={"bos_token_id": BOS})


def normal(seed):
    """rn(*shape, std=1.0): float64 normal samples of one generator seeded with seed."""
    g = torch.Generator().manual_seed(seed)

    def rn(*shape, std=1.0):
        return torch.randn(*shape, generator=g, dtype=torch.float64) * std
    return rn


def init_weights(m, seed):
    c = m.config
    rn = normal(seed)
    with torch.no_grad():
        m.wte.weight.copy_(rn(c.rows, c.d_model))
        for b in m.blocks:
            for lin in (b.q_proj, b.k_proj, b.v_proj, b.attn_out, b.ff_proj, b.up_proj, b.ff_out):
                o, i = lin.weight.shape
                lin.weight.copy_(rn(o, i, std=1.0 / np.sqrt(i)))
            # sharper attention so that positions matter
            b.q_proj.weight.mul_(1.5)
            b.k_proj.weight.mul_(1.5)
            b.attn_norm.weight.copy_(1 + 0.1 * rn(c.d_model))
            b.ff_norm.weight.copy_(1 + 0.1 * rn(c.d_model))
        m.ln_f.weight.copy_(1 + 0.1 * rn(c.d_model))
        head = rn(c.rows, c.d_model, std=2.5 / np.sqrt(c.d_model))
        head[c.vocab_size:] *= 0.1      # padding rows: rarely the argmax
        head[c.mask_token_id] *= 0.1    # the mask token: rarely predicted
        m.ff_out.weight.copy_(head)


def margins_of(model, x, mask_id, hi, k):
    """Smallest argmax logit gap over masked positions <hi, and the gap between the
    k-th and (k+1)-th confidence (inf if fewer candidates)."""
    logits = model(x)[0].to(torch.float64)
    masked = (x[0] == mask_id).nonzero().flatten()
    masked = masked[masked < hi]
    top2 = torch.topk(logits[masked], 2, dim=-1).values
    lg = float((top2[:, 0] - top2[:, 1]).min())
    p = torch.softmax(logits[masked], dim=-1).max(-1).values
    ps = torch.sort(p, descending=True).values
    cg = float(ps[k - 1] - ps[k]) if len(ps) > k else float("inf")
    am = torch.argmax(logits[masked], -1)
    bad = int(((am >= model.config.vocab_size) | (am == mask_id)).sum())
    return lg, cg, bad


def gen_case(model64, model32, name, prompt, gen_length, steps, block_length, mask_id=MASK, prompt_text=None,
             count_bad=True):
    """One greedy generation of prompt (ids) by the float64 reference (the float32 model must
    agree), its per-step trace and the smallest decision margins along it; prompt_text is
    recorded when given, and with count_bad the argmaxes that fell on padding rows or the mask."""
    prompt = torch.tensor(prompt)
    trace = []
    out = generate(model64, prompt, gen_length, steps, block_length, trace=trace)
    out32 = generate(model32, prompt, gen_length, steps, block_length)
    assert torch.equal(out, out32), f"{name}: float32 and float64 generations differ"
    # decision margins along the trajectory
    P = len(prompt)
    min_lg, min_cg, bad = float("inf"), float("inf"), 0
    x = torch.full((1, P + gen_length), mask_id)
    x[0, :P] = prompt
    with torch.no_grad():
        for t in trace:
            hi = P + (t["block"] + 1) * block_length
            lg, cg, bd = margins_of(model64, x, mask_id, hi, len(t["committed"]))
            min_lg, min_cg, bad = min(min_lg, lg), min(min_cg, cg), bad + bd
            x = torch.tensor(t["canvas"])[None]
    case = {"name": name}
    if prompt_text is not None:
        case["prompt_text"] = prompt_text
    case.update({
        "prompt_ids": prompt.tolist(),
        "gen_length": gen_length, "steps": steps, "block_length": block_length,
        "temperature": 0.0, "remasking": "low_confidence", "mask_id": mask_id,
        "output_ids": out[0].tolist(), "answer_ids": out[0, P:].tolist(),
        "trace": [{"block": t["block"], "step": t["step"], "committed": t["committed"]} for t in trace],
        "min_argmax_logit_gap": min_lg, "min_confidence_gap": min_cg,
    })
    if count_bad:
        case["argmax_in_padding_or_mask"] = bad
    return case


def block_generate(m64, m32, name, prompt, gen_length, decoding, threshold=None, steps=None):
    """Block decoding (generate_block_batch) of prompt by threshold or schedule, in float64 with its
    trace and in float32, which must agree -> (answer ids, trace)."""
    kw = {"threshold": threshold} if decoding == "threshold" else {"steps": steps}
    trace = []
    out = generate_block_batch(m64, [prompt], gen_length, decoding=decoding, trace=trace, **kw)[0]
    out32 = generate_block_batch(m32, [prompt], gen_length, decoding=decoding, **kw)[0]
    assert out == out32, f"{name}: float32 and float64 generations differ"
    return out, trace


# What the tensors of a golden.safetensors hold (golden.json's "tensors"), before each file's own.
TENSOR_NOTES = {
    "logits": "[n, embedding_size] logits of input_ids at position_ids",
    "k.{l}": "[n, n_kv_heads*head_dim] keys of layer l after RoPE, head h in columns h*hd..(h+1)*hd-1",
    "v.{l}": "[n, n_kv_heads*head_dim] values of layer l",
    "h.{l}": "[n, d_model] hidden state entering layer l; h.{n_layers} is the last layer's output before ln_f",
}


def write_json(path, obj, indent):
    with open(path, "w") as f:
        json.dump(obj, f, indent=indent, ensure_ascii=False)
        f.write("\n")


def save_checkpoint(m, out_dir, dtype, seed, generator, files=None):
    """Rounds the float64 model m's weights to dtype (F32 or BF16), writes config.json,
    model.safetensors and the other files (name -> (object, JSON indent); LLaDA's tokenizer
    files when None) into out_dir, and returns the float64 and float32 models (m's class)
    loaded back from disk: the reference uses exactly what is stored."""
    os.makedirs(out_dir, exist_ok=True)
    with torch.no_grad():
        for p in m.parameters():
            p.copy_((st.round_bf16(p) if dtype == "BF16" else p.to(torch.float32)).to(torch.float64))
    m.eval()
    save_pretrained(m, out_dir, dtype=dtype, metadata={"generator": generator, "seed": seed})
    sd = st.load_file(os.path.join(out_dir, "model.safetensors"))
    m64, m32 = type(m)(m.config), type(m)(m.config)
    m64.load_hf_state_dict(sd, out_dir)
    m32.load_hf_state_dict(sd, out_dir)
    if files is None:
        files = {"tokenizer.json": (tokenizer_json(), 1), "tokenizer_config.json": (tokenizer_config_json(), 2)}
    for name, (obj, indent) in files.items():
        write_json(os.path.join(out_dir, name), obj, indent)
    return m64.to(torch.float64).eval(), m32.eval()


def reference_tensors(m64, ids, pos, prefix="", hidden=True):
    """The float64 reference's logits of ids at positions pos, and golden.safetensors' tensors
    of them under prefix: logits, each layer's keys and values, and (hidden) the hidden
    states entering each layer."""
    lg, s = m64(torch.tensor([ids]), torch.tensor(pos), return_states=True)
    tensors = {prefix + "logits": lg[0]}
    for l in range(len(s["k"])):
        tensors[f"{prefix}k.{l}"] = s["k"][l][0]
        tensors[f"{prefix}v.{l}"] = s["v"][l][0]
    if hidden:
        for l in range(len(s["h"])):
            tensors[f"{prefix}h.{l}"] = s["h"][l][0]
    return lg, tensors


def save_golden_tensors(out_dir, tensors, generator):
    st.save_file({k: v.to(torch.float32) for k, v in tensors.items()},
                 os.path.join(out_dir, "golden.safetensors"), dtype="F32", metadata={"generator": generator})


def rel_error32(lg32, lg):
    """The float32 model's largest logit error relative to the reference's largest logit."""
    return float((lg32[0].double() - lg[0]).abs().max() / lg[0].abs().max())


def config_json(c):
    """golden.json's config: the shape and the special ids."""
    return {"n_layers": c.n_layers, "d_model": c.d_model, "n_heads": c.n_heads, "n_kv_heads": c.n_kv_heads,
            "head_dim": c.head_dim, "vocab_size": c.vocab_size, "embedding_size": c.embedding_size,
            "mask_token_id": MASK, "eos_token_id": EOS, "bos_token_id": BOS}


def build(out_dir, dtype, seed):
    c = make_config()
    m = LLaDA(c).to(torch.float64)
    init_weights(m, seed)
    m64, m32 = save_checkpoint(m, out_dir, dtype, seed, "tools/golden/make_golden.py")

    # case 1: chat prefix + masks, contiguous positions
    text = chat(None, "Name: Ada. Hi!")
    ids = encode(text)
    ids = ids[:32] + [MASK] * 16
    n = len(ids)
    pos = list(range(n))
    # case 2: non-contiguous positions 0..15, 100..131
    ids2 = encode(chat("k=v", "x?"))[:16] + [MASK] * 8 + encode("abc 12 ##") + [MASK] * (32 - 8 - 9)
    pos2 = list(range(16)) + list(range(100, 132))
    assert len(ids2) == 48 and len(pos2) == 48
    with torch.no_grad():
        lg, tensors = reference_tensors(m64, ids, pos)
        lg32 = m32(torch.tensor([ids]), torch.tensor(pos))
        tensors.update(reference_tensors(m64, ids2, pos2, prefix="pos2.", hidden=False)[1])
    rel32 = rel_error32(lg32, lg)
    save_golden_tensors(out_dir, tensors, "tools/golden/make_golden.py")

    gens = [gen_case(m64, m32, name, encode(text), n, steps, block, prompt_text=text)
            for name, text, n, steps, block in (("two_blocks", chat("You are terse.", "Say hi."), 16, 8, 8),
                                                ("one_block", chat(None, "2+2?"), 12, 6, 12))]
    tok_cases = []
    for t in [chat("System text.", "Héllo wörld ✓"), "  two  spaces\tand tab\n", "<|mdm_mask|><|mdm_mask|>x<|endoftext|>"]:
        tok_cases.append({"text": t, "ids": encode(t), "decoded": t})
    gj = {
        "description": "Golden outputs of the independent PyTorch LLaDA reference (tools/pyllada) "
                       "for this random-weights checkpoint. Reference computed in float64 from the stored weights.",
        "generator": "tools/golden/make_golden.py",
        "seed": seed,
        "weights_dtype": dtype,
        "config": config_json(c),
        "input_ids": ids,
        "position_ids": pos,
        "pos2": {"input_ids": ids2, "position_ids": pos2},
        "tensors": {
            **TENSOR_NOTES,
            "pos2.logits": "[n, embedding_size] logits of pos2.input_ids at pos2.position_ids",
            "pos2.k.{l}": "keys of layer l for pos2", "pos2.v.{l}": "values of layer l for pos2",
        },
        "float32_torch_logits_rel_error": rel32,
        "generate": gens,
        "sampler_notes": "LLaDA low-confidence remasking, temperature 0: x0 = argmax over all embedding_size logits; "
                         "confidence = softmax(logits)[x0] (fp64); per block, masked M at block start, steps s: step i "
                         "commits M//s (+1 for i < M%s) top-confidence masked positions of the current block. "
                         "trace[].committed lists the canvas indices committed at each step.",
        "tokenizer": tok_cases,
    }
    write_json(os.path.join(out_dir, "golden.json"), gj, 1)
    print(out_dir, "logits std %.3f" % float(lg[0].std()), "f32 rel err %.2e" % rel32,
          [(g["name"], g["min_argmax_logit_gap"], g["min_confidence_gap"], g["argmax_in_padding_or_mask"]) for g in gens])


def main():
    base = os.path.join(ROOT, "model", "testdata")
    build(os.path.join(base, "tiny-f32"), "F32", 1234)
    build(os.path.join(base, "tiny-bf16"), "BF16", 4321)


if __name__ == "__main__":
    main()
