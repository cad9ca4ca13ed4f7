"""What llama.cpp's convert_hf_to_gguf.py (LLaDAModel) does to a LLaDA checkpoint, in numpy,
shared by make_fixture.py and check_convert.py. Development tool only."""
import numpy as np

# gguf-py's tensor_mapping for LLaDA: Hugging Face block part -> llama.cpp name.
BLOCK = {"attn_norm": "attn_norm", "q_proj": "attn_q", "k_proj": "attn_k", "v_proj": "attn_v",
         "attn_out": "attn_output", "ff_norm": "ffn_norm", "ff_proj": "ffn_gate",
         "up_proj": "ffn_up", "ff_out": "ffn_down"}
TOP = {"model.transformer.wte.weight": "token_embd.weight",
       "model.transformer.ff_out.weight": "output.weight",
       "model.transformer.ln_f.weight": "output_norm.weight"}


def gguf_name(hf):
    if hf in TOP:
        return TOP[hf]
    parts = hf.split(".")  # model.transformer.blocks.N.part.weight
    return f"blk.{parts[3]}.{BLOCK[parts[4]]}.weight"


def permute(w, n_head, n_head_kv):
    """llama.cpp's LLaDAModel.permute, on a numpy array."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2)
            .reshape(w.shape))


def unpermute(w, n_head):
    """Inverse of permute."""
    return (w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:])
            .swapaxes(1, 2)
            .reshape(w.shape))


def to_gguf_layout(hf_name, a, n_heads, n_kv_heads):
    if hf_name.endswith("q_proj.weight"):
        return permute(a, n_heads, n_heads)
    if hf_name.endswith("k_proj.weight"):
        return permute(a, n_heads, n_kv_heads)
    return a


def vocab(gguf, tj, vocab_size):
    """LLaDAModel.get_vocab_base from a tokenizer.json: tokens, token types, merges."""
    rev = {i: t for t, i in tj["model"]["vocab"].items()}
    added = {a["id"]: a for a in tj["added_tokens"]}
    tokens, toktypes = [], []
    for i in range(vocab_size):
        if i in added:
            tokens.append(added[i]["content"])
            toktypes.append(gguf.TokenType.CONTROL if added[i]["special"] else gguf.TokenType.USER_DEFINED)
        elif i in rev:
            tokens.append(rev[i])
            toktypes.append(gguf.TokenType.NORMAL)
        else:
            tokens.append(f"[PAD{i}]")
            toktypes.append(gguf.TokenType.UNUSED)
    merges = [" ".join(mg) if isinstance(mg, list) else mg for mg in tj["model"]["merges"]]
    return tokens, [int(t) for t in toktypes], merges


def np_f32(x):
    return np.asarray(x, dtype=np.float32)
