"""Dream and LLaDA-MoE forwards in PyTorch, written from the public modeling code
(Dream's modeling_dream.py, the Qwen2 layout it copies; LLaDA-MoE's modeling file and
llama.cpp's llada-moe graph) and /work/shared/REFERENCE.md, not from this project's Go.

Layer l (0-based), x entering it, hd = hidden_size // num_attention_heads:
    n = input_layernorm(x)
    q, k, v = q_proj(n), k_proj(n), v_proj(n)           # Dream: with biases
    q, k = q_norm(q per head), k_norm(k per head)         # LLaDA-MoE (qk_layernorm): RMSNorm over hd
    q, k = rope(q, pos), rope(k, pos)                     # rotate-half, theta = rope_theta
    h = x + o_proj(softmax(q k^T / sqrt(hd)) v)           # bidirectional, GQA
    m = post_attention_layernorm(h)
    Dream:     y = h + down(silu(gate(m)) * up(m))
    LLaDA-MoE: p = softmax(gate(m)) over num_experts; the num_experts_per_tok largest
               (renormalised to sum 1 when norm_topk_prob); y = h + sum_j p_j * expert_j(m)
logits = lm_head(norm(y_last)); Dream shifts them: position i gets row i-1's (0 its own).

Shapes as tools/pyllada/model.py: ids [B, n]; pos [B, n] or [n]; key_valid [B, n].
"""
import json
import math
import os
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F

from . import safetensors_io as st
from .model import RMSNorm, rope_cos_sin, apply_rope


@dataclass
class DecoderConfig:
    arch: str = "dream"  # "dream" or "llada-moe"
    hidden_size: int = 64
    num_hidden_layers: int = 3
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    intermediate_size: int = 96
    vocab_size: int = 320
    rope_theta: float = 1e6
    rms_norm_eps: float = 1e-6
    mask_token_id: int = 259
    eos_token_id: int = 256
    pad_token_id: int = 256
    bos_token_id: int = 256
    tie_word_embeddings: bool = False
    max_position_embeddings: int = 1024
    num_experts: int = 0
    num_experts_per_tok: int = 0
    expert_intermediate_size: int = 0
    norm_topk_prob: bool = False
    qk_layernorm: bool = False
    extra: dict = field(default_factory=dict)

    @property
    def head_dim(self):
        return self.hidden_size // self.num_attention_heads

    @property
    def kv_dim(self):
        return self.num_key_value_heads * self.head_dim

    @property
    def qkv_bias(self):
        return self.arch == "dream"

    @property
    def shift_logits(self):
        return self.arch == "dream"

    @property
    def moe(self):
        return self.arch == "llada-moe"

    def to_json(self):
        d = {
            "hidden_size": self.hidden_size, "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads, "num_key_value_heads": self.num_key_value_heads,
            "intermediate_size": self.intermediate_size, "vocab_size": self.vocab_size,
            "rope_theta": float(self.rope_theta), "rope_scaling": None, "rms_norm_eps": float(self.rms_norm_eps),
            "hidden_act": "silu", "max_position_embeddings": self.max_position_embeddings,
            "tie_word_embeddings": self.tie_word_embeddings, "mask_token_id": self.mask_token_id,
            "eos_token_id": self.eos_token_id, "pad_token_id": self.pad_token_id, "bos_token_id": self.bos_token_id,
            "attention_dropout": 0.0, "initializer_range": 0.02, "use_cache": False,
        }
        if self.arch == "dream":
            d.update({"architectures": ["DreamModel"], "model_type": "Dream", "use_sliding_window": False,
                      "sliding_window": None, "max_window_layers": self.num_hidden_layers})
        else:
            d.update({"architectures": ["LLaDAMoEModelLM"], "model_type": "lladamoe",
                      "num_experts": self.num_experts, "num_experts_per_tok": self.num_experts_per_tok,
                      "expert_intermediate_size": self.expert_intermediate_size,
                      "norm_topk_prob": self.norm_topk_prob, "qk_layernorm": self.qk_layernorm,
                      "attention_bias": False})
        d.update(self.extra)
        return d


