#!/usr/bin/env python3
"""Runs a caching method's public reference implementation, its authors' own code, on the
bundled weights (models/llada-tiny) on CPU and records the generated tokens and forward
counts as a fixture for cache/authors_test.go.

    git clone https://github.com/ML-GSAI/LLaDA /tmp/LLaDA            # once, by hand
    git clone https://github.com/NVlabs/Fast-dLLM /tmp/Fast-dLLM
    git clone https://github.com/ZhanqiuHu/flash-dlm-experimental /tmp/flash-dlm
    git clone https://github.com/maomaocun/dLLM-cache /tmp/dLLM-cache
    go run tools/authors/prompts.go -limit 4 > /tmp/prompts.json   # 4 held-out samples a suite
    /usr/bin/python3 tools/authors/run.py llada --src /tmp/LLaDA --prompts /tmp/prompts.json \\
        --out cache/testdata/authors/llada.json
    /usr/bin/python3 tools/authors/run.py fastdllm-threshold --src /tmp/Fast-dLLM ...
    /usr/bin/python3 tools/authors/run.py fastdllm-dual --src /tmp/Fast-dLLM ...
    /usr/bin/python3 tools/authors/run.py freecache --src /tmp/flash-dlm ...
    /usr/bin/python3 tools/authors/run.py dllm-cache --src /tmp/dLLM-cache \\
        --llada-src /tmp/flash-dlm/src/model/llada ...

Nothing is fetched here and nothing of the authors' code is copied: --src is a checkout of
their repository, its file imported as it is. The parts of `transformers` they import at
module level (AutoModel, AutoTokenizer) are empty stand-ins (and torch.topk takes a
one-element tensor as k, as torch 2's does, for Debian's torch 1.13), and Fast-dLLM's own
`model.modeling_llada` too: their sampling functions need only a model callable returning
.logits (and, for the dual cache, past_key_values and replace_position), which tools/pyllada
(the bundled architecture in PyTorch, float64 here) provides.

FreeCache and dLLM-Cache live inside a model: FlashDLM's cache is in its own LLaDA's
attention (src/model/llada_v2/modeling_llada.py with block_utils.py), dLLM-Cache's in hooks
that replace the blocks' forward, attention and rotary embedding of LLaDA's model file. For
these the authors' model file itself runs, the bundled weights loaded into it (float64 where
their code does not cast to float32), with stand-ins for what it takes from `transformers`
(hf_stand_ins). dLLM-Cache's repository holds no plain LLaDA model file (its scripts load
the model card's remote code); --llada-src names one: the commands above use FlashDLM's
copy in src/model/llada, whose additions (an unused Attention class, and each attention
output kept for analysis inside the attention method that the hooks replace) do not touch
what runs.

Each method runs in its authors' default settings (the methods table below: LLaDA's
generate.py main(); Fast-dLLM's eval_gsm8k.sh, block 32, threshold 0.9; FlashDLM's LLaDA
evaluator call with use_block_caching; dLLM-Cache's LLaDA gsm8k script) with the bundled
model's answer length (128).
"""
import argparse
import contextlib
import datetime
import importlib.util
import json
import math
import os
import subprocess
import sys
import types

os.environ.setdefault("OMP_NUM_THREADS", "1")
import torch  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
from pyllada.model import from_pretrained, rope_cos_sin, apply_rope, attend  # noqa: E402
from pyllada import safetensors_io as st  # noqa: E402
from pyllada.report import write_json  # noqa: E402
import torch.nn.functional as F  # noqa: E402

