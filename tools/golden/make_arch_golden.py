#!/usr/bin/env python3
"""Writes the parity fixtures of the Go engine's other architectures into model/testdata/:

    /usr/bin/python3 tools/golden/make_arch_golden.py            # from the repo root

  tiny-dream/      Dream (Qwen2.5 layout): q/k/v biases, GQA 4/2, head dim 16 (hidden/heads),
                   RoPE theta 1e6 from config.json, shifted logits, mask id from config.json
  tiny-llada-moe/  LLaDA-MoE: per-head q/k RMSNorm, softmax top-2 of 8 experts (width 16), GQA 4/2, 2 layers
  tiny-llada2/     LLaDA 2.x (BailingMoeV2): fused q/k/v, per-head q/k RMSNorm, partial RoPE (half of each
                   head), GQA 4/2, an output bias, one dense first layer, then sigmoid routing with an expert
                   bias, group-limited top-2 (4 groups of 2, the best 2 groups), routed scaling 2.5, a shared
                   expert; block-causal attention in blocks of 32 (the default: config.json has no block size)
                   and no mask_token_id (the default 156895 does not fit this vocabulary, so it gives one)

The reference is tools/pyllada/decoder.py (written from the public modeling code, not from
this project's Go), run in float64 from the stored F32 weights. Each directory holds:
  config.json (the architecture's own Hugging Face names), model.safetensors (HF tensor names),
  tokenizer.json, tokenizer_config.json, dlmcache.json (a card: random weights);
  golden.safetensors (F32): logits [n, vocab], k.{l}, v.{l} [n, kv_dim] (keys after RoPE),
      h.{l} [n, d] (hidden state entering layer l; h.{L} the last layer's output), and the same
      logits/k/v under pos2. for a second input at non-contiguous positions;
  golden.json: the inputs and greedy generations with LLaDA's low-confidence sampler
      (tools/pyllada/generate.py, temperature 0) with their smallest decision margins; for the
      block-causal tiny-llada2, block decoding (generate_block_batch: threshold and schedule) with
      its per-step trace.

Tokenizers: byte-level BPE (ids 0..255 are the bytes) and the architecture's special tokens;
Dream's in Qwen2's tokenizer.json layout (a Split pre-tokenizer with Qwen2's regex before
ByteLevel, NFC) with a ChatML chat template and, in the 11 ids left after its special tokens,
the first 11 merges of Qwen2's released tokenizer.json (ranks 0..10, in its [a, b] form), so
that loading a model directory exercises merges; LLaDA-MoE's and LLaDA 2's without merges, with
LLaDA's chat tokens and no template (the project's LLaDA format). They stand in for the released
vocabularies (Qwen2's is checked by make hfcheck; LLaDA-MoE's and LLaDA 2's are not available).
golden.json's "chat" ids come from tools/golden/bpe_ref.py's independent encoder; the inputs of
the logits and generation goldens are byte ids (valid token ids, not the BPE's tokenization), so
that they do not depend on the tokenizer.
"""
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tools"))

import make_golden as G  # noqa: E402  (encoder, chat framing, tokenizer parts, checkpoint and golden writers)
from bpe_ref import Ref  # noqa: E402
from pyllada.decoder import Decoder, DecoderConfig  # noqa: E402

QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")

# The first 11 merges (ranks 0..10) of Qwen2's released tokenizer.json (also Qwen2.5's and Qwen3's).
QWEN2_FIRST_MERGES = [["Ġ", "Ġ"], ["ĠĠ", "ĠĠ"], ["i", "n"], ["Ġ", "t"], ["ĠĠĠĠ", "ĠĠĠĠ"], ["e", "r"],
                      ["ĠĠ", "Ġ"], ["o", "n"], ["Ġ", "a"], ["r", "e"], ["a", "t"]]

DREAM_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|mask|>", "<|beginoftext|>"]
LLADA_SPECIALS = ["<|startoftext|>", "<|endoftext|>", "<|mdm_mask|>",
                  "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]

GENERATOR = "tools/golden/make_arch_golden.py"

# Qwen2.5's ChatML framing; a conversation without a system message gets Qwen's default one.
CHATML = ("{% for message in messages %}"
          "{% if loop.first and message['role'] != 'system' %}"
          "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}"
          "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
          "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def tokenizer_files(specials, qwen):
    sid = {s: 256 + i for i, s in enumerate(specials)}
    bpe = G.byte_bpe()
    bpe["merges"] = QWEN2_FIRST_MERGES if qwen else []
    for a, b in bpe["merges"]:
        bpe["vocab"][a + b] = len(bpe["vocab"]) + len(specials)  # after the bytes and the special tokens
    if qwen:
        pre = {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN2_REGEX}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]}
        norm = {"type": "NFC"}
    else:
        pre = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
        norm = None
    tok = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": G.added_tokens(sid), "normalizer": norm,
           "pre_tokenizer": pre, "post_processor": None,
           "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
           "model": bpe}
    cfg = {"added_tokens_decoder": G.added_tokens_decoder(sid),
           "clean_up_tokenization_spaces": False, "model_max_length": 1024,
           "tokenizer_class": "PreTrainedTokenizerFast"}
    if qwen:
        cfg.update({"bos_token": None, "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>",
                    "mask_token": "<|mask|>", "chat_template": CHATML})
    else:
        cfg.update({"bos_token": "<|startoftext|>", "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>"})
    return tok, cfg, sid


