"""Dream, LLaDA-MoE and LLaDA 2.x forwards in PyTorch, written from the public modeling code
(Dream's modeling_dream.py, the Qwen2 layout it copies; LLaDA-MoE's modeling file and
llama.cpp's llada-moe graph; LLaDA 2's modeling_llada2_moe.py, BailingMoeV2) and
/work/shared/REFERENCE.md, not from this project's Go.

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

LLaDA 2 (arch "llada2"): q/k/v from one query_key_value product (heads [q..., k..., v...]),
per-head q/k RMSNorm, RoPE on the first rot = head_dim * partial_rotary_factor dims of each
head only (frequencies over rot), output projection "dense" (with bias when use_bias),
block-causal attention (key j visible to query i iff j // block_size <= i // block_size);
layers < first_k_dense_replace have a dense MLP, the others: s = sigmoid(gate(m)); experts
chosen by s + expert_bias among the topk_group groups (of n_group) with the largest sum of
their two best biased scores; weights = s of the chosen / their sum (top_k > 1) *
routed_scaling_factor; y = h + sum_j w_j expert_j(m) + shared_experts(m).

Shapes as tools/pyllada/model.py: ids [B, n]; pos [B, n] or [n]; key_valid [B, n].
"""
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F

from .model import RMSNorm, HFWeights, rope_cos_sin, apply_rope, batch_positions, additive_mask, attend, run_layers


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
    # LLaDA 2
    num_shared_experts: int = 0
    first_k_dense_replace: int = 0
    n_group: int = 1
    topk_group: int = 1
    routed_scaling_factor: float = 1.0
    partial_rotary_factor: float = 1.0
    use_bias: bool = False
    block_size: int = 32
    extra: dict = field(default_factory=dict)

    @property
    def llada2(self):
        return self.arch == "llada2"

    @property
    def block_causal(self):
        return self.llada2

    @property
    def rot_dim(self):
        return int(self.head_dim * self.partial_rotary_factor)

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
        return self.arch in ("llada-moe", "llada2")

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
        if self.llada2:
            d.update({"architectures": ["LLaDA2MoeModelLM"], "model_type": "llada2_moe",
                      "num_experts": self.num_experts, "num_shared_experts": self.num_shared_experts,
                      "num_experts_per_tok": self.num_experts_per_tok, "n_group": self.n_group,
                      "topk_group": self.topk_group, "routed_scaling_factor": self.routed_scaling_factor,
                      "moe_intermediate_size": self.expert_intermediate_size,
                      "first_k_dense_replace": self.first_k_dense_replace, "head_dim": self.head_dim,
                      "partial_rotary_factor": self.partial_rotary_factor, "use_qk_norm": True,
                      "use_qkv_bias": False, "use_bias": self.use_bias, "norm_head": False,
                      "score_function": "sigmoid", "moe_router_enable_expert_bias": True,
                      "norm_topk_prob": True})
            del d["mask_token_id"]  # the released configs have none (156895 is the default)
        elif self.arch == "dream":
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


class Gate(nn.Module):
    """LLaDA 2's router: weight [E, d] and the expert bias [E] (a parameter here, a buffer upstream:
    both are in the checkpoint)."""

    def __init__(self, c: DecoderConfig):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(c.num_experts, c.hidden_size))
        self.expert_bias = nn.Parameter(torch.zeros(c.num_experts))