# method -> the authors' repository, file, function and keyword arguments (their defaults).
METHODS = {
    "llada": dict(repo="https://github.com/ML-GSAI/LLaDA", file="generate.py", func="generate",
                  kw=dict(steps=128, gen_length=128, block_length=32, temperature=0.0, cfg_scale=0.0,
                          remasking="low_confidence"),
                  note="generate.py main(): steps 128, gen_length 128, block_length 32, low_confidence"),
    "fastdllm-threshold": dict(repo="https://github.com/NVlabs/Fast-dLLM", file="llada/generate.py", func="generate",
                               kw=dict(steps=4, gen_length=128, block_length=32, temperature=0.0,
                                       remasking="low_confidence", threshold=0.9),
                               note="llada/eval_gsm8k.sh: block_length 32, steps gen_length/block_length, threshold 0.9"),
    "fastdllm-dual": dict(repo="https://github.com/NVlabs/Fast-dLLM", file="llada/generate.py",
                          func="generate_with_dual_cache",
                          kw=dict(steps=4, gen_length=128, block_length=32, temperature=0.0,
                                  remasking="low_confidence", threshold=0.9),
                          note="llada/eval_gsm8k.sh: use_cache, dual_cache, block_length 32, threshold 0.9"),
    "freecache": dict(repo="https://github.com/ZhanqiuHu/flash-dlm-experimental", file="src/model/llada_v2/generate.py",
                      func="generate", model="flashdlm",
                      kw=dict(steps=128, gen_length=128, block_length=32, temperature=0.0, cfg_scale=0.0,
                              remasking="low_confidence", use_block_caching=True),
                      note="src/evaluator/llada_eval.py's call with use_block_caching; steps 128, gen_length 128, "
                           "block_length 32 (the file's example main)"),
    "freecache-oneblock": dict(repo="https://github.com/ZhanqiuHu/flash-dlm-experimental",
                               file="src/model/llada_v2/generate.py", func="generate", model="flashdlm",
                               kw=dict(steps=128, gen_length=128, block_length=128, temperature=0.0, cfg_scale=0.0,
                                       remasking="low_confidence", use_block_caching=True),
                               note="generate()'s own defaults (steps 128, gen_length 128, block_length 128: "
                                    "one block) with use_block_caching"),
    "dllm-cache": dict(repo="https://github.com/maomaocun/dLLM-cache", file="utils/generate_function.py",
                       func="generate", model="dllm_cache", call="keywords",
                       cache=dict(prompt_interval_steps=50, gen_interval_steps=7, transfer_ratio=0.25),
                       kw=dict(steps=128, gen_length=128, block_length=8, temperature=0.0, cfg_scale=0.0,
                               remasking="low_confidence"),
                       note="scripts/run_LLaDA_gsm8k_Instruct.sh: prompt_interval_steps 50, gen_interval_steps 7, "
                            "transfer_ratio 0.25, block_length 8, steps = gen_length"),
}


class Model:
    """The model callable the authors' sampling functions call: ids [1, n] -> .logits
    [1, n, V]; with use_cache the per-layer (k, v) [1, KH, n, hd] (after RoPE) as
    past_key_values; with past_key_values and replace_position (Fast-dLLM's dual cache) the
    rows of replace_position computed over the cached K/V of the others. It counts forwards,
    and the block forwards fed a block with no mask left (idle)."""

    def __init__(self, m):
        self.m, self.device, self.calls, self.idle = m, torch.device("cpu"), 0, 0
        self.mask = m.config.mask_token_id

    def __call__(self, x, attention_mask=None, past_key_values=None, use_cache=False, replace_position=None, **kw):
        self.calls += 1
        m, c = self.m, self.m.config
        if past_key_values is None:
            logits, st = m(x, return_states=True)
            pkv = None
            if use_cache:
                B, n = x.shape
                H, hd = c.n_kv_heads, c.head_dim
                pkv = [(k.view(B, n, H, hd).transpose(1, 2).clone(), v.view(B, n, H, hd).transpose(1, 2).clone())
                       for k, v in zip(st["k"], st["v"])]
            return types.SimpleNamespace(logits=logits, past_key_values=pkv)
        if replace_position is None:
            raise NotImplementedError("only the dual cache's replace_position is stood in for")
        pos = replace_position[0].nonzero(as_tuple=True)[0]
        if not bool((x == self.mask).any()):
            self.idle += 1  # a block forward with nothing left to decode
        B, n = x.shape
        H, KH, hd = c.n_heads, c.n_kv_heads, c.head_dim
        h = m.wte(x)
        cos, sin = rope_cos_sin(pos[None], hd, c.rope_theta, h.dtype)
        for blk, (K, V) in zip(m.blocks, past_key_values):
            a = blk.attn_norm(h)
            q = apply_rope(blk.q_proj(a).view(B, n, H, hd).transpose(1, 2), cos, sin)
            k = apply_rope(blk.k_proj(a).view(B, n, KH, hd).transpose(1, 2), cos, sin)
            v = blk.v_proj(a).view(B, n, KH, hd).transpose(1, 2)
            K[:, :, pos], V[:, :, pos] = k, v  # in place, as their attention does
            h = h + blk.attn_out(attend(q, K, V, None))
            f = blk.ff_norm(h)
            h = h + blk.ff_out(F.silu(blk.ff_proj(f)) * blk.up_proj(f))
        return types.SimpleNamespace(logits=m.head(h), past_key_values=past_key_values)


