#!/usr/bin/env python3
"""Writes model/testdata/ggufpy/: a tiny LLaDA GGUF written by llama.cpp's own gguf-py,
so that dlmcache's GGUF reader is tested on a file it did not write.

    /usr/bin/python3 tools/ggufpy/make_fixture.py GGUF_PY_DIR          # from the repo root
    /usr/bin/python3 tools/ggufpy/make_fixture.py GGUF_PY_DIR probe    # quant_probe.gguf only

GGUF_PY_DIR is the gguf-py directory of a llama.cpp checkout (the one holding the
gguf package; it needs numpy only). Nothing of gguf-py is copied into this repository.

The file is laid out as llama.cpp's convert_hf_to_gguf.py (LLaDAModel) lays out a LLaDA
checkpoint: architecture "llada", the metadata its set_gguf_parameters and
_set_vocab_gpt2 write, llama.cpp's tensor names, and q/k rows permuted with its
LLaDAModel.permute (reshape(n_head, 2, hd/2, ...).swapaxes(1, 2)). The weights are random
(seeded) for a GQA shape (4 query heads, 2 key/value heads) and stored in mixed types,
as llama-quantize leaves a file: Q8_0 (quantized by gguf-py), F16, BF16 (gguf-py) and F32.
The tokenizer is the bundled model's (models/llada-tiny), its vocabulary listed the way
LLaDAModel.get_vocab_base lists it.

Outputs:
  tiny-llada-mixed.gguf   the fixture
  golden.json             every metadata key with its gguf-py type and value; every
                          tensor's type, shape (ggml order), data offset and the SHA-256
                          of its raw bytes and of its values as gguf-py dequantizes them
                          (float32, little-endian); the input ids of the logits check
  golden.safetensors      logits [n, embedding_size] of a float64 PyTorch forward
                          (tools/pyllada) over the dequantized weights, un-permuted
  quant_probe.gguf        tensor "x" (F32: random values, exact ties and zero blocks),
                          "q", gguf-py's Q8_0 quantization of x, and "q4", its Q4_0
                          quantization, so that dlmcache's quantizers can be held to
                          gguf-py's bit for bit
"""
import hashlib
import json
import os
import sys

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))

from pyllada import safetensors_io as st  # noqa: E402
from pyllada.model import LLaDA, LLaDAConfig  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llada_gguf import permute, unpermute, vocab  # noqa: E402

OUT = os.path.join(ROOT, "model", "testdata", "ggufpy")
TOK_DIR = os.path.join(ROOT, "models", "llada-tiny")
NAME = "tiny-llada-mixed.gguf"
SEED = 33


