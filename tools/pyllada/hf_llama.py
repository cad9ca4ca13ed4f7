"""A causal pyllada model as a Hugging Face Llama checkpoint (LlamaForCausalLM).

pyllada's causal model is the block-causal model with block size 1 (config block_causal,
block_size 1: query i attends key j iff j <= i). Its layer is Llama's decoder layer term for
term, so the conversion is a renaming:

- pre-norm RMSNorm (fp32 inside, weight applied after casting back) before attention and
  before the MLP, a final RMSNorm before the untied LM head: Llama's input_layernorm,
  post_attention_layernorm, model.norm;
- RoPE: pyllada rotates halves (rotate_half, cos/sin of cat([angles, angles])) with
  inv_freq = theta^(-2i/head_dim), Llama's modeling code does the same, so q_proj / k_proj
  rows are copied unpermuted (the permutation in Meta-to-HF conversions undoes Meta's
  interleaved pairs, which pyllada never used);
- MLP down(silu(gate(x)) * up(x)): ff_proj is gate_proj, up_proj is up_proj, ff_out is
  down_proj; attention output attn_out is o_proj; no biases anywhere.

The LM head keeps pyllada's embedding_size rows (vocab_size in config.json is that row
count, as Llama's vocab_size is its embedding's).
"""
import json
import os

import torch

from . import safetensors_io as st
from .model import LLaDA, LLaDAConfig, load_named, write_checkpoint

ARCH = "LlamaForCausalLM"

_LAYER = (("attn_norm", "input_layernorm"), ("q_proj", "self_attn.q_proj"), ("k_proj", "self_attn.k_proj"),
          ("v_proj", "self_attn.v_proj"), ("attn_out", "self_attn.o_proj"), ("ff_norm", "post_attention_layernorm"),
          ("ff_proj", "mlp.gate_proj"), ("up_proj", "mlp.up_proj"), ("ff_out", "mlp.down_proj"))


def is_llama_dir(path):
    p = os.path.join(path, "config.json")
    if not os.path.exists(p):
        return False
    with open(p) as f:
        return ARCH in (json.load(f).get("architectures") or [])


def llama_config(c: LLaDAConfig, dtype="F32"):
    """config.json of the Llama checkpoint of a causal pyllada config."""
    if not (c.block_causal and c.block_size == 1):
        raise ValueError("only a causal model (block_causal, block_size 1) is a Llama")
    d = {
        "architectures": [ARCH],
        "model_type": "llama",
        "hidden_size": c.d_model,
        "intermediate_size": c.mlp_hidden_size,
        "num_hidden_layers": c.n_layers,
        "num_attention_heads": c.n_heads,
        "num_key_value_heads": c.n_kv_heads,
        "head_dim": c.head_dim,
        "hidden_act": "silu",
        "rms_norm_eps": float(c.rms_norm_eps),
        "rope_theta": float(c.rope_theta),
        "rope_scaling": None,
        "vocab_size": c.rows,
        "max_position_embeddings": c.max_sequence_length,
        "tie_word_embeddings": False,
        "attention_bias": False,
        "mlp_bias": False,
        "bos_token_id": c.extra.get("bos_token_id"),
        "eos_token_id": c.eos_token_id,
        "pad_token_id": c.pad_token_id,
        "initializer_range": 0.02,
        "use_cache": True,
        "torch_dtype": {"F32": "float32", "BF16": "bfloat16", "F16": "float16"}[dtype],
        # the tokenizer's ids beyond Llama's keys (the DLM's mask token the guide never sees)
        "mask_token_id": c.mask_token_id,
        "tokenizer_vocab_size": c.vocab_size,
    }
    if "eot_token_id" in c.extra:
        d["eot_token_id"] = c.extra["eot_token_id"]
    return d


def config_from_llama(d):
    """The causal pyllada config of a Llama config.json."""
    if d.get("attention_bias") or d.get("mlp_bias"):
        raise ValueError("biases not supported")
    if d.get("tie_word_embeddings"):
        raise ValueError("tied embeddings not supported")
    if d.get("rope_scaling"):
        raise ValueError("rope_scaling not supported")
    H = d["num_attention_heads"]
    if d.get("head_dim", d["hidden_size"] // H) * H != d["hidden_size"]:
        raise ValueError("head_dim * heads != hidden_size not supported")
    rows = d["vocab_size"]
    extra = {k: d[k] for k in ("bos_token_id", "eot_token_id") if d.get(k) is not None}
    return LLaDAConfig(d_model=d["hidden_size"], n_layers=d["num_hidden_layers"], n_heads=H,
                       n_kv_heads=d.get("num_key_value_heads") or H, mlp_hidden_size=d["intermediate_size"],
                       vocab_size=d.get("tokenizer_vocab_size", rows), embedding_size=rows,
                       rope_theta=d.get("rope_theta", 10000.0), rms_norm_eps=d.get("rms_norm_eps", 1e-6),
                       mask_token_id=d.get("mask_token_id", rows - 1), eos_token_id=d["eos_token_id"],
                       pad_token_id=d.get("pad_token_id", d["eos_token_id"]),
                       max_sequence_length=d.get("max_position_embeddings", 4096),
                       block_causal=True, block_size=1, extra=extra)


def llama_parameters(model: LLaDA):
    """The model's parameters by their HF Llama names (the tensors themselves)."""
    out = {"model.embed_tokens.weight": model.wte.weight, "model.norm.weight": model.ln_f.weight,
           "lm_head.weight": model.ff_out.weight}
    for i, b in enumerate(model.blocks):
        for ours, theirs in _LAYER:
            out[f"model.layers.{i}.{theirs}.weight"] = getattr(b, ours).weight
    return out


def save_llama(model: LLaDA, out_dir, dtype="F32", metadata=None):
    """config.json (llama_config) and model.safetensors (llama_parameters) into out_dir."""
    sd = {k: v.detach().to(torch.float32).contiguous() for k, v in llama_parameters(model).items()}
    write_checkpoint(out_dir, llama_config(model.config, dtype), sd, dtype, metadata)


def load_llama_into(model: LLaDA, path):
    load_named(llama_parameters(model), st.load_file(os.path.join(path, "model.safetensors")), path)


def from_llama(path, dtype=torch.float32):
    """A Llama checkpoint directory as a causal pyllada model."""
    with open(os.path.join(path, "config.json")) as f:
        c = config_from_llama(json.load(f))
    m = LLaDA(c)
    load_llama_into(m, path)
    return m.to(dtype).eval()