def stand_ins():
    """Empty modules for what the authors' files import at module level and never call."""
    tr = types.ModuleType("transformers")
    tr.AutoTokenizer = tr.AutoModel = object
    sys.modules["transformers"] = tr
    pkg = types.ModuleType("model")
    pkg.__path__ = []
    ml = types.ModuleType("model.modeling_llada")
    ml.LLaDAModelLM = object
    sys.modules["model"], sys.modules["model.modeling_llada"] = pkg, ml


def newer_torch():
    """torch.topk taking a one-element tensor as k, as torch 2 does (Fast-dLLM passes one);
    Debian's torch 1.13 wants an int."""
    topk = torch.topk

    def shim(input, k, *args, **kw):
        return topk(input, int(k), *args, **kw)
    torch.topk = shim


def hf_stand_ins():
    """What a LLaDA modeling file imports from `transformers` (a config holding its keyword
    arguments, an nn.Module holding the config, an output record, no-op registries), and
    what torch 1.13 lacks of torch 2 that it calls: F.scaled_dot_product_attention (here with
    no mask, not causal, no dropout) and torch.backends.cuda.enable_mem_efficient_sdp."""
    tr = sys.modules["transformers"]

    class PretrainedConfig:
        def __init__(self, **kw):
            self.__dict__.update(kw)
            self.use_return_dict = True

    class PreTrainedModel(torch.nn.Module):
        def __init__(self, config, *args, **kw):
            super().__init__()
            self.config = config

        @property
        def device(self):
            return next(self.parameters()).device

    registry = types.SimpleNamespace(register=lambda *args, **kw: None)
    tr.PretrainedConfig, tr.PreTrainedModel, tr.AutoConfig = PretrainedConfig, PreTrainedModel, registry
    subs = {n: types.ModuleType("transformers." + n) for n in ("modeling_outputs", "models", "models.auto", "cache_utils")}
    subs["modeling_outputs"].CausalLMOutputWithPast = lambda **kw: types.SimpleNamespace(**kw)
    subs["models.auto"].AutoModel = registry
    subs["cache_utils"].Cache = object
    for n, mod in subs.items():
        sys.modules["transformers." + n] = mod
    if not hasattr(F, "scaled_dot_product_attention"):
        def sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False):
            assert attn_mask is None and not is_causal and dropout_p == 0.0
            s = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
            return torch.matmul(torch.softmax(s, dim=-1), v)
        F.scaled_dot_product_attention = sdpa
    if not hasattr(torch.backends.cuda, "enable_mem_efficient_sdp"):
        torch.backends.cuda.enable_mem_efficient_sdp = lambda enabled: None


def package(name, path):
    """path as the package name, its __init__.py not run (it imports what these runs do not
    use)."""
    pkg = types.ModuleType(name)
    pkg.__path__ = [path]
    sys.modules[name] = pkg


def llada_lm(module, model_dir, cls):
    """A LLaDA modeling file's model class (module.cls) with the bundled weights, float64, and
    a count of its forwards (calls)."""
    with contextlib.redirect_stdout(sys.stderr):
        ml = importlib.import_module(module)
        with open(os.path.join(model_dir, "config.json")) as f:
            cfg = getattr(ml, cls[0])(**json.load(f))
        lm = getattr(ml, cls[1])(cfg)
    lm.load_state_dict(st.load_file(os.path.join(model_dir, "model.safetensors")))
    lm = lm.to(torch.float64).eval()
    lm.calls, lm.idle = 0, 0

    def count(*_):
        lm.calls += 1
    lm.register_forward_pre_hook(count)
    return lm


def flashdlm(a):
    """FlashDLM's own LLaDA, src/model/llada_v2/modeling_llada.py: its attention holds
    FreeCache's cache (block_utils.BlockCacheV2), which generate.py's generate_block_cached
    drives. Their files import each other as src.model.llada_v2.*: the checkout's
    directories are that package."""
    hf_stand_ins()
    for name, d in (("src", "src"), ("src.model", "src/model"), ("src.model.llada_v2", "src/model/llada_v2")):
        package(name, os.path.join(a.src, d))
    return llada_lm("src.model.llada_v2.modeling_llada", a.model, ("LLaDAV2Config", "LLaDAV2ModelLM"))


