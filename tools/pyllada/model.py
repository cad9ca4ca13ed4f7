"""LLaDA forward in PyTorch, written from /work/shared/REFERENCE.md.

Layer l (0-based), x entering it:
    n = attn_norm(x);  q, k, v = q_proj(n), k_proj(n), v_proj(n)
    q, k = rope(q, pos), rope(k, pos)            # rotate-half, fp32 (or fp64)
    h = x + attn_out(softmax(q k^T / sqrt(hd) + keymask) v)   # bidirectional
    m = ff_norm(h);   y = h + ff_out(silu(ff_proj(m)) * up_proj(m))
logits = ff_out_head(ln_f(y_last))   [.., embedding_size]

Block diffusion (config block_causal, block_size B; LLaDA 2.x / SDAR): attention is
bidirectional inside a block and causal between blocks, blocks absolute (aligned at
position 0): query at position i attends key at position j iff j // B <= i // B
(positions from pos). shift_logits (Fast-dLLM v2's token shift, Dream's convention):
position i's output is row i-1's (position 0 its own), for the hidden states forward returns
with return_hidden as for its logits, so a loss that reads position i's row trains row i-1.

Shapes: ids [B, n] int64; pos [B, n] or [n] int64 (explicit, may be
non-contiguous); key_valid [B, n] bool (False = padding key, never attended).
K and V are [B, n, n_kv_heads*head_dim], head h in columns h*hd..(h+1)*hd-1.
"""
import json
import math
import os
from dataclasses import dataclass, asdict, field

import torch
import torch.nn as nn
import torch.nn.functional as F

from . import safetensors_io as st


@dataclass
class LLaDAConfig:
    d_model: int = 64
    n_layers: int = 3
    n_heads: int = 4
    n_kv_heads: int = 4
    mlp_hidden_size: int = 96
    vocab_size: int = 300
    embedding_size: int = 320
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-5
    mask_token_id: int = 258
    eos_token_id: int = 257
    pad_token_id: int = 257
    max_sequence_length: int = 4096
    block_causal: bool = False  # block diffusion: bidirectional in a block, causal between blocks
    block_size: int = 32
    shift_logits: bool = False
    extra: dict = field(default_factory=dict)  # other fields (bos_token_id, ...) kept in config.json

    @property
    def head_dim(self):
        return self.d_model // self.n_heads

    @property
    def kv_dim(self):
        return self.n_kv_heads * self.head_dim

    @property
    def rows(self):
        return self.embedding_size or self.vocab_size

    def to_json(self):
        d = {
            "architectures": ["LLaDAModelLM"],
            "model_type": "llada",
            "d_model": self.d_model,
            "n_layers": self.n_layers,
            "n_heads": self.n_heads,
            "n_kv_heads": self.n_kv_heads,
            "mlp_hidden_size": self.mlp_hidden_size,
            "mlp_ratio": self.mlp_hidden_size // self.d_model if self.mlp_hidden_size % self.d_model == 0 else None,
            "vocab_size": self.vocab_size,
            "embedding_size": self.embedding_size,
            "rope": True,
            "rope_theta": float(self.rope_theta),
            "rope_full_precision": True,
            "rms_norm_eps": float(self.rms_norm_eps),
            "mask_token_id": self.mask_token_id,
            "eos_token_id": self.eos_token_id,
            "pad_token_id": self.pad_token_id,
            "max_sequence_length": self.max_sequence_length,
            "weight_tying": False,
            "include_bias": False,
            "include_qkv_bias": False,
            "bias_for_layer_norm": False,
            "layer_norm_type": "rms",
            "layer_norm_with_affine": True,
            "attention_layer_norm": False,
            "activation_type": "silu",
            "block_type": "llama",
            "alibi": False,
            "flash_attention": False,
            "multi_query_attention": None,
            "torch_dtype": "float32",
            "use_cache": False,
        }
        if d["mlp_ratio"] is None:
            del d["mlp_ratio"]
        if self.block_causal:  # absent from bidirectional configs (unchanged files)
            d.update(block_causal=True, block_size=self.block_size, shift_logits=self.shift_logits)
        for k, v in self.extra.items():
            d.setdefault(k, v)
        return d

    @classmethod
    def from_json(cls, d):
        known = {f for f in cls.__dataclass_fields__ if f != "extra"}
        kw = {k: d[k] for k in known if k in d and d[k] is not None}
        c = cls(**kw)
        if not c.n_kv_heads:
            c.n_kv_heads = c.n_heads
        if not c.embedding_size:
            c.embedding_size = c.vocab_size
        for k in ("bos_token_id", "eot_token_id"):
            if k in d:
                c.extra[k] = d[k]
        if c.block_causal and c.block_size <= 0:
            raise ValueError(f"block_size {c.block_size}: must be positive with block_causal")
        assert d.get("weight_tying", False) is False, "weight_tying not supported"
        assert not d.get("include_bias") and not d.get("include_qkv_bias"), "biases not supported"
        return c


