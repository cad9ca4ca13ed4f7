#!/usr/bin/env python3
"""Reads GGUF files that `dlmcache convert` wrote with llama.cpp's gguf-py and checks them
against what llama.cpp's converter would write for the same checkpoint.

    /usr/bin/python3 tools/ggufpy/check_convert.py GGUF_PY_DIR HF_DIR FILE.gguf...

(make ggufpy-check GGUF_PY=... runs it on the bundled model in F32, F16, BF16, Q8_0 and Q4_0.)

For each file, with gguf-py's GGUFReader:
  - every metadata key LLaDAModel writes is there with the value type gguf-py's add_*
    methods give it, and the values come from config.json (block count, widths, heads,
    RoPE base, RMS epsilon, vocabulary size, mask id, causal false, shift_logits false);
  - the tokenizer arrays equal LLaDAModel.get_vocab_base's for the tokenizer.json;
  - the tensors are the checkpoint's under llama.cpp's names, shapes reversed, 1-D and
    norm tensors F32, and each tensor's bytes equal gguf-py's own
    gguf.quants.quantize(permute(weight), type) bit for bit (F32, F16, BF16, Q8_0 and Q4_0;
    a Q4_0 file's output.weight is Q8_0).
Exits 1 on the first file with a difference, listing them.
"""
import json
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from pyllada import safetensors_io as st  # noqa: E402
from llada_gguf import gguf_name, to_gguf_layout, vocab  # noqa: E402


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    sys.path.insert(0, os.path.abspath(sys.argv[1]))
    import gguf  # noqa: E402
    from gguf import GGMLQuantizationType as Q, GGUFValueType as V

    hf_dir = sys.argv[2]
    with open(os.path.join(hf_dir, "config.json")) as f:
        hp = json.load(f)
    with open(os.path.join(hf_dir, "tokenizer.json")) as f:
        tj = json.load(f)
    sd = {k: v.numpy().astype(np.float32) for k, v in st.load_file(os.path.join(hf_dir, "model.safetensors")).items()}
    n_heads, n_kv = hp["n_heads"], hp.get("n_kv_heads") or hp["n_heads"]
    d = hp["d_model"]
    emb = hp.get("embedding_size") or hp["vocab_size"]
    tokens, toktypes, merges = vocab(gguf, tj, emb)

    want_kv = {
        "general.architecture": (V.STRING, "llada"),
        "general.type": (V.STRING, "model"),
        "llada.block_count": (V.UINT32, hp["n_layers"]),
        "llada.context_length": (V.UINT32, hp["max_sequence_length"]),
        "llada.embedding_length": (V.UINT32, d),
        "llada.feed_forward_length": (V.UINT32, hp["mlp_hidden_size"]),
        "llada.attention.head_count": (V.UINT32, n_heads),
        "llada.attention.head_count_kv": (V.UINT32, n_kv),
        "llada.rope.freq_base": (V.FLOAT32, float(np.float32(hp["rope_theta"]))),
        "llada.attention.layer_norm_rms_epsilon": (V.FLOAT32, float(np.float32(hp["rms_norm_eps"]))),
        "llada.vocab_size": (V.UINT32, hp["vocab_size"]),
        "llada.rope.dimension_count": (V.UINT32, d // n_heads),
        "llada.attention.causal": (V.BOOL, False),
        "diffusion.shift_logits": (V.BOOL, False),
        "tokenizer.ggml.mask_token_id": (V.UINT32, hp["mask_token_id"]),
        "general.quantization_version": (V.UINT32, gguf.GGML_QUANT_VERSION),
        "tokenizer.ggml.model": (V.STRING, "gpt2"),
        "tokenizer.ggml.pre": (V.STRING, "gpt-2"),
        "tokenizer.ggml.tokens": (V.ARRAY, tokens),
        "tokenizer.ggml.token_type": (V.ARRAY, toktypes),
        "tokenizer.ggml.merges": (V.ARRAY, merges),
        "tokenizer.ggml.bos_token_id": (V.UINT32, hp["bos_token_id"]),
        "tokenizer.ggml.eos_token_id": (V.UINT32, hp["eos_token_id"]),
        "tokenizer.ggml.padding_token_id": (V.UINT32, hp["pad_token_id"]),
        "tokenizer.ggml.add_bos_token": (V.BOOL, True),
    }
    file_types = {0: Q.F32, 1: Q.F16, 2: Q.Q4_0, 7: Q.Q8_0, 32: Q.BF16}
    failed = False
    for path in sys.argv[3:]:
        errs = []
        r = gguf.GGUFReader(path)
        fields = {k: f for k, f in r.fields.items() if not k.startswith("GGUF.")}
        for k, (vt, val) in want_kv.items():
            f = fields.get(k)
            if f is None:
                errs.append(f"missing key {k}")
                continue
            if f.types[0] != vt:
                errs.append(f"{k}: type {f.types[0].name}, want {vt.name}")
                continue
            got = f.contents()
            if isinstance(got, float):
                got = float(np.float32(got))
            if got != val:
                errs.append(f"{k}: {str(got)[:60]}, want {str(val)[:60]}")
        ft = fields["general.file_type"].contents()
        want_t = file_types.get(ft)
        if want_t is None:
            errs.append(f"general.file_type {ft} is not one dlmcache writes")
        names = {}
        for t in r.tensors:
            names[t.name] = t
        for hf, w in sorted(sd.items()):
            name = gguf_name(hf)
            t = names.pop(name, None)
            if t is None:
                errs.append(f"missing tensor {name}")
                continue
            if [int(x) for x in t.shape] != list(reversed(w.shape)):
                errs.append(f"{name}: shape {list(t.shape)}, want {list(reversed(w.shape))}")
                continue
            qt = want_t
            if w.ndim == 1 or name.endswith("_norm.weight"):
                qt = Q.F32
            elif qt in (Q.Q8_0, Q.Q4_0) and w.shape[-1] % 32 != 0:
                qt = Q.F16
            elif qt == Q.Q4_0 and name == "output.weight":
                qt = Q.Q8_0
            if t.tensor_type != qt:
                errs.append(f"{name}: {t.tensor_type.name}, want {qt.name}")
                continue
            want = gguf.quants.quantize(to_gguf_layout(hf, w, n_heads, n_kv), qt)
            if np.asarray(t.data).view(np.uint8).tobytes() != np.asarray(want).view(np.uint8).tobytes():
                errs.append(f"{name} ({qt.name}): bytes differ from gguf-py's quantize(permute(weight))")
        for name in names:
            errs.append(f"unexpected tensor {name}")
        if errs:
            failed = True
            print(f"{path}: {len(errs)} differences from llama.cpp's layout:")
            for e in errs:
                print("  " + e)
        else:
            print(f"{path}: OK ({want_t.name}; {len(r.tensors)} tensors and {len(want_kv)} metadata keys as llama.cpp's converter writes them, bytes identical to gguf-py's)")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