def main():
    if len(sys.argv) not in (2, 3) or len(sys.argv) == 3 and sys.argv[2] != "probe":
        sys.exit(__doc__)
    sys.path.insert(0, os.path.abspath(sys.argv[1]))
    import gguf  # noqa: E402  (llama.cpp's gguf-py)
    from gguf import GGMLQuantizationType as Q

    if len(sys.argv) == 3:
        write_probe(gguf, Q)
        return

    with open(os.path.join(TOK_DIR, "tokenizer.json")) as f:
        tj = json.load(f)
    with open(os.path.join(TOK_DIR, "tokenizer_config.json")) as f:
        tcfg = json.load(f)
    with open(os.path.join(TOK_DIR, "config.json")) as f:
        hcfg = json.load(f)

    vocab_size = hcfg["vocab_size"]
    c = LLaDAConfig(d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, mlp_hidden_size=128,
                    vocab_size=vocab_size, embedding_size=vocab_size, rope_theta=10000.0,
                    rms_norm_eps=1e-5, mask_token_id=hcfg["mask_token_id"],
                    eos_token_id=hcfg["eos_token_id"], pad_token_id=hcfg["pad_token_id"],
                    max_sequence_length=4096)
    m = LLaDA(c).to(torch.float64)
    g = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if p.dim() == 1:
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=g, dtype=torch.float64))
            else:
                p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64) / np.sqrt(p.shape[1]))
        for b in m.blocks:  # sharper attention, so that positions (RoPE) matter
            b.q_proj.weight.mul_(2.0)
            b.k_proj.weight.mul_(2.0)
    hf = {k: v.numpy().astype(np.float32) for k, v in m.hf_state_dict().items()}

    # Tensor names as gguf-py's tensor_mapping maps LLaDA's, and the types of this file.
    top = {"model.transformer.wte.weight": ("token_embd.weight", Q.Q8_0),
           "model.transformer.ff_out.weight": ("output.weight", Q.F16),
           "model.transformer.ln_f.weight": ("output_norm.weight", Q.F32)}
    blk = {"attn_norm": ("attn_norm", Q.F32), "q_proj": ("attn_q", Q.Q8_0),
           "k_proj": ("attn_k", Q.Q8_0), "v_proj": ("attn_v", Q.BF16),
           "attn_out": ("attn_output", Q.F32), "ff_norm": ("ffn_norm", Q.F32),
           "ff_proj": ("ffn_gate", Q.Q8_0), "up_proj": ("ffn_up", Q.F16),
           "ff_out": ("ffn_down", Q.Q8_0)}
    plan = []
    for k in sorted(hf):
        if k in top:
            plan.append((k,) + top[k])
            continue
        i, part = k.split(".")[3], k.split(".")[4]
        gname, qt = blk[part]
        if part == "ff_out" and i == "1":
            qt = Q.BF16
        plan.append((k, f"blk.{i}.{gname}.weight", qt))

    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, NAME)
    w = gguf.GGUFWriter(path, "llada")
    # TextModel.set_type / prepare_metadata, set_gguf_parameters (LLaDAModel), set_vocab.
    w.add_type(gguf.GGUFType.MODEL)
    w.add_name("tiny-llada-mixed")
    w.add_block_count(c.n_layers)
    w.add_context_length(c.max_sequence_length)
    w.add_embedding_length(c.d_model)
    w.add_feed_forward_length(c.mlp_hidden_size)
    w.add_head_count(c.n_heads)
    w.add_head_count_kv(c.n_kv_heads)
    w.add_rope_freq_base(c.rope_theta)
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    w.add_vocab_size(vocab_size)
    w.add_rope_dimension_count(c.head_dim)
    w.add_causal_attention(False)
    w.add_diffusion_shift_logits(False)
    w.add_mask_token_id(c.mask_token_id)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)

    # LLaDAModel.get_vocab_base: ids 0..vocab_size-1; added tokens control (special) or
    # user-defined; missing ids "[PADi]" unused.
    tokens, toktypes, merges = vocab(gguf, tj, vocab_size)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list(tokens)
    w.add_token_types(toktypes)
    w.add_token_merges(merges)
    w.add_bos_token_id(hcfg["bos_token_id"])
    w.add_eos_token_id(hcfg["eos_token_id"])
    w.add_pad_token_id(hcfg["pad_token_id"])
    w.add_add_bos_token(True)
    w.add_chat_template(tcfg["chat_template"])

    golden_sd = {}
    for k, gname, qt in plan:
        a = hf[k]
        if k.endswith("q_proj.weight"):
            a = permute(a, c.n_heads, c.n_heads)
        elif k.endswith("k_proj.weight"):
            a = permute(a, c.n_heads, c.n_kv_heads)
        data = gguf.quants.quantize(a, qt)
        w.add_tensor(gname, data, raw_dtype=qt)
        deq = gguf.quants.dequantize(data, qt).astype(np.float32).reshape(a.shape)
        if k.endswith("q_proj.weight"):
            deq = unpermute(deq, c.n_heads)
        elif k.endswith("k_proj.weight"):
            deq = unpermute(deq, c.n_kv_heads)
        golden_sd[k] = torch.from_numpy(deq.copy())
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    # What gguf-py's own reader sees: the golden metadata and tensor digests.
    r = gguf.GGUFReader(path)
    meta = []
    for f in r.fields.values():
        if f.name.startswith("GGUF."):
            continue
        t = f.types[0].name
        if f.types[0] == gguf.GGUFValueType.ARRAY:
            et = f.types[-1]
            vals = f.contents()
            meta.append({"key": f.name, "type": "ARRAY", "elem": et.name, "value": vals})
        else:
            v = f.contents()
            if isinstance(v, (np.floating, float)):
                v = float(np.float32(v)) if f.types[0] == gguf.GGUFValueType.FLOAT32 else float(v)
            meta.append({"key": f.name, "type": t, "value": v})
    tensors = []
    for t in r.tensors:
        raw = bytes(np.asarray(t.data).view(np.uint8).tobytes())
        vals = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type).astype("<f4").tobytes()
        tensors.append({"name": t.name, "type": t.tensor_type.name,
                        "shape": [int(x) for x in t.shape], "offset": int(t.data_offset - r.data_offset),
                        "sha256_raw": hashlib.sha256(raw).hexdigest(),
                        "sha256_f32": hashlib.sha256(vals).hexdigest()})

    # Golden logits: float64 forward over the dequantized, un-permuted weights.
    m.load_hf_state_dict(golden_sd, path)
    ids = [hcfg["bos_token_id"]] + list(range(300, 340, 3)) + [c.mask_token_id] * 8 + [7, 11]
    with torch.no_grad():
        logits = m(torch.tensor(ids))[0].to(torch.float32)
    st.save_file({"logits": logits}, os.path.join(OUT, "golden.safetensors"))
    golden = {
        "file": NAME,
        "writer": "llama.cpp gguf-py GGUFWriter (" + os.path.basename(os.path.abspath(sys.argv[1])) + ")",
        "alignment": r.alignment,
        "data_offset": int(r.data_offset),
        "metadata": meta,
        "tensors": tensors,
        "ids": ids,
    }
    with open(os.path.join(OUT, "golden.json"), "w") as f:
        json.dump(golden, f, indent=1, ensure_ascii=False)
        f.write("\n")
    write_probe(gguf, Q)
    print(f"wrote {path} ({os.path.getsize(path)} bytes), golden.json, golden.safetensors")