def chatml(system, user):
    s = "<|im_start|>system\n" + (system if system is not None else "You are a helpful assistant.") + "<|im_end|>\n"
    return s + "<|im_start|>user\n" + user + "<|im_end|>\n<|im_start|>assistant\n"


def init_weights(m, seed):
    c = m.config
    rn = G.normal(seed)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1 + 0.1 * rn(*p.shape))
            elif name.endswith(".bias"):
                p.copy_(rn(*p.shape, std=0.3))
            elif name == "embed_tokens.weight":
                p.copy_(rn(*p.shape))
            elif name == "lm_head.weight":
                head = rn(*p.shape, std=2.5 / np.sqrt(c.hidden_size))
                head[c.mask_token_id] *= 0.1  # the mask token: rarely predicted
                p.copy_(head)
            elif name.endswith("expert_bias"):
                p.copy_(rn(*p.shape, std=0.05))  # moves the choice where scores are close
            elif name.endswith("mlp.gate.weight"):
                p.copy_(rn(*p.shape, std=2.0 / np.sqrt(p.shape[1])))  # a decisive router
            else:
                o, i = p.shape
                p.copy_(rn(o, i, std=1.0 / np.sqrt(i)))
        for layer in m.layers:  # sharper attention so that positions matter
            a = getattr(layer, layer.attn_name)
            if c.llada2:
                a.query_key_value.weight[:c.hidden_size + c.kv_dim].mul_(1.5)
            else:
                a.q_proj.weight.mul_(1.5)
                a.k_proj.weight.mul_(1.5)


def router_margin(model, ids):
    """The smallest gap between the k-th and (k+1)-th router score (softmax probability, or
    LLaDA 2's biased sigmoid score) over every row and MoE layer: a routing decision a float32
    engine could flip if it were tiny (group choice not counted)."""
    c = model.config
    if not c.moe:
        return None
    gaps = []

    def hook(mod, inp, out):
        x = inp[0]
        if c.llada2:
            lg = F.linear(x.reshape(-1, x.shape[-1]), mod.gate.weight).to(torch.float64)
            p = torch.sigmoid(lg) + mod.gate.expert_bias.to(torch.float64)
        else:
            p = torch.softmax(mod.gate(x).to(torch.float64), -1)
        s = torch.sort(p, -1, descending=True).values
        gaps.append(float((s[..., c.num_experts_per_tok - 1] - s[..., c.num_experts_per_tok]).min()))
    hs = [layer.mlp.register_forward_hook(hook) for layer in model.layers if not hasattr(layer.mlp, "gate_proj")]
    with torch.no_grad():
        model(torch.tensor([ids]))
    for h in hs:
        h.remove()
    return min(gaps)


def block_case(m64, m32, name, prompt, gen_length, decoding, threshold=None, steps=None):
    out, trace = G.block_generate(m64, m32, name, prompt, gen_length, decoding, threshold, steps)
    return {"name": name, "prompt_ids": prompt, "gen_length": gen_length, "block_length": m64.config.block_size,
            "decoding": decoding, "threshold": threshold, "steps": steps, "answer_ids": out,
            "trace": trace, "nfe": len(trace)}


