"""Checks of pyllada against an independent naive numpy forward and invariants.

    cd tools && /usr/bin/python3 -m unittest pyllada.test_pyllada -v
"""
import json
import os
import tempfile
import unittest

import numpy as np
import torch

from . import safetensors_io as st
from .model import LLaDA, LLaDAConfig, from_pretrained, save_pretrained
from .generate import generate, num_transfer_tokens

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TESTDATA = os.path.join(ROOT, "model", "testdata")


def _json(path):
    with open(path) as f:
        return json.load(f)


def naive_forward(sd, c, ids, pos, block=0):
    """Loop-level numpy LLaDA forward (float64), from REFERENCE.md, for cross-checking.
    block > 0: block-causal (query at position i sees key at j iff j // block <= i // block)."""
    W = {k: v.double().numpy() for k, v in sd.items()}
    p = "model.transformer."
    hd = c.d_model // c.n_heads
    x = W[p + "wte.weight"][ids]

    def rms(v, w):
        return v / np.sqrt((v * v).mean(-1, keepdims=True) + c.rms_norm_eps) * w

    def rope(v):  # v [n, hd]; pair (i, i+hd/2) rotated by pos*theta^(-2i/hd)
        out = v.copy()
        half = hd // 2
        for t in range(len(pos)):
            for i in range(half):
                a = pos[t] * c.rope_theta ** (-2.0 * i / hd)
                x1, x2 = v[t, i], v[t, i + half]
                out[t, i] = x1 * np.cos(a) - x2 * np.sin(a)
                out[t, i + half] = x2 * np.cos(a) + x1 * np.sin(a)
        return out
    for l in range(c.n_layers):
        b = p + f"blocks.{l}."
        a = rms(x, W[b + "attn_norm.weight"])
        q, k, v = a @ W[b + "q_proj.weight"].T, a @ W[b + "k_proj.weight"].T, a @ W[b + "v_proj.weight"].T
        o = np.zeros_like(q)
        g = c.n_heads // c.n_kv_heads
        for h in range(c.n_heads):
            kh = h // g
            qh = rope(q[:, h * hd:(h + 1) * hd])
            kk = rope(k[:, kh * hd:(kh + 1) * hd])
            s = qh @ kk.T / np.sqrt(hd)
            if block:
                for i in range(len(pos)):
                    for j in range(len(pos)):
                        if pos[j] // block > pos[i] // block:
                            s[i, j] = -np.inf
            s = np.exp(s - s.max(-1, keepdims=True))
            s /= s.sum(-1, keepdims=True)
            o[:, h * hd:(h + 1) * hd] = s @ v[:, kh * hd:(kh + 1) * hd]
        x = x + o @ W[b + "attn_out.weight"].T
        m = rms(x, W[b + "ff_norm.weight"])
        gt = m @ W[b + "ff_proj.weight"].T
        x = x + ((gt / (1 + np.exp(-gt))) * (m @ W[b + "up_proj.weight"].T)) @ W[b + "ff_out.weight"].T
    return rms(x, W[p + "ln_f.weight"]) @ W[p + "ff_out.weight"].T