def write_probe(gguf, Q):
    """quant_probe.gguf (see the docstring)."""
    # 64 blocks of random values; Q8_0 and Q4_0 rounding ties (d = 1); a zero block.
    rng = np.random.default_rng(SEED)
    x = (rng.standard_normal(64 * 32) * rng.uniform(0.01, 10, 64 * 32)).astype(np.float32)
    x[:32] = np.arange(-16, 16, dtype=np.float32) + 0.5  # d = 1: every product a rounding tie
    x[31] = 127
    x[32:64] = 0
    x[64:96] = np.arange(-8, 8, 0.5, dtype=np.float32) + 0.25
    x[64] = -8  # Q4_0: d = -8/-8 = 1, so x + 8.5 lands on .75 and .25
    x[96:128] = np.arange(32, dtype=np.float32) / 4 - 4
    x[96] = -8  # d = 1: x + 8.5 on .5 steps
    pw = gguf.GGUFWriter(os.path.join(OUT, "quant_probe.gguf"), "probe")
    pw.add_tensor("x", x, raw_dtype=Q.F32)
    pw.add_tensor("q", gguf.quants.quantize(x, Q.Q8_0), raw_dtype=Q.Q8_0)
    pw.add_tensor("q4", gguf.quants.quantize(x, Q.Q4_0), raw_dtype=Q.Q4_0)
    pw.write_header_to_file()
    pw.write_kv_data_to_file()
    pw.write_tensors_to_file()
    pw.close()
    print("wrote " + os.path.join(OUT, "quant_probe.gguf"))


if __name__ == "__main__":
    main()