class RMSNorm(nn.Module):
    def __init__(self, d, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        dt = x.dtype
        xf = x.to(torch.float64 if dt == torch.float64 else torch.float32)
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.to(dt)


def rope_cos_sin(pos, head_dim, theta, dtype):
    """pos [B, n] int -> cos, sin [B, 1, n, head_dim] in fp32 (fp64 if dtype is fp64)."""
    cdt = torch.float64 if dtype == torch.float64 else torch.float32
    i = torch.arange(0, head_dim, 2, dtype=torch.float64)
    inv_freq = (1.0 / (theta ** (i / head_dim))).to(device=pos.device, dtype=cdt)
    ang = pos.to(cdt)[..., None] * inv_freq  # [B, n, hd/2]
    emb = torch.cat([ang, ang], dim=-1)
    return emb.cos()[:, None], emb.sin()[:, None]


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


def apply_rope(x, cos, sin):
    """RoPE on the first cos.shape[-1] dimensions of each head of x (all of them, or a
    partial share); the others pass through."""
    r = cos.shape[-1]
    dt = x.dtype
    xf = x[..., :r].to(cos.dtype)
    out = (xf * cos + rotate_half(xf) * sin).to(dt)
    return out if r == x.shape[-1] else torch.cat([out, x[..., r:]], dim=-1)


def block_causal_mask(pos, block_size):
    """pos [B, n] -> allowed [B, n(query), n(key)] bool: key j visible to query i iff
    pos_j // block_size <= pos_i // block_size (absolute blocks from position 0)."""
    blk = torch.div(pos, block_size, rounding_mode="floor")
    return blk[:, None, :] <= blk[:, :, None]


def batch_positions(ids, pos):
    """ids [n] or [B, n], pos None (0..n-1), [n] or [B, n] -> ids [B, n], pos [B, n] on ids' device."""
    if ids.dim() == 1:
        ids = ids[None]
    B, n = ids.shape
    if pos is None:
        pos = torch.arange(n, device=ids.device)
    pos = pos.to(ids.device)
    if pos.dim() == 1:
        pos = pos[None].expand(B, n)
    return ids, pos


def additive_mask(pos, key_valid, block_causal, block_size, dtype):
    """The attention bias added to the scores (0 = attend, -inf = not): padding keys
    (key_valid False) [B, 1, 1, n] and, block-causal, the keys of later blocks [B, 1, n, n];
    None when every key is visible."""
    B, n = pos.shape
    bias = None
    if key_valid is not None and not bool(key_valid.all()):
        bias = torch.zeros(B, 1, 1, n, dtype=dtype).masked_fill(~key_valid[:, None, None, :], float("-inf"))
    if block_causal:
        allowed = block_causal_mask(pos, block_size)  # [B, n, n]
        bb = torch.zeros(B, 1, n, n, dtype=dtype).masked_fill(~allowed[:, None], float("-inf"))
        bias = bb if bias is None else bias + bb
    return bias


def attend(q, k, v, attn_bias):
    """softmax(q k^T / sqrt(hd) + bias) v for q [B, H, n, hd] and k, v [B, KH, n, hd] (each kv
    head serves H // KH query heads) -> [B, n, H * hd]. attn_bias: additive (additive_mask),
    or on CUDA, where the fused kernel runs, boolean (True = attend); None: every key."""
    B, H, n, hd = q.shape
    if k.shape[1] != H:
        k = k.repeat_interleave(H // k.shape[1], dim=1)
        v = v.repeat_interleave(H // v.shape[1], dim=1)
    if q.is_cuda:
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_bias)
    else:
        s = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(hd))
        if attn_bias is not None:
            s = s + attn_bias
        o = torch.matmul(torch.softmax(s, dim=-1), v)
    return o.transpose(1, 2).reshape(B, n, H * hd)


def run_layers(layers, x, cos, sin, bias, return_states, checkpoint=False):
    """x through each layer (layer(x, cos, sin, bias) -> x, k, v) -> x and, with return_states,
    {"k": [L x [B,n,kv_dim]], "v": [...], "h": [L+1 x [B,n,d]]} (h[l] the hidden state entering
    layer l, h[L] the last layer's output), else None. checkpoint: recompute each layer in the
    backward pass (torch.utils.checkpoint)."""
    ks, vs, hs = [], [], []
    for layer in layers:
        if return_states:
            hs.append(x)
        if checkpoint:
            x, k, v = torch.utils.checkpoint.checkpoint(layer, x, cos, sin, bias)
        else:
            x, k, v = layer(x, cos, sin, bias)
        if return_states:
            ks.append(k)
            vs.append(v)
    if not return_states:
        return x, None
    hs.append(x)
    return x, {"k": ks, "v": vs, "h": hs}


class HFWeights:
    """The Hugging Face checkpoint of a model whose hf_parameters() gives its parameters by
    their checkpoint names."""

    def hf_state_dict(self):
        return {k: v.detach().to(torch.float32).contiguous() for k, v in self.hf_parameters().items()}

    def load_hf_state_dict(self, sd, path="<state>"):
        load_named(self.hf_parameters(), sd, path)


def load_named(tgt, sd, path):
    """Copy the tensors of sd (a checkpoint read from path) into the parameters tgt of the same
    names, each of its own shape; sd must hold exactly tgt's names."""
    missing = [k for k in tgt if k not in sd]
    extra = [k for k in sd if k not in tgt]
    if missing:
        raise ValueError(f"{path}: missing tensors {missing[:5]}")
    if extra:
        raise ValueError(f"{path}: unexpected tensors {extra[:5]}")
    with torch.no_grad():
        for k, p in tgt.items():
            if tuple(sd[k].shape) != tuple(p.shape):
                raise ValueError(f"{path}: {k} has shape {tuple(sd[k].shape)}, want {tuple(p.shape)}")
            p.copy_(sd[k].to(p.dtype))


class Block(nn.Module):
    def __init__(self, c: LLaDAConfig):
        super().__init__()
        d, hid = c.d_model, c.mlp_hidden_size
        self.c = c
        self.attn_norm = RMSNorm(d, c.rms_norm_eps)
        self.q_proj = nn.Linear(d, d, bias=False)
        self.k_proj = nn.Linear(d, c.kv_dim, bias=False)
        self.v_proj = nn.Linear(d, c.kv_dim, bias=False)
        self.attn_out = nn.Linear(d, d, bias=False)
        self.ff_norm = RMSNorm(d, c.rms_norm_eps)
        self.ff_proj = nn.Linear(d, hid, bias=False)
        self.up_proj = nn.Linear(d, hid, bias=False)
        self.ff_out = nn.Linear(hid, d, bias=False)

    def forward(self, x, cos, sin, attn_bias):
        c = self.c
        B, n, d = x.shape
        H, KH, hd = c.n_heads, c.n_kv_heads, c.head_dim
        a = self.attn_norm(x)
        q = self.q_proj(a).view(B, n, H, hd).transpose(1, 2)
        k = self.k_proj(a).view(B, n, KH, hd).transpose(1, 2)
        v = self.v_proj(a).view(B, n, KH, hd).transpose(1, 2)
        q = apply_rope(q, cos, sin)
        k = apply_rope(k, cos, sin)
        h = x + self.attn_out(attend(q, k, v, attn_bias))
        m = self.ff_norm(h)
        y = h + self.ff_out(F.silu(self.ff_proj(m)) * self.up_proj(m))
        return y, k.transpose(1, 2).reshape(B, n, KH * hd), v.transpose(1, 2).reshape(B, n, KH * hd)


class LLaDA(nn.Module, HFWeights):
    def __init__(self, c: LLaDAConfig):
        super().__init__()
        self.config = c
        self.wte = nn.Embedding(c.rows, c.d_model)
        self.blocks = nn.ModuleList([Block(c) for _ in range(c.n_layers)])
        self.ln_f = RMSNorm(c.d_model, c.rms_norm_eps)
        self.ff_out = nn.Linear(c.d_model, c.rows, bias=False)

    def head(self, x):
        """Final norm + LM head: [.., d] -> [.., embedding_size]."""
        return self.ff_out(self.ln_f(x))

    def forward(self, ids, pos=None, key_valid=None, return_states=False, checkpoint_blocks=False,
                return_hidden=False):
        """ids [B, n] -> logits [B, n, embedding_size] (and states if return_states).

        states = {"k": [L x [B,n,kv_dim]], "v": [...], "h": [L+1 x [B,n,d]]}; h[l] is the
        hidden state entering layer l, h[L] the output of the last layer (before ln_f).
        """
        ids, pos = batch_positions(ids, pos)
        dev = ids.device
        x = self.wte(ids)
        cos, sin = rope_cos_sin(pos, self.config.head_dim, self.config.rope_theta, x.dtype)
        if dev.type == "cuda":  # a boolean mask (True = attend) for scaled_dot_product_attention
            bias = None
            if key_valid is not None and not bool(key_valid.all()):
                bias = key_valid.to(dev)[:, None, None, :]
            if self.config.block_causal:
                allowed = block_causal_mask(pos, self.config.block_size)[:, None]  # [B, 1, n, n]
                bias = allowed if bias is None else bias & allowed
        else:
            bias = additive_mask(pos, key_valid, self.config.block_causal, self.config.block_size, x.dtype)
        x, states = run_layers(self.blocks, x, cos, sin, bias, return_states, checkpoint_blocks and self.training)
        if self.config.shift_logits:  # position i reads row i-1 (0 its own)
            x = torch.cat([x[:, :1], x[:, :-1]], dim=1)
        if return_hidden:
            return x
        logits = self.head(x)
        if return_states:
            return logits, states
        return logits

    # ---- LLaDA HF layout ----------------------------------------------------
    def hf_parameters(self):
        """The model's weights by their LLaDA HF names (the parameters themselves)."""
        out = {"model.transformer.wte.weight": self.wte.weight,
               "model.transformer.ln_f.weight": self.ln_f.weight,
               "model.transformer.ff_out.weight": self.ff_out.weight}
        for i, b in enumerate(self.blocks):
            for name in ("attn_norm", "q_proj", "k_proj", "v_proj", "attn_out",
                         "ff_norm", "ff_proj", "up_proj", "ff_out"):
                out[f"model.transformer.blocks.{i}.{name}.weight"] = getattr(b, name).weight
        return out



def save_pretrained(model, out_dir, dtype="F32", metadata=None):
    """Write config.json (model.config.to_json()) and model.safetensors (model.hf_state_dict(): the
    architecture's HF names) into out_dir."""
    cfg = model.config.to_json()
    cfg["torch_dtype"] = {"F32": "float32", "BF16": "bfloat16", "F16": "float16"}[dtype]
    write_checkpoint(out_dir, cfg, model.hf_state_dict(), dtype, metadata)


def write_checkpoint(out_dir, cfg, sd, dtype="F32", metadata=None):
    """Write config.json (cfg, replaced whole) and model.safetensors (the float32 tensors sd,
    stored as dtype, with metadata besides format "pt") into out_dir."""
    os.makedirs(out_dir, exist_ok=True)
    tmp = os.path.join(out_dir, "config.json.tmp")
    with open(tmp, "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    os.replace(tmp, os.path.join(out_dir, "config.json"))
    md = {"format": "pt"}
    md.update(metadata or {})
    st.save_file(sd, os.path.join(out_dir, "model.safetensors"), dtype=dtype, metadata=md)


def from_pretrained(path, dtype=torch.float32):
    """Load config.json + model.safetensors (BF16/F16 upcast) from directory path."""
    with open(os.path.join(path, "config.json")) as f:
        c = LLaDAConfig.from_json(json.load(f))
    m = LLaDA(c)
    sd = st.load_file(os.path.join(path, "model.safetensors"))
    m.load_hf_state_dict(sd, path)
    return m.to(dtype).eval()
