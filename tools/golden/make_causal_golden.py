#!/usr/bin/env python3
"""Writes the parity fixtures of the Go engine's causal (autoregressive) LMs into model/testdata/:

    /usr/bin/python3 tools/golden/make_causal_golden.py          # from the repo root

  tiny-qwen2/  Qwen2ForCausalLM: q/k/v biases (o none), GQA 4/2, head dim 16, tied embeddings
               (tie_word_embeddings: no lm_head tensor), RoPE theta 1e6, RMSNorm eps 1e-6, 2 layers;
               the Qwen2 tokenizer layout with a ChatML template (tools/golden/make_arch_golden.py's)
  tiny-llama/  LlamaForCausalLM in the layout of the project's trained guide (tools/pyllada/hf_llama.py:
               the same config.json keys, head_dim and the tokenizer ids beyond Llama's included): no
               biases, an untied lm_head, GQA 4/2, RoPE theta 10000, eps 1e-5, 2 layers; LLaDA's tokenizer

The reference below is written from Hugging Face transformers' public modeling code of Qwen2 and
Llama (modeling_qwen2.py / modeling_llama.py: Qwen2RMSNorm, Qwen2RotaryEmbedding, rotate_half,
apply_rotary_pos_emb, repeat_kv, eager attention with the causal mask, Qwen2MLP, the decoder layer
and the causal-LM head), not from this project's Go; it runs in float64 from the stored F32 weights.
Each directory holds config.json, model.safetensors (HF tensor names), tokenizer.json,
tokenizer_config.json, dlmcache.json (a card: random weights) and
  golden.safetensors (F32): logits [n, vocab] (row i: the prediction of token i+1), k.{l}, v.{l}
      [n, kv_dim] (keys after RoPE), h.{l} [n, d] (the hidden state entering layer l; h.{L} the last
      layer's output), and logits/k/v under pos2. for a second input at ascending, non-contiguous
      position ids;
  golden.json: the inputs and greedy autoregressive generations (each token the argmax of the last
      row's logits, recomputed from scratch every token; stop after EOS, the rest filled with EOS)
      with their smallest argmax margins; "steps" is the number of forwards (one per decoded token).
"""
import json
import math
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tools"))

import make_golden as G  # noqa: E402  (byte-level tokenizer parts, reference encoder, JSON writer)
import make_arch_golden as A  # noqa: E402  (the Qwen2-layout tokenizer files, ChatML framing)
from pyllada import safetensors_io as st  # noqa: E402  (safetensors reader/writer only)

GENERATOR = "tools/golden/make_causal_golden.py"


# ---------------------------------------------------------------- the reference (HF Qwen2 / Llama)