class SigmoidMoE(nn.Module):
    """LLaDA 2 (BailingMoeV2): sigmoid scores, group-limited top-k on score + expert bias,
    normalised chosen scores times routed_scaling_factor, plus the shared experts."""

    def __init__(self, c: DecoderConfig):
        super().__init__()
        self.c = c
        self.gate = Gate(c)
        self.experts = nn.ModuleList([MLP(c.hidden_size, c.expert_intermediate_size) for _ in range(c.num_experts)])
        if c.num_shared_experts:
            self.shared_experts = MLP(c.hidden_size, c.expert_intermediate_size * c.num_shared_experts)

    def forward(self, x):
        c = self.c
        B, n, d = x.shape
        flat = x.reshape(-1, d)
        s = torch.sigmoid(F.linear(flat, self.gate.weight).to(torch.float64))       # [T, E]
        biased = s + self.gate.expert_bias.to(torch.float64)
        T, E = s.shape
        if c.n_group > 1:
            g = biased.view(T, c.n_group, E // c.n_group).topk(2, dim=-1).values.sum(-1)   # [T, G]
            keep = torch.zeros_like(g).scatter_(1, torch.topk(g, c.topk_group, dim=-1).indices, 1.0)
            keep = keep[:, :, None].expand(T, c.n_group, E // c.n_group).reshape(T, E).bool()
            biased = biased.masked_fill(~keep, float("-inf"))
        idx = torch.topk(biased, c.num_experts_per_tok, dim=-1).indices                # [T, k]
        w = torch.gather(s, 1, idx)
        if c.num_experts_per_tok > 1:
            w = w / (w.sum(-1, keepdim=True) + 1e-20)
        w = w * c.routed_scaling_factor
        ys = torch.stack([e(flat) for e in self.experts], dim=1)                      # [T, E, d]
        chosen = torch.gather(ys, 1, idx[..., None].expand(T, idx.shape[1], d))
        y = (chosen * w.to(x.dtype)[..., None]).sum(1).view(B, n, d)
        if c.num_shared_experts:
            y = y + self.shared_experts(x)
        return y


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
        if c.llada2:
            self.query_key_value = nn.Linear(d, d + 2 * kv, bias=False)
            self.dense = nn.Linear(d, d, bias=c.use_bias)
            self.query_layernorm = RMSNorm(c.head_dim, c.rms_norm_eps)
            self.key_layernorm = RMSNorm(c.head_dim, c.rms_norm_eps)
            return
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
        if c.llada2:
            q, k, v = self.query_key_value(a).view(B, n, H + 2 * KH, hd).split([H, KH, KH], dim=2)
            q, k = self.query_layernorm(q), self.key_layernorm(k)
        else:
            q = self.q_proj(a).view(B, n, H, hd)
            k = self.k_proj(a).view(B, n, KH, hd)
            v = self.v_proj(a).view(B, n, KH, hd)
            if c.qk_layernorm:
                q, k = self.q_norm(q), self.k_norm(k)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        # rotated dims (cos's width): the whole head, or LLaDA 2's partial share
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        o = attend(q, k, v, attn_bias)
        out = self.dense(o) if c.llada2 else self.o_proj(o)
        return out, k.transpose(1, 2).reshape(B, n, KH * hd), v.transpose(1, 2).reshape(B, n, KH * hd)


class Layer(nn.Module):
    def __init__(self, c: DecoderConfig, i):
        super().__init__()
        d = c.hidden_size
        self.input_layernorm = RMSNorm(d, c.rms_norm_eps)
        self.attn_name = "attention" if c.llada2 else "self_attn"
        setattr(self, self.attn_name, Attention(c))
        self.post_attention_layernorm = RMSNorm(d, c.rms_norm_eps)
        if c.llada2 and i >= c.first_k_dense_replace:
            self.mlp = SigmoidMoE(c)
        elif c.moe and not c.llada2:
            self.mlp = SparseMoE(c)
        else:
            self.mlp = MLP(d, c.intermediate_size)

    def forward(self, x, cos, sin, attn_bias):
        o, k, v = getattr(self, self.attn_name)(self.input_layernorm(x), cos, sin, attn_bias)
        h = x + o
        y = h + self.mlp(self.post_attention_layernorm(h))
        return y, k, v


class Decoder(nn.Module, HFWeights):
    def __init__(self, c: DecoderConfig):
        super().__init__()
        self.config = c
        self.emb_name = "word_embeddings" if c.llada2 else "embed_tokens"
        setattr(self, self.emb_name, nn.Embedding(c.vocab_size, c.hidden_size))
        self.layers = nn.ModuleList([Layer(c, i) for i in range(c.num_hidden_layers)])
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.lm_head = nn.Linear(c.hidden_size, c.vocab_size, bias=False)

    def forward(self, ids, pos=None, key_valid=None, return_states=False):
        ids, pos = batch_positions(ids, pos)
        c = self.config
        emb = getattr(self, self.emb_name)
        x = emb(ids)
        cos, sin = rope_cos_sin(pos, c.rot_dim, c.rope_theta, x.dtype)
        bias = additive_mask(pos, key_valid, c.block_causal, c.block_size, x.dtype)
        x, states = run_layers(self.layers, x, cos, sin, bias, return_states)
        head = emb.weight if c.tie_word_embeddings else self.lm_head.weight
        logits = F.linear(self.norm(x), head)
        if self.config.shift_logits:
            logits = torch.cat([logits[:, :1], logits[:, :-1]], dim=1)
        if return_states:
            return logits, states
        return logits

    def hf_parameters(self):
        """The parameters by their Hugging Face names (model.embed_tokens, model.layers.N.self_attn.*,
        ..., lm_head unless tied)."""
        out = {}
        for name, p in self.named_parameters():
            if name.startswith("lm_head."):
                if not self.config.tie_word_embeddings:
                    out[name] = p
                continue
            out["model." + name] = p
        return out