class TestPyLLaDA(unittest.TestCase):
    def test_golden_against_naive(self):
        for name in ("tiny-f32", "tiny-bf16"):
            d = os.path.join(TESTDATA, name)
            g = _json(os.path.join(d, "golden.json"))
            gt = st.load_file(os.path.join(d, "golden.safetensors"))
            sd = st.load_file(os.path.join(d, "model.safetensors"))
            m = from_pretrained(d)
            for ids, pos, key in ((g["input_ids"], g["position_ids"], "logits"),
                                  (g["pos2"]["input_ids"], g["pos2"]["position_ids"], "pos2.logits")):
                ref = naive_forward(sd, m.config, np.array(ids), np.array(pos))
                got = gt[key].double().numpy()
                rel = np.abs(ref - got).max() / np.abs(ref).max()
                self.assertLess(rel, 1e-6, f"{name} {key}")
                with torch.no_grad():
                    t32 = m(torch.tensor([ids]), torch.tensor(pos))[0].double().numpy()
                self.assertLess(np.abs(t32 - ref).max() / np.abs(ref).max(), 1e-5)

    def test_golden_generation_reproduces(self):
        for name in ("tiny-f32", "tiny-bf16"):
            d = os.path.join(TESTDATA, name)
            g = _json(os.path.join(d, "golden.json"))
            m = from_pretrained(d)
            for case in g["generate"]:
                out = generate(m, torch.tensor(case["prompt_ids"]), case["gen_length"], case["steps"],
                               case["block_length"])
                self.assertEqual(out[0].tolist(), case["output_ids"], f"{name} {case['name']}")

    def test_rope_relative(self):
        torch.manual_seed(0)
        m = LLaDA(LLaDAConfig()).double().eval()
        ids = torch.randint(0, 300, (1, 20))
        pos = torch.arange(20) * 3
        with torch.no_grad():
            a = m(ids, pos)
            b = m(ids, pos + 1000)
            c = m(ids, torch.arange(20))
        self.assertLess(float((a - b).abs().max()), 1e-9)
        self.assertGreater(float((a - c).abs().max()), 1e-3)

    def test_padding_keys_do_not_leak(self):
        torch.manual_seed(1)
        c = LLaDAConfig(n_kv_heads=2)
        m = LLaDA(c).double().eval()
        ids = torch.randint(0, 300, (1, 10))
        padded = torch.cat([ids, torch.full((1, 5), 7)], 1)
        valid = torch.tensor([[True] * 10 + [False] * 5])
        with torch.no_grad():
            a = m(ids)
            b = m(padded, key_valid=valid)
            sd = m.hf_state_dict()
        self.assertLess(float((a - b[:, :10]).abs().max()), 1e-10)
        ref = naive_forward(sd, c, ids[0].numpy(), np.arange(10))
        self.assertLess(np.abs(ref - a[0].numpy()).max(), 1e-4)  # GQA path vs naive (f32 weights)

    def test_bf16_rounding(self):
        a = np.array([1.0, 1 + 2 ** -8, 1 + 3 * 2 ** -8, -2.5, 3.0e38], dtype=np.float32)
        self.assertEqual(st.f32_to_bf16_bits(a).tolist(), [0x3F80, 0x3F80, 0x3F82, 0xC020, 0x7F62])

    def test_safetensors_roundtrip(self):
        torch.manual_seed(2)
        m = LLaDA(LLaDAConfig()).eval()
        with tempfile.TemporaryDirectory() as d:
            save_pretrained(m, d, dtype="F32")
            m2 = from_pretrained(d)
            for (k, v), (k2, v2) in zip(m.hf_state_dict().items(), m2.hf_state_dict().items()):
                self.assertEqual(k, k2)
                self.assertTrue(torch.equal(v, v2), k)
            cfg = _json(os.path.join(d, "config.json"))
            self.assertEqual(cfg["model_type"], "llada")
            self.assertFalse(cfg["weight_tying"])

    def test_num_transfer_tokens(self):
        self.assertEqual(num_transfer_tokens(10, 4), [3, 3, 2, 2])
        self.assertEqual(num_transfer_tokens(8, 4), [2, 2, 2, 2])
        self.assertEqual(num_transfer_tokens(3, 4), [1, 1, 1, 0])



class TestGenerateBatch(unittest.TestCase):
    def test_batch_equals_single(self):
        from .generate import generate_batch
        m = from_pretrained(os.path.join(TESTDATA, "tiny-f32"))
        prompts = [[256, 259, 117, 260, 10, 10, 72, 105], [256, 72, 105, 33, 261], list(range(60, 80))]
        for G, S, Bl in ((16, 8, 8), (12, 6, 12)):
            got = generate_batch(m, prompts, G, S, Bl)
            for p, g in zip(prompts, got):
                want = generate(m, torch.tensor(p), G, S, Bl)[0, len(p):].tolist()
                self.assertEqual(g, want)