class MLP(nn.Module):
    def __init__(self, d, hid):
        super().__init__()
        self.gate_proj = nn.Linear(d, hid, bias=False)
        self.up_proj = nn.Linear(d, hid, bias=False)
        self.down_proj = nn.Linear(hid, d, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class SparseMoE(nn.Module):
    """Softmax router over all experts, top-k, optional renormalisation; every expert is
    evaluated on every row (a reference: clarity, not speed) and the chosen ones are mixed."""

    def __init__(self, c: DecoderConfig):
        super().__init__()
        self.c = c
        self.gate = nn.Linear(c.hidden_size, c.num_experts, bias=False)
        self.experts = nn.ModuleList([MLP(c.hidden_size, c.expert_intermediate_size) for _ in range(c.num_experts)])

    def forward(self, x):
        c = self.c
        p = torch.softmax(self.gate(x).to(torch.float64), dim=-1)        # [B, n, E]
        w, idx = torch.topk(p, c.num_experts_per_tok, dim=-1)             # [B, n, k]
        if c.norm_topk_prob:
            w = w / w.sum(-1, keepdim=True)
        ys = torch.stack([e(x) for e in self.experts], dim=-2)            # [B, n, E, d]
        chosen = torch.gather(ys, -2, idx[..., None].expand(*idx.shape, x.shape[-1]))  # [B, n, k, d]
        return (chosen * w.to(x.dtype)[..., None]).sum(-2)


class Attention(nn.Module):
    def __init__(self, c: DecoderConfig):
        super().__init__()
        self.c = c
        d, kv = c.hidden_size, c.kv_dim
        self.q_proj = nn.Linear(d, d, bias=c.qkv_bias)
        self.k_proj = nn.Linear(d, kv, bias=c.qkv_bias)
        self.v_proj = nn.Linear(d, kv, bias=c.qkv_bias)
        self.o_proj = nn.Linear(d, d, bias=False)
        if c.qk_layernorm:
            self.q_norm = RMSNorm(c.head_dim, c.rms_norm_eps)
            self.k_norm = RMSNorm(c.head_dim, c.rms_norm_eps)

    def forward(self, a, cos, sin, attn_bias):
        """a [B, n, d] (normed) -> attention output [B, n, d], K and V [B, n, kv_dim]."""
        c = self.c
        B, n, d = a.shape
        H, KH, hd = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        q = self.q_proj(a).view(B, n, H, hd)
        k = self.k_proj(a).view(B, n, KH, hd)
        v = self.v_proj(a).view(B, n, KH, hd)
        if c.qk_layernorm:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        kk = k.repeat_interleave(H // KH, dim=1)
        vv = v.repeat_interleave(H // KH, dim=1)
        s = torch.matmul(q, kk.transpose(-1, -2)) / math.sqrt(hd)
        if attn_bias is not None:
            s = s + attn_bias
        o = torch.matmul(torch.softmax(s, dim=-1), vv).transpose(1, 2).reshape(B, n, d)
        return self.o_proj(o), k.transpose(1, 2).reshape(B, n, KH * hd), v.transpose(1, 2).reshape(B, n, KH * hd)


class Layer(nn.Module):
    def __init__(self, c: DecoderConfig):
        super().__init__()
        d = c.hidden_size
        self.input_layernorm = RMSNorm(d, c.rms_norm_eps)
        self.self_attn = Attention(c)
        self.post_attention_layernorm = RMSNorm(d, c.rms_norm_eps)
        self.mlp = SparseMoE(c) if c.moe else MLP(d, c.intermediate_size)

    def forward(self, x, cos, sin, attn_bias):
        o, k, v = self.self_attn(self.input_layernorm(x), cos, sin, attn_bias)
        h = x + o
        y = h + self.mlp(self.post_attention_layernorm(h))
        return y, k, v


class Decoder(nn.Module):
    def __init__(self, c: DecoderConfig):
        super().__init__()
        self.config = c
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList([Layer(c) for _ in range(c.num_hidden_layers)])
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.lm_head = nn.Linear(c.hidden_size, c.vocab_size, bias=False)

    def forward(self, ids, pos=None, key_valid=None, return_states=False):
        if ids.dim() == 1:
            ids = ids[None]
        B, n = ids.shape
        if pos is None:
            pos = torch.arange(n)
        if pos.dim() == 1:
            pos = pos[None].expand(B, n)
        x = self.embed_tokens(ids)
        cos, sin = rope_cos_sin(pos, self.config.head_dim, self.config.rope_theta, x.dtype)
        bias = None
        if key_valid is not None and not bool(key_valid.all()):
            bias = torch.zeros(B, 1, 1, n, dtype=x.dtype).masked_fill(~key_valid[:, None, None, :], float("-inf"))
        ks, vs, hs = [], [], []
        for layer in self.layers:
            hs.append(x)
            x, k, v = layer(x, cos, sin, bias)
            ks.append(k)
            vs.append(v)
        hs.append(x)
        head = self.embed_tokens.weight if self.config.tie_word_embeddings else self.lm_head.weight
        logits = F.linear(self.norm(x), head)
        if self.config.shift_logits:
            logits = torch.cat([logits[:, :1], logits[:, :-1]], dim=1)
        if return_states:
            return logits, {"k": ks, "v": vs, "h": hs}
        return logits

    def hf_state_dict(self):
        """The Hugging Face tensor names (model.embed_tokens, model.layers.N.self_attn.*, ...)."""
        out = {}
        for name, p in self.named_parameters():
            if name.startswith("lm_head."):
                if not self.config.tie_word_embeddings:
                    out[name] = p
                continue
            out["model." + name] = p
        return {k: v.detach().to(torch.float32).contiguous() for k, v in out.items()}

    def load_hf_state_dict(self, sd, path="<state>"):
        mine = self.hf_state_dict()
        if set(mine) != set(sd):
            raise ValueError(f"{path}: tensors differ: missing {sorted(set(mine) - set(sd))[:5]}, "
                             f"unexpected {sorted(set(sd) - set(mine))[:5]}")
        params = dict(self.named_parameters())
        with torch.no_grad():
            for k, t in sd.items():
                p = params[k[len("model."):] if k.startswith("model.") else k]
                if tuple(t.shape) != tuple(p.shape):
                    raise ValueError(f"{path}: {k} has shape {tuple(t.shape)}, want {tuple(p.shape)}")
                p.copy_(t.to(p.dtype))


def save_pretrained(model, out_dir, dtype="F32", metadata=None):
    os.makedirs(out_dir, exist_ok=True)
    cfg = model.config.to_json()
    cfg["torch_dtype"] = {"F32": "float32", "BF16": "bfloat16"}[dtype]
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    md = {"format": "pt"}
    md.update(metadata or {})
    st.save_file(model.hf_state_dict(), os.path.join(out_dir, "model.safetensors"), dtype=dtype, metadata=md)