def build(out_dir, c, seed, specials, qwen, chat, card):
    m = Decoder(c).to(torch.float64)
    init_weights(m, seed)
    tok, tcfg, sid = tokenizer_files(specials, qwen)
    m64, m32 = G.save_checkpoint(m, out_dir, "F32", seed, GENERATOR,
                                 {"tokenizer.json": (tok, 1), "tokenizer_config.json": (tcfg, 1), "dlmcache.json": (card, 1)})
    M = c.mask_token_id

    def encode(text):
        return G.encode(text, sid)
    ids = encode(chat(None, "Name: Ada. Hi!"))[:32] + [M] * 16
    pos = list(range(len(ids)))
    ids2 = encode(chat("k=v", "x?"))[:16] + [M] * 8 + encode("abc 12 ##") + [M] * 15
    pos2 = list(range(16)) + list(range(100, 132))
    assert len(ids2) == 48
    with torch.no_grad():
        lg, tensors = G.reference_tensors(m64, ids, pos)
        lg32 = m32(torch.tensor([ids]), torch.tensor(pos))
        tensors.update(G.reference_tensors(m64, ids2, pos2, prefix="pos2.", hidden=False)[1])
    rel32 = G.rel_error32(lg32, lg)
    G.save_golden_tensors(out_dir, tensors, GENERATOR)
    if c.block_causal:
        gens, bgens = [], [
            block_case(m64, m32, "threshold", encode(chat("You are terse.", "Say hi.")), 24, "threshold", 0.12),
            block_case(m64, m32, "schedule", encode(chat(None, "2+2?")), 24, "schedule", steps=12)]
    else:
        bgens = []
        gens = [G.gen_case(m64, m32, "two_blocks", encode(chat("You are terse.", "Say hi.")), 16, 8, 8, M, count_bad=False),
                G.gen_case(m64, m32, "one_block", encode(chat(None, "2+2?")), 12, 6, 12, M, count_bad=False)]
    gj = {"description": "Golden outputs of the independent PyTorch reference (tools/pyllada/decoder.py, "
                         f"{c.arch}) for this random-weights checkpoint, computed in float64 from the stored weights.",
          "generator": GENERATOR, "seed": seed, "architecture": c.arch,
          "input_ids": ids, "position_ids": pos, "pos2": {"input_ids": ids2, "position_ids": pos2},
          "float32_torch_logits_rel_error": rel32, "min_router_gap": router_margin(m64, ids),
          "generate": gens, "block_generate": bgens,
          "chat": [{"system": s, "user": u, "ids": Ref(os.path.join(out_dir, "tokenizer.json")).encode(chat(s, u))}
                   for s, u in (("You are terse.", "Say hi."), ("You are a tutor. Answer in one line.",
                                                                 "What is in the attic at night?"))],
          "sampler_notes": "LLaDA low-confidence remasking, temperature 0 (tools/pyllada/generate.py); with shifted "
                           "logits (Dream) the model's logits at position i are row i-1's."}
    G.write_json(os.path.join(out_dir, "golden.json"), gj, 1)
    print(out_dir, "f32 rel err %.2e" % rel32, "router gap", gj["min_router_gap"],
          [(g["name"], round(g["min_argmax_logit_gap"], 4), round(g["min_confidence_gap"], 5)) for g in gens],
          [(g["name"], g["nfe"]) for g in bgens])


CARD = {"gen_length": 16, "steps": 8, "block_length": 8, "demo_system": "You are terse.",
        "demo_prompt": "Say hi.", "random_weights": True}


def main():
    base = os.path.join(ROOT, "model", "testdata")
    dsid = {s: 256 + i for i, s in enumerate(DREAM_SPECIALS)}
    dream = DecoderConfig(arch="dream", hidden_size=64, num_hidden_layers=3, num_attention_heads=4,
                          num_key_value_heads=2, intermediate_size=96, vocab_size=272, rope_theta=1e6,
                          rms_norm_eps=1e-6, mask_token_id=dsid["<|mask|>"], eos_token_id=dsid["<|endoftext|>"],
                          pad_token_id=dsid["<|endoftext|>"], bos_token_id=dsid["<|beginoftext|>"])
    build(os.path.join(base, "tiny-dream"), dream, 1357, DREAM_SPECIALS, True, chatml, CARD)
    lsid = {s: 256 + i for i, s in enumerate(LLADA_SPECIALS)}
    moe = DecoderConfig(arch="llada-moe", hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                        num_key_value_heads=2, intermediate_size=128, vocab_size=272, rope_theta=50000.0,
                        rms_norm_eps=1e-5, mask_token_id=lsid["<|mdm_mask|>"], eos_token_id=lsid["<|endoftext|>"],
                        pad_token_id=lsid["<|endoftext|>"], bos_token_id=lsid["<|startoftext|>"],
                        num_experts=8, num_experts_per_tok=2, expert_intermediate_size=16,
                        norm_topk_prob=False, qk_layernorm=True)
    build(os.path.join(base, "tiny-llada-moe"), moe, 2468, LLADA_SPECIALS, False, G.chat, CARD)
    llada2 = DecoderConfig(arch="llada2", hidden_size=64, num_hidden_layers=3, num_attention_heads=4,
                           num_key_value_heads=2, intermediate_size=96, vocab_size=272, rope_theta=600000.0,
                           rms_norm_eps=1e-6, mask_token_id=lsid["<|mdm_mask|>"], eos_token_id=lsid["<|endoftext|>"],
                           pad_token_id=lsid["<|endoftext|>"], bos_token_id=lsid["<|startoftext|>"],
                           num_experts=8, num_experts_per_tok=2, expert_intermediate_size=16,
                           num_shared_experts=1, first_k_dense_replace=1, n_group=4, topk_group=2,
                           routed_scaling_factor=2.5, partial_rotary_factor=0.5, use_bias=True, block_size=32,
                           extra={"mask_token_id": lsid["<|mdm_mask|>"]})
    card2 = {"gen_length": 32, "steps": 32, "demo_system": "You are terse.", "demo_prompt": "Say hi.", "random_weights": True}
    build(os.path.join(base, "tiny-llada2"), llada2, 3579, LLADA_SPECIALS, False, G.chat, card2)


if __name__ == "__main__":
    main()