def rms_norm(x, w, eps):
    # Qwen2RMSNorm / LlamaRMSNorm: x * rsqrt(mean(x^2) + eps), then the weight
    var = x.pow(2).mean(-1, keepdim=True)
    return w * (x * torch.rsqrt(var + eps))


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def rope_cos_sin(pos, head_dim, theta):
    # Qwen2RotaryEmbedding (default rope type): inv_freq = 1 / theta^(2i/dim), emb = cat(freqs, freqs)
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    freqs = pos.to(torch.float64)[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def repeat_kv(x, n_rep):
    # [kv_heads, n, hd] -> [kv_heads * n_rep, n, hd], each kv head repeated for its query heads
    kvh, n, hd = x.shape
    return x[:, None].expand(kvh, n_rep, n, hd).reshape(kvh * n_rep, n, hd)


class CausalLM:
    """One sequence (no batch) of a Qwen2ForCausalLM / LlamaForCausalLM in dtype."""

    def __init__(self, cfg, sd, dtype=torch.float64):
        self.c, self.dtype, self.w = cfg, dtype, {k: v.to(dtype) for k, v in sd.items()}

    def forward(self, ids, pos, states=False):
        c, w = self.c, self.w
        H, KVH, d = c["num_attention_heads"], c["num_key_value_heads"], c["hidden_size"]
        hd, eps = d // H, c["rms_norm_eps"]
        n = len(ids)
        x = w["model.embed_tokens.weight"][torch.tensor(ids)]
        cos, sin = (t.to(self.dtype) for t in rope_cos_sin(torch.tensor(pos), hd, c["rope_theta"]))
        # the causal mask by sequence index (HF's): query i reads keys j <= i
        mask = torch.full((n, n), float("-inf"), dtype=self.dtype).triu(1)
        ks, vs, hs = [], [], []
        bias = c.get("attention_bias", False) or c["model_type"] == "qwen2"
        for l in range(c["num_hidden_layers"]):
            p = f"model.layers.{l}."
            hs.append(x)
            hn = rms_norm(x, w[p + "input_layernorm.weight"], eps)

            def proj(name, t):
                y = t @ w[p + f"self_attn.{name}.weight"].T
                return y + w[p + f"self_attn.{name}.bias"] if bias else y
            q = proj("q_proj", hn).view(n, H, hd).transpose(0, 1)
            k = proj("k_proj", hn).view(n, KVH, hd).transpose(0, 1)
            v = proj("v_proj", hn).view(n, KVH, hd).transpose(0, 1)
            q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
            ks.append(k.transpose(0, 1).reshape(n, KVH * hd))
            vs.append(v.transpose(0, 1).reshape(n, KVH * hd))
            kr, vr = repeat_kv(k, H // KVH), repeat_kv(v, H // KVH)
            att = torch.softmax(q @ kr.transpose(1, 2) / math.sqrt(hd) + mask, dim=-1) @ vr
            o = att.transpose(0, 1).reshape(n, d) @ w[p + "self_attn.o_proj.weight"].T
            if c.get("attention_bias", False):  # Llama's o_proj bias (Qwen2 has none)
                o = o + w[p + "self_attn.o_proj.bias"]
            x = x + o
            hn = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
            g, u = hn @ w[p + "mlp.gate_proj.weight"].T, hn @ w[p + "mlp.up_proj.weight"].T
            x = x + (torch.nn.functional.silu(g) * u) @ w[p + "mlp.down_proj.weight"].T
        hs.append(x)
        head = w["model.embed_tokens.weight"] if c["tie_word_embeddings"] else w["lm_head.weight"]
        logits = rms_norm(x, w["model.norm.weight"], eps) @ head.T
        if states:
            return logits, {"k": ks, "v": vs, "h": hs}
        return logits


def greedy(model, name, prompt, gen_length, eos):
    """Greedy decoding, every token recomputed from the whole sequence (no cache)."""
    ids, gaps = list(prompt), []
    while len(ids) < len(prompt) + gen_length:
        lg = model.forward(ids, list(range(len(ids))))[-1]
        top = torch.topk(lg, 2).values
        gaps.append(float(top[0] - top[1]))
        ids.append(int(lg.argmax()))
        if ids[-1] == eos:
            break
    steps = len(ids) - len(prompt)
    ids += [eos] * (len(prompt) + gen_length - len(ids))
    return {"name": name, "prompt_ids": prompt, "gen_length": gen_length, "steps": steps, "block_length": 1,
            "output_ids": ids, "answer_ids": ids[len(prompt):], "min_argmax_logit_gap": min(gaps)}


# ---------------------------------------------------------------- fixtures

def random_weights(c, seed):
    rn = G.normal(seed)
    d, H, KVH, hid, V = (c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"],
                         c["intermediate_size"], c["vocab_size"])
    kv = KVH * (d // H)
    qwen, abias = c["model_type"] == "qwen2", c.get("attention_bias", False)
    # a tied head reads the embedding: smaller, so that the layers' outputs rather than the last
    # token's own embedding decide the next token
    sd = {"model.embed_tokens.weight": rn(V, d, std=0.1 if c["tie_word_embeddings"] else 1.0),
          "model.norm.weight": 1 + 0.1 * rn(d)}
    if not c["tie_word_embeddings"]:
        sd["lm_head.weight"] = rn(V, d, std=2.5 / math.sqrt(d))
    for l in range(c["num_hidden_layers"]):
        p = f"model.layers.{l}."
        sd[p + "input_layernorm.weight"] = 1 + 0.1 * rn(d)
        sd[p + "post_attention_layernorm.weight"] = 1 + 0.1 * rn(d)
        for name, rows in (("q_proj", d), ("k_proj", kv), ("v_proj", kv), ("o_proj", d)):
            sd[p + f"self_attn.{name}.weight"] = rn(rows, d, std=1 / math.sqrt(d)) * (1.5 if name in ("q_proj", "k_proj") else 1)
            if (qwen and name != "o_proj") or abias:
                sd[p + f"self_attn.{name}.bias"] = rn(rows, std=0.3)
        sd[p + "mlp.gate_proj.weight"] = rn(hid, d, std=1 / math.sqrt(d))
        sd[p + "mlp.up_proj.weight"] = rn(hid, d, std=1 / math.sqrt(d))
        sd[p + "mlp.down_proj.weight"] = rn(d, hid, std=1 / math.sqrt(hid))
    return sd


def build(out_dir, cfg, seed, tok_files, sid, chat, card):
    os.makedirs(out_dir, exist_ok=True)
    sd = random_weights(cfg, seed)
    st.save_file({k: v.to(torch.float32) for k, v in sd.items()}, os.path.join(out_dir, "model.safetensors"),
                 dtype="F32", metadata={"format": "pt", "generator": GENERATOR, "seed": str(seed)})
    G.write_json(os.path.join(out_dir, "config.json"), cfg, 2)
    for name, (obj, indent) in tok_files.items():
        G.write_json(os.path.join(out_dir, name), obj, indent)
    G.write_json(os.path.join(out_dir, "dlmcache.json"), card, 1)
    # the reference reads exactly what is stored
    stored = st.load_file(os.path.join(out_dir, "model.safetensors"))
    m, m32 = CausalLM(cfg, stored), CausalLM(cfg, stored, torch.float32)

    def enc(text):
        return G.encode(text, sid)
    ids = enc(chat("You are terse.", "Name: Ada. Hi! What is 2+2?"))[:48]
    pos = list(range(len(ids)))
    ids2 = enc(chat("k=v", "x?"))[:20] + enc("abc 12 ## the end")
    pos2 = list(range(20)) + list(range(100, 100 + len(ids2) - 20))
    with torch.no_grad():
        tensors = {}
        for prefix, i, p, hidden in (("", ids, pos, True), ("pos2.", ids2, pos2, False)):
            lg, s = m.forward(i, p, states=True)
            tensors[prefix + "logits"] = lg
            for l in range(len(s["k"])):
                tensors[f"{prefix}k.{l}"], tensors[f"{prefix}v.{l}"] = s["k"][l], s["v"][l]
            if hidden:
                for l, h in enumerate(s["h"]):
                    tensors[f"h.{l}"] = h
        lg = tensors["logits"]
        rel32 = float((m32.forward(ids, pos).to(torch.float64) - lg).abs().max() / lg.abs().max())
    G.save_golden_tensors(out_dir, tensors, GENERATOR)
    eos = cfg["eos_token_id"]
    gens = [greedy(m, "terse", enc(chat("You are terse.", "Say hi.")), 16, eos),
            greedy(m, "sum", enc(chat(None, "2+2?")), 12, eos)]
    gj = {"description": "Golden outputs of an independent PyTorch reference of Hugging Face's "
                         f"{cfg['architectures'][0]} (tools/golden/make_causal_golden.py) for this random-weights "
                         "checkpoint, computed in float64 from the stored weights.",
          "generator": GENERATOR, "seed": seed, "architecture": cfg["architectures"][0],
          "input_ids": ids, "position_ids": pos, "pos2": {"input_ids": ids2, "position_ids": pos2},
          "float32_torch_logits_rel_error": rel32, "generate": gens,
          "sampler_notes": "greedy autoregressive decoding: each token the argmax of the last row's logits, "
                           "recomputed over the whole sequence; after EOS the answer is filled with EOS."}
    G.write_json(os.path.join(out_dir, "golden.json"), gj, 1)
    print(out_dir, "f32 rel err %.2e" % rel32, [(g["name"], g["steps"], round(g["min_argmax_logit_gap"], 4)) for g in gens])


def main():
    base = os.path.join(ROOT, "model", "testdata")
    qspecials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok, tcfg, qsid = A.tokenizer_files(qspecials, True)
    tcfg.pop("mask_token", None)
    qwen2 = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 64,
             "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
             "hidden_act": "silu", "max_position_embeddings": 1024, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
             "rope_scaling": None, "vocab_size": 272, "tie_word_embeddings": True, "bos_token_id": qsid["<|endoftext|>"],
             "eos_token_id": qsid["<|im_end|>"], "use_sliding_window": False, "sliding_window": None,
             "max_window_layers": 2, "attention_dropout": 0.0, "initializer_range": 0.02, "use_cache": True,
             "torch_dtype": "float32"}
    card = {"gen_length": 16, "steps": 16, "demo_system": "You are terse.", "demo_prompt": "Say hi.", "random_weights": True}
    build(os.path.join(base, "tiny-qwen2"), qwen2, 4242, {"tokenizer.json": (tok, 1), "tokenizer_config.json": (tcfg, 1)},
          qsid, A.chatml, card)
    lsid = {s: 256 + i for i, s in enumerate(A.LLADA_SPECIALS)}
    # tools/pyllada/hf_llama.py's llama_config keys, in its order
    llama = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "intermediate_size": 96,
             "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
             "hidden_act": "silu", "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "rope_scaling": None, "vocab_size": 272,
             "max_position_embeddings": 1024, "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False,
             "bos_token_id": lsid["<|startoftext|>"], "eos_token_id": lsid["<|endoftext|>"],
             "pad_token_id": lsid["<|endoftext|>"], "initializer_range": 0.02, "use_cache": True,
             "torch_dtype": "float32", "mask_token_id": lsid["<|mdm_mask|>"], "tokenizer_vocab_size": 272,
             "eot_token_id": lsid["<|eot_id|>"]}
    ltok, ltcfg, _ = A.tokenizer_files(A.LLADA_SPECIALS, False)
    build(os.path.join(base, "tiny-llama"), llama, 5353, {"tokenizer.json": (ltok, 1), "tokenizer_config.json": (ltcfg, 1)},
          lsid, G.chat, card)


if __name__ == "__main__":
    main()