def dllm_cache(a):
    """LLaDA's model file (--llada-src: a directory holding modeling_llada.py and
    configuration_llada.py as the model card ships them; FlashDLM keeps a copy in
    src/model/llada) under dLLM-Cache's hooks, registered as their demo_LLaDA.py and
    eval_model/LLaDA.py do: dLLMCache.new_instance with the method's intervals and ratio,
    then register_cache_LLaDA(model, "model.transformer.blocks"), which replaces each block's
    forward, attention and rotary embedding with theirs."""
    if not a.llada_src:
        sys.exit("dllm-cache needs --llada-src, a directory with LLaDA's modeling_llada.py")
    hf_stand_ins()
    package("llada_model", os.path.abspath(a.llada_src))
    lm = llada_lm("llada_model.modeling_llada", a.model, ("LLaDAConfig", "LLaDAModelLM"))
    package("dllm_cache", os.path.join(a.src, "dllm_cache"))
    package("dllm_cache.hooks", os.path.join(a.src, "dllm_cache", "hooks"))
    cache = importlib.import_module("dllm_cache.cache")
    hook = importlib.import_module("dllm_cache.hooks.cache_hook_LLaDA")
    cache.dLLMCache.new_instance(**METHODS[a.method]["cache"])
    hook.register_cache_LLaDA(lm, "model.transformer.blocks")
    return lm


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def git(src, *args):
    try:
        return subprocess.run(["git", "-C", src, *args], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("method", choices=sorted(METHODS))
    ap.add_argument("--src", required=True, help="a checkout of the authors' repository")
    ap.add_argument("--commit", default="", help="the checkout's commit, where --src is no git work tree")
    ap.add_argument("--prompts", required=True, help="tools/authors/prompts.go's output")
    ap.add_argument("--llada-src", default="", help="dllm-cache: a directory with LLaDA's modeling_llada.py")
    ap.add_argument("--llada-repo", default="https://github.com/ZhanqiuHu/flash-dlm-experimental",
                    help="dllm-cache: the repository --llada-src is a checkout of")
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "llada-tiny"))
    ap.add_argument("--out", default="-")
    a = ap.parse_args()
    spec = METHODS[a.method]
    torch.set_num_threads(1)
    stand_ins()
    newer_torch()
    if "model" in spec:  # the authors' model file, their cache inside it
        authors = globals()[spec["model"]](a)
        mask, eos = authors.config.mask_token_id, authors.config.eos_token_id
    else:
        m = from_pretrained(a.model, dtype=torch.float64)
        mask, eos = m.config.mask_token_id, m.config.eos_token_id
    mod = load(os.path.join(a.src, spec["file"]), "authors_" + a.method.replace("-", "_"))
    fn = getattr(mod, spec["func"])
    cases = []
    for p in json.load(open(a.prompts)):
        if "model" in spec:
            model = authors
            model.calls = 0
        else:
            model = Model(m)
        prompt = torch.tensor([p["prompt_ids"]])
        with contextlib.redirect_stdout(sys.stderr):  # their progress lines
            if spec.get("call") == "keywords":  # dLLM-Cache's generate: the answer alone
                ans = fn(input_ids=prompt, attention_mask=torch.ones_like(prompt), model=model, mask_id=mask,
                         **spec["kw"])
                out = torch.cat([prompt, ans], dim=1)
            else:
                out = fn(model, prompt, mask_id=mask, **spec["kw"])
        x, nfe = (out if isinstance(out, tuple) else (out, None))
        cases.append({"suite": p["suite"], "id": p["id"], "prompt_ids": p["prompt_ids"], "prefix_len": p["prefix_len"],
                      "answer_ids": x[0, prompt.shape[1]:].tolist(), "nfe": model.calls, "nfe_idle": model.idle,
                      "nfe_reported": nfe if nfe is not None else model.calls})
        print(f"{p['id']}: {model.calls} forwards", file=sys.stderr)
    commit = a.commit or git(a.src, "rev-parse", "HEAD")
    res = {"method": a.method,
           "provenance": {"repository": spec["repo"], "commit": commit,
                          "commit_date": git(a.src, "log", "-1", "--format=%cI"),
                          "file": spec["file"], "function": spec["func"],
                          "run": datetime.date.today().isoformat(),
                          "settings_from": spec["note"]},
           "settings": {**spec["kw"], **spec.get("cache", {})}, "model": "models/llada-tiny", "mask_id": mask, "eos_id": eos,
           "reference_dtype": "float64", "cases": cases}
    if a.llada_src:
        res["provenance"]["model_file"] = {"repository": a.llada_repo,
                                           "path": git(a.llada_src, "rev-parse", "--show-prefix") + "modeling_llada.py",
                                           "commit": git(a.llada_src, "rev-parse", "HEAD")}
    if "model" in spec:
        res["reference_dtype"] = "float64 (their RMSNorm and rotary embedding compute in float32)"
    if write_json(res, a.out):
        print(f"{len(cases)} cases -> {a.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