class TestBlockCausal(unittest.TestCase):
    """Block diffusion: bidirectional inside a block, causal between blocks, blocks from position 0."""

    def model(self, bs=4, seed=3):
        torch.manual_seed(seed)
        c = LLaDAConfig(n_kv_heads=2, block_causal=True, block_size=bs)
        return LLaDA(c).double().eval(), c

    def test_mask_brute_force(self):
        from .model import block_causal_mask
        for bs in (1, 3, 4, 8):
            pos = torch.tensor([[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10], [5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]])
            got = block_causal_mask(pos, bs)
            for r in range(2):
                for i in range(11):
                    for j in range(11):
                        want = (int(pos[r, j]) // bs) <= (int(pos[r, i]) // bs)
                        self.assertEqual(bool(got[r, i, j]), want, (bs, r, i, j))

    def test_against_naive(self):
        m, c = self.model(bs=4)
        ids = torch.randint(0, 300, (1, 11))  # two full blocks and a partial one
        with torch.no_grad():
            got = m(ids)[0].numpy()
        ref = naive_forward(m.hf_state_dict(), c, ids[0].numpy(), np.arange(11), block=4)
        self.assertLess(np.abs(ref - got).max(), 1e-4)
        bid = naive_forward(m.hf_state_dict(), c, ids[0].numpy(), np.arange(11))
        self.assertGreater(np.abs(bid - got).max(), 1e-3)  # the mask matters

    def test_later_blocks_do_not_change_earlier_logits(self):
        m, _ = self.model(bs=4)
        ids = torch.randint(0, 300, (1, 14))
        alt = ids.clone()
        alt[0, 8:] = torch.randint(0, 300, (6,))
        alt[0, 9] = (int(ids[0, 9]) + 1) % 300
        with torch.no_grad():
            a, b = m(ids)[0], m(alt)[0]
            cut = m(ids[:, :8])[0]
        self.assertEqual(float((a[:8] - b[:8]).abs().max()), 0.0)
        self.assertLess(float((a[:8] - cut).abs().max()), 1e-12)
        self.assertGreater(float((a[8:] - b[8:]).abs().max()), 1e-6)  # inside a block: bidirectional
        alt2 = ids.clone()
        alt2[0, 5] = (int(ids[0, 5]) + 1) % 300
        with torch.no_grad():
            d = m(alt2)[0]
        self.assertGreater(float((a[4] - d[4]).abs().max()), 1e-6)  # position 4 sees 5 (same block)

    def test_block_golden(self):
        """model/testdata/tiny-block (make_block_golden.py) against the naive block-causal forward, and
        its decoding cases reproduce."""
        from .generate import generate_block_batch
        d = os.path.join(TESTDATA, "tiny-block")
        g = _json(os.path.join(d, "golden.json"))
        gt = st.load_file(os.path.join(d, "golden.safetensors"))
        sd = st.load_file(os.path.join(d, "model.safetensors"))
        m = from_pretrained(d)
        self.assertTrue(m.config.block_causal)
        ids, pos = np.array(g["input_ids"]), np.array(g["position_ids"])
        bs = g["config"]["block_size"]
        for key, n, block in (("logits", len(ids), bs), ("cut29.logits", 29, bs), ("bidir.logits", len(ids), 0)):
            ref = naive_forward(sd, m.config, ids[:n], pos[:n], block=block)
            self.assertLess(np.abs(ref - gt[key].double().numpy()).max() / np.abs(ref).max(), 1e-6, key)
        for case in g["generate"]:
            kw = {"threshold": case["threshold"]} if case["decoding"] == "threshold" else {"steps": case["steps"]}
            out = generate_block_batch(m, [case["prompt_ids"]], case["gen_length"], decoding=case["decoding"], **kw)
            self.assertEqual(out[0], case["answer_ids"], case["name"])

    def test_config_keys(self):
        m, _ = self.model(bs=8)
        with tempfile.TemporaryDirectory() as d:
            save_pretrained(m.float(), d)
            cfg = _json(os.path.join(d, "config.json"))
            self.assertEqual((cfg["block_causal"], cfg["block_size"], cfg["shift_logits"], cfg["model_type"]),
                             (True, 8, False, "llada"))
            self.assertTrue(from_pretrained(d).config.block_causal)
            save_pretrained(LLaDA(LLaDAConfig()), d)
            cfg = _json(os.path.join(d, "config.json"))
            self.assertNotIn("block_causal", cfg)  # bidirectional configs unchanged
            self.assertFalse(from_pretrained(d).config.block_causal)

    def test_block_decoding(self):
        from .generate import generate_block_batch
        m, c = self.model(bs=4, seed=5)
        m = m.float()
        prompts = [[1, 2, 3, 4, 5, 6], [7, 8, 9], list(range(20, 33))]
        for dec, kw in (("threshold", {"threshold": 0.02}), ("schedule", {"steps": 6})):
            got = generate_block_batch(m, prompts, 12, decoding=dec, **kw)
            for p, g in zip(prompts, got):
                trace = []
                one = generate_block_batch(m, [p], 12, decoding=dec, trace=trace, **kw)[0]
                self.assertEqual(g, one)
                self.assertEqual(len(g), 12)
                # feeds only up to the current block's end, commits inside the current block only
                for t in trace:
                    lo, hi = max(len(p), t["block"] * 4), min(len(p) + 12, (t["block"] + 1) * 4)
                    self.assertEqual(t["n"], hi)
                    self.assertTrue(all(lo <= q < hi for q in t["committed"]), t)
                    self.assertGreaterEqual(len(t["committed"]), 1)
                blocks = [t["block"] for t in trace]
                self.assertEqual(blocks, sorted(blocks))
                if dec == "schedule":  # 2 steps per block of 4: at most 2 forwards a block
                    for b in set(blocks):
                        self.assertLessEqual(blocks.count(b), 2)

    def test_block_decoding_matches_full_canvas(self):
        """Brute force: decode feeding the whole canvas every step; same answers (later blocks cannot
        reach the current one), and the EOS stop only fills what the model would not change."""
        from .generate import generate_block_batch
        m, c = self.model(bs=4, seed=7)
        m = m.float()
        p, G, bs = [11, 12, 13, 14, 15], 12, 4
        x = torch.tensor(p + [c.mask_token_id] * G)
        for blk in range(len(p) // bs, (len(p) + G - 1) // bs + 1):
            lo, hi = max(len(p), blk * bs), min(len(p) + G, (blk + 1) * bs)
            while bool((x[lo:hi] == c.mask_token_id).any()):
                with torch.no_grad():
                    lg = m(x[None])[0, lo:hi]
                x0 = lg.argmax(-1)
                conf = torch.softmax(lg.double(), -1).gather(-1, x0[:, None]).squeeze(-1)
                conf[x[lo:hi] != c.mask_token_id] = -np.inf
                sel = torch.nonzero(conf >= 0.3).flatten()
                if sel.numel() == 0:
                    sel = conf.argmax()[None]
                x[lo + sel] = x0[sel]
        got = generate_block_batch(m, [p], G, decoding="threshold", threshold=0.3, eos_id=-1)[0]
        self.assertEqual(got, x[len(p):].tolist())


if __name__ == "__main__":
    unittest.main()
