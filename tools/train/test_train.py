"""End-to-end check of train.py on a tiny synthetic corpus (about 30 s on one core).

    /usr/bin/python3 tools/train/test_train.py
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import train as T  # noqa: E402


def tiny_run(d, corpus):
    """train.py arguments of a 2-layer run on a make_synth corpus, working in d."""
    return ["--corpus", corpus, "--work", os.path.join(d, "work"), "--out", os.path.join(d, "out"),
            "--resume", "--n-layers", "2", "--d-model", "32", "--n-heads", "2", "--mlp-hidden", "64",
            "--batch-tokens", "1024", "--log-every", "2", "--warmup", "2",
            "--recall-frac", "0"]  # the synthetic corpus has no tokenizer.json for recall.py


def block_run(d, corpus):
    """train.py arguments of a block-causal run (blocks of 4) on corpus from the export of a
    tiny_run in d, working in d/wb, exporting to d/ob."""
    return ["--corpus", corpus, "--work", os.path.join(d, "wb"), "--out", os.path.join(d, "ob"),
            "--resume", "--init-from", os.path.join(d, "out"), "--block-causal", "--block-size", "4",
            "--batch-tokens", "1024", "--log-every", "2", "--warmup", "2", "--recall-frac", "0",
            "--eval-every", "4", "--eval-per-suite", "2", "--canvas", "12,16"]


def make_synth(out, train, ev, quiet=False):
    """A make_synth corpus of train training and ev eval samples in out (its output captured
    when quiet)."""
    subprocess.run([sys.executable, os.path.join(HERE, "make_synth.py"), "--out", out,
                    "--train", str(train), "--eval", str(ev)], check=True, capture_output=quiet)


def synth_corpus(d, train, ev, quiet=False):
    """make_synth's corpus in d/corpus (make_synth's arguments) -> its path."""
    corpus = os.path.join(d, "corpus")
    make_synth(corpus, train, ev, quiet)
    return corpus


def run_log(d, work="work"):
    """The records of the run log d/work/log.jsonl."""
    with open(os.path.join(d, work, "log.jsonl")) as f:
        return [json.loads(l) for l in f]


def question(g, p):
    """The user turn of a RecallGen prompt: question words and keys."""
    return p[p.index(g.instr[1]) - 1 + len(g.instr):-len(g.tail)]


class TestTrain(unittest.TestCase):
    def test_train_export_resume(self):
        with tempfile.TemporaryDirectory() as d:
            corpus = synth_corpus(d, 300, 30)
            base = tiny_run(d, corpus) + ["--eval-every", "4", "--eval-per-suite", "3"]
            T.main(base + ["--max-steps", "6"])
            st = json.load(open(os.path.join(d, "out", "train_state.json")))
            self.assertIn(st["step"], (4, 6))
            cfg = json.load(open(os.path.join(d, "out", "config.json")))
            self.assertEqual((cfg["vocab_size"], cfg["embedding_size"], cfg["mask_token_id"]), (262, 320, 258))
            T.main(base + ["--max-steps", "8"])  # resumes from ckpt.pt
            logs = run_log(d)
            starts = [r for r in logs if r["type"] == "start"]
            self.assertEqual([s["step"] for s in starts], [0, 6])
            os.remove(os.path.join(d, "work", "ckpt.pt"))
            T.main(base + ["--max-steps", "9"])  # resumes from the export
            logs = run_log(d)
            self.assertEqual(logs[-1]["type"], "stop")
            self.assertEqual([r for r in logs if r["type"] == "start"][-1]["resumed_from"], os.path.join(d, "out"))

    def test_batcher_curriculum(self):
        with tempfile.TemporaryDirectory() as d:
            make_synth(d, 500, 10)
            c = T.Corpus(os.path.join(d, "train.jsonl"), 12, 257)
            a = T.parse_args(["--batch-tokens", "2000", "--curriculum", "linear", "--curriculum-start", "0.3",
                              "--curriculum-steps", "100"])
            import numpy as np
            b = T.Batcher(c, a, np.random.RandomState(0))
            self.assertLess(b.limit(0), b.limit(100))
            for step in (0, 50, 100):
                for _ in range(20):
                    idx = b.batch(step)
                    L = c.plen[idx] + 12
                    self.assertLessEqual(int(L.max()), b.limit(step))
                    self.assertLessEqual(len(idx) * int(L.max()), 1.25 * 2000)  # window neighbours may be a bit longer than the anchor
                    ids, valid, ans = b.tensors(idx)
                    self.assertEqual(int(valid.sum()), int(L.sum()))

    def test_suite_weights(self):
        import numpy as np
        with tempfile.TemporaryDirectory() as d:
            make_synth(d, 500, 10)
            c = T.Corpus(os.path.join(d, "train.jsonl"), 12, 257)
            self.assertGreaterEqual(len(c.suites), 2)
            first = c.suites[0]

            def share(argv):
                a = T.parse_args(["--batch-tokens", "2000", "--curriculum", "linear", "--curriculum-start", "1"] + argv)
                b = T.Batcher(c, a, np.random.RandomState(0))
                # batches are windows of the length-sorted corpus around a
                # weighted anchor, so the anchor's suite is diluted by its
                # neighbours: the share rises, by less than the weight.
                return float(np.mean([np.mean(c.suite[b.batch(0)] == 0) for _ in range(300)]))

            a = T.parse_args(["--suite-weights", f"{first}=4, other=0.5"])
            self.assertEqual((T.suite_weight(a, first), T.suite_weight(a, "other"), T.suite_weight(a, "x")), (4.0, 0.5, 1.0))
            balanced, weighted = share([]), share(["--suite-weights", f"{first}=4"])
            self.assertGreater(weighted, balanced + 0.05)
            # --suite-mix exact: the weights are the batches' composition (first=4 of 4 + the
            # others' 1 each), within sampling noise, not diluted by length neighbours
            k = len(c.suites)
            exact = share(["--suite-weights", f"{first}=4", "--suite-mix", "exact"])
            self.assertAlmostEqual(exact, 4 / (4 + (k - 1)), delta=0.03)
            self.assertAlmostEqual(share(["--suite-mix", "exact"]), 1 / k, delta=0.03)
            self.assertGreater(exact, weighted + 0.05)
            a = T.parse_args(["--batch-tokens", "2000", "--curriculum", "linear", "--curriculum-start", "0.3",
                              "--curriculum-steps", "100", "--suite-weights", f"{first}=4", "--suite-mix", "exact"])
            b = T.Batcher(c, a, np.random.RandomState(1))
            for _ in range(50):  # the length curriculum still holds, and no sample twice in a batch
                idx = b.batch(0)
                self.assertLessEqual(int((c.plen[idx] + 12).max()), b.limit(0))
                self.assertEqual(len(set(idx.tolist())), len(idx))
            with self.assertRaises(SystemExit):
                T.check_suite_weights(T.parse_args(["--suite-weights", "nosuch=2"]), c.suites)

    def test_loss_options(self):
        import numpy as np
        import torch
        from pyllada.model import LLaDA, LLaDAConfig
        cfg = LLaDAConfig(d_model=32, n_layers=2, n_heads=2, n_kv_heads=2, mlp_hidden_size=64, vocab_size=64,
                          embedding_size=64, mask_token_id=63, eos_token_id=62, pad_token_id=62)
        torch.manual_seed(0)
        m = LLaDA(cfg)
        B, P, G = 6, 10, 4
        ids = torch.randint(0, 60, (B, P + G))
        valid = torch.ones(B, P + G, dtype=torch.bool)
        ans = torch.arange(P, P + G)[None].expand(B, G)
        alen = np.full(B, 2)
        suite = np.array([0, 1, 0, 1, 0, 1])
        base = T.parse_args([])
        l0, s0 = T.loss_on(m, ids, valid, ans, base, torch.Generator().manual_seed(1), 63, alen, G, suite, 2)
        self.assertEqual(s0["n_prompt"], 0)
        self.assertEqual(sum(s0["suite_n"]), s0["n_content"])
        self.assertAlmostEqual(sum(s0["suite_ce"]), s0["ce_content"], places=4)
        # every sample a pretraining sample: prompt tokens (never BOS, never past P) get masked and scored
        pre = T.parse_args(["--pretrain-frac", "1.0"])
        l1, s1 = T.loss_on(m, ids, valid, ans, pre, torch.Generator().manual_seed(1), 63, alen, G, suite, 2)
        self.assertGreater(s1["n_prompt"], 0)
        self.assertLessEqual(s1["n_prompt"], B * (P - 1))
        self.assertGreater(float(l1), 0.0)
        l1.backward()
        # stratified mask ratios: one t in each of the B strata
        strat = T.parse_args(["--stratified-t", "--mask-eps", "0"])
        t = T.mask_ratios(40, strat, torch.Generator().manual_seed(2))
        self.assertEqual(sorted((t * 40).floor().long().tolist()), list(range(40)))
        plain = T.parse_args(["--no-stratified-t", "--mask-eps", "0"])
        t = T.mask_ratios(40, plain, torch.Generator().manual_seed(2))  # plain draws: some strata empty
        self.assertLess(len(set((t * 40).floor().long().tolist())), 40)
        T.loss_on(m, ids, valid, ans, strat, torch.Generator().manual_seed(1), 63, alen, G)
        # --mask-count: sample i of a stratified batch of G masks exactly one l in 1..G slots
        cnt = T.parse_args(["--mask-count"])
        ids16 = torch.randint(0, 60, (G, P + G))
        ans16 = torch.arange(P, P + G)[None].expand(G, G)
        l2, s2 = T.loss_on(m, ids16, torch.ones(G, P + G, dtype=torch.bool), ans16, cnt,
                           torch.Generator().manual_seed(4), 63, np.full(G, 2), G)
        self.assertEqual(s2["n_content"] + s2["n_pad"], G * (G + 1) // 2)
        self.assertTrue(torch.isfinite(l2))

    def test_adaptive_curriculum(self):
        with tempfile.TemporaryDirectory() as d:
            make_synth(d, 500, 10)
            c = T.Corpus(os.path.join(d, "train.jsonl"), 12, 257)
            import numpy as np
            a = T.parse_args(["--curriculum", "adaptive", "--curriculum-start", "0.1"])
            b = T.Batcher(c, a, np.random.RandomState(0))
            lim = b.limit(0)
            self.assertEqual(b.limit(10_000), lim)  # the step alone does not lengthen prompts
            b.q = 0.6
            self.assertGreater(b.limit(0), lim)
            # a run whose content CE is below --advance-ce moves the quantile, and resume keeps it
            corpus = synth_corpus(d, 300, 30)
            args = tiny_run(d, corpus) + ["--eval-every", "100", "--curriculum", "adaptive",
                                          "--curriculum-start", "0.1", "--advance-ce", "100", "--advance-by", "0.2"]
            T.main(args + ["--max-steps", "4"])
            T.main(args + ["--max-steps", "6"])
            logs = run_log(d)
            qs = [r["q"] for r in logs if r["type"] == "curriculum"]
            self.assertEqual(len(qs), 3)
            for want, got in zip([0.3, 0.5, 0.7], qs):
                self.assertAlmostEqual(got, want)

    def test_below(self):
        for ce, n, thr, want in [(0.0, 0, 1.0, False),  # no real-suite step in the interval: no advance
                                 (9.0, 10, 1.0, True), (10.0, 10, 1.0, False), (12.0, 10, 1.0, False)]:
            self.assertEqual(T.below(ce, n, thr), want, (ce, n, thr))

    def test_recall_fraction(self):
        a = T.parse_args(["--corpus", "x"])
        self.assertEqual([T.recall_fraction(a, lv) for lv in (0, 6, 7, 11)], [0.9, 0.9, 0.25, 0.25])
        self.assertEqual(a.recall_max_level, 7)
        a = T.parse_args(["--corpus", "x", "--recall-frac", "0"])
        self.assertEqual([T.recall_fraction(a, lv) for lv in (0, 8)], [0.0, 0.0])

    def test_copy_gen(self):
        """CopyGen: the answer is the span the prompt holds (contiguously, before "##"), the
        prompt starts with BOS; batches stay within the token budget; --copy-frac needs AR."""
        import numpy as np
        from recall import CopyGen, RecallGen
        tok = os.path.join(HERE, "..", "..", "models", "llada-tiny", "tokenizer.json")
        r = RecallGen(tok, 16, 2043)
        g = CopyGen(r.first, r.ans, r.head[0])
        rng = np.random.RandomState(1)
        for _ in range(50):
            p, a = g.sample(rng)
            self.assertTrue(4 <= len(a) <= 24)
            self.assertEqual((p[0], p[-1]), (2042, g.ans))
            body = p[1:-1]
            self.assertTrue(any(body[i:i + len(a)] == a for i in range(len(body) - len(a) + 1)))
        ps, ans = g.batch(rng, 1024, 64)
        self.assertGreater(len(ps), 1)
        self.assertLessEqual(len(ps) * max(len(x) + len(y) + 1 for x, y in zip(ps, ans)), 1024)
        with self.assertRaises(SystemExit):
            T.main(["--copy-frac", "0.2"])

    def test_recall_gen(self):
        import numpy as np
        from recall import RecallGen
        tok = os.path.join(HERE, "..", "..", "models", "llada-tiny", "tokenizer.json")
        g = RecallGen(tok, 16, 2043)
        inv = {i: s for s, i in g.vocab.items()}
        rng = np.random.RandomState(3)
        for level in range(RecallGen.MAX_LEVEL + 1):
            lo, hi, pieces = g.shape(level)
            framed = g.framed(level)
            head, tail = (g.head, g.tail) if framed else (g.head[:1], g.tail[:1])
            for _ in range(20):
                p, a = g.sample(rng, level)
                self.assertEqual(p[:len(head)], head)
                self.assertEqual(p[-len(tail):], tail)
                self.assertLessEqual(len(a), g.slots(level))
                if framed:
                    body = p[len(head):p.index(g.instr[1]) - 1]  # the table: "* key sep value\n" rows
                    q = question(g, p)
                    key = q[len(next(x for x in g.q if q[:len(x)] == x)):]
                else:  # bare: "* key sep value\n" rows, then the key and "?"
                    last = len(p) - 1 - p[::-1].index(g.nl)
                    body, key = p[len(head):last + 1], p[last + 1:-len(tail)]
                rows, cur = [], []
                for t in body:
                    if t == g.nl:
                        rows.append(cur)
                        cur = []
                    else:
                        cur.append(t)
                self.assertTrue(lo <= len(rows) <= hi, (level, len(rows)))
                value = a[1:-1]
                self.assertEqual((a[0], a[-1]), (g.ans, 2043))
                self.assertTrue(1 <= len(key) <= pieces and 1 <= len(value) <= pieces)
                self.assertTrue(key[0] in g.pool(level)[0] and value[0] in g.pool(level)[0])
                hits = [r for r in rows if any(r == [g.star, *key, *sep, *value] for sep in g.seps)]
                self.assertEqual(len(hits), 1, (rows, key, value))
                seps = [t for t in rows[0] if [t] in g.seps]
                self.assertEqual(len(seps), 1)
                keys = {tuple(r[1:r.index(seps[0])]) for r in rows}
                self.assertEqual(len(keys), len(rows))  # keys distinct
        self.assertEqual((g.slots(0), g.slots(RecallGen.MAX_LEVEL)), (4, 16))
        for _ in range(50):  # several keys at once: the answer lists their values in the asked order
            p, a = g.sample(rng, 7, queries=3)
            self.assertLessEqual(len(a), 16)
            q = question(g, p)
            q = q[len(next(x for x in g.q if q[:len(x)] == x)):]
            self.assertLessEqual(q.count(g.and_[0]), 1)
        # --recall-numbers 1: capital keys, each value one number token.
        gn = RecallGen(tok, 16, 2043, numbers=1.0)
        nums = set(int(x) for x in gn.nums)
        self.assertEqual(len(nums), 49)
        for _ in range(20):
            p, a = gn.sample(rng, 7)
            self.assertEqual(len(a), 3)
            self.assertIn(a[1], nums)
            self.assertIn(a[1], p)
            key = question(gn, p)[-1]
            self.assertIn(key, set(int(x) for x in gn.caps))
            self.assertEqual(p[p.index(key) + 2], a[1])  # "* K = 17": the value two after the key
        # --recall-sums 1: bare worked sums whose result is right.
        gs = RecallGen(tok, 16, 2043, sums=1.0)
        for _ in range(20):
            p, a = gs.sample(rng, 7)
            text = "".join(inv[t] for t in p[1:] + a[:1]).replace("Ġ", " ")
            m = re.fullmatch(r"## (\d+) ([+-]) (\d+) = (\d+)", text)
            self.assertIsNotNone(m, text)
            v, op, k, r = int(m[1]), m[2], int(m[3]), int(m[4])
            self.assertEqual(r, v + k if op == "+" else v - k)
            self.assertEqual(a[-1], 2043)
        for level in (0, 3):  # bare (4 answer slots) and framed (gen_length slots)
            G = g.slots(level)
            prompts, answers = g.batch(rng, level, 2048, 128)
            ids, valid, ans_pos = T.pack(prompts, answers, G, 2043)
            self.assertLessEqual(ids.shape[0] * ids.shape[1], 2048)
            self.assertEqual(int(valid.sum()), int((ans_pos[:, -1] + 1).sum()))
            for r, (p, a) in enumerate(zip(prompts, answers)):  # answer, then EOS padding to the slots
                self.assertEqual(ids[r, len(p):len(p) + G].tolist(), a + [2043] * (G - len(a)))

    def test_semi_ar_mask(self):
        import torch
        g = torch.Generator().manual_seed(3)
        B, G = 64, 64
        p = torch.full((B,), 0.5)
        m0 = torch.zeros(B, G, dtype=torch.bool)
        m, ps = T.semi_ar_mask(m0.clone(), p, G, [16, 32], 1.0, g)
        for j in range(B):
            masked = m[j].nonzero().flatten().tolist()
            self.assertTrue(masked, "every row keeps a masked slot")
            # slots after the current block are all masked and weigh 1; slots before it are clean
            first = masked[0]
            ok = False
            for bl in (16, 32):
                c = first // bl
                later = list(range((c + 1) * bl, G))
                if set(later) <= set(masked) and all(s >= c * bl for s in masked) and \
                        all(float(ps[j, s]) == 1.0 for s in later) and \
                        all(float(ps[j, s]) == 0.5 for s in range(c * bl, (c + 1) * bl)):
                    ok = True
            self.assertTrue(ok, f"row {j}: {masked}")
        # frac 0 leaves the mask alone, and so does a canvas no block length divides
        m2, _ = T.semi_ar_mask(m0.clone(), p, G, [16, 32], 0.0, g)
        self.assertFalse(bool(m2.any()))
        m3, _ = T.semi_ar_mask(m0[:, :24].clone(), p, 24, [16], 1.0, g)
        self.assertFalse(bool(m3.any()))

    def test_block_targets_and_loss(self):
        """Block-diffusion states: one answer block per sample (absolute blocks from position 0),
        earlier answer slots clean, nothing after the block fed, the block's first slots holding
        the prompt's tail never masked; content blocks drawn more often than EOS-only ones."""
        import numpy as np
        import torch
        from pyllada.model import LLaDA, LLaDAConfig
        bs, G = 4, 12
        prompts = [list(range(1, 7)), list(range(1, 4)), list(range(1, 9))]  # P = 6, 3, 8
        answers = [[20, 21, 62], [22, 62], [23, 24, 25, 26, 27, 62]]
        ids, valid, ans_pos = T.pack(prompts, answers, G, 62)
        alen = np.array([len(a) for a in answers])
        g = torch.Generator().manual_seed(5)
        counts = np.zeros((3, 6))
        for _ in range(400):
            inb, end = T.block_targets(ans_pos, alen, G, bs, 0.15, g)
            for j, p in enumerate(prompts):
                P = len(p)
                slots = torch.nonzero(inb[j]).flatten()
                blk = {int(ans_pos[j, q]) // bs for q in slots}
                self.assertEqual(len(blk), 1)
                b = blk.pop()
                self.assertTrue(P // bs <= b <= (P + G - 1) // bs)
                self.assertEqual(int(end[j]), min(P + G, (b + 1) * bs))
                want = [q for q in range(G) if (P + q) // bs == b]
                self.assertEqual(slots.tolist(), want)
                counts[j, b - P // bs] += 1
        # sample 0: P 6, answer slots 6..17 -> blocks 1..4; content (3 slots to position 8) in blocks 1, 2
        self.assertGreater(counts[0, 0], 3 * counts[0, 2])
        self.assertGreater(counts[0, 2], 0)
        cfg = LLaDAConfig(d_model=32, n_layers=2, n_heads=2, n_kv_heads=2, mlp_hidden_size=64, vocab_size=64,
                          embedding_size=64, mask_token_id=63, eos_token_id=62, pad_token_id=62,
                          block_causal=True, block_size=bs)
        seen = {}

        class Rec(LLaDA):
            def forward(self, x, **kw):
                seen["x"], seen["valid"] = x.clone(), kw.get("key_valid")
                return super().forward(x, **kw)
        torch.manual_seed(0)
        m = Rec(cfg)
        a = T.parse_args([])
        for seed in range(20):
            loss, s = T.loss_on(m, ids, valid, ans_pos, a, torch.Generator().manual_seed(seed), 63, alen, G,
                                block=bs)
            x, kv = seen["x"], seen["valid"]
            self.assertTrue(torch.isfinite(loss))
            for j, p in enumerate(prompts):
                P = len(p)
                masked = torch.nonzero(x[j] == 63).flatten().tolist()
                self.assertTrue(masked, "every sample trains a masked slot")
                b = masked[0] // bs
                self.assertTrue(all(q // bs == b and q >= P for q in masked))
                self.assertEqual(x[j, :P].tolist(), p)                      # prompt clean
                self.assertEqual(x[j, P:b * bs].tolist(), ids[j, P:b * bs].tolist())  # earlier blocks clean
                end = min(P + G, (b + 1) * bs)
                self.assertEqual(kv[j].nonzero().flatten().tolist(), list(range(end)))  # nothing after b
            self.assertEqual(x.shape[1], int(kv.sum(1).max()))
        loss.backward()

    def test_block_decay(self):
        a = T.parse_args(["--block-causal", "--block-size", "32", "--block-decay", "128:3,64:2"])
        self.assertEqual([T.block_size_at(s, a, phase_from=10) for s in range(10, 17)], [128, 128, 128, 64, 64, 32, 32])
        self.assertEqual(T.block_size_at(0, T.parse_args(["--block-size", "16"])), 16)

    def test_block_train_eval(self):
        """--block-causal end to end from an exported bidirectional model (--init-from): the export's
        config has the block keys, the eval ran both block decoders."""
        with tempfile.TemporaryDirectory() as d:
            corpus = synth_corpus(d, 300, 30)
            base = tiny_run(d, corpus) + ["--eval-every", "4", "--eval-per-suite", "2"]
            T.main(base + ["--max-steps", "4"])
            blk = block_run(d, corpus) + ["--phase", "block", "--block-decay", "8:2"]
            T.main(blk + ["--max-steps", "8"])
            cfg = json.load(open(os.path.join(d, "ob", "config.json")))
            self.assertEqual((cfg["block_causal"], cfg["block_size"], cfg["shift_logits"]), (True, 4, False))
            logs = run_log(d, "wb")
            self.assertEqual(logs[0]["resumed_from"], os.path.join(d, "out"))
            ev = [r for r in logs if r["type"] == "eval"]
            self.assertTrue(ev)
            self.assertEqual(sorted(ev[-1]["by_decoding"]), ["schedule", "threshold"])
            st = json.load(open(os.path.join(d, "ob", "train_state.json")))
            self.assertIn("block diffusion", st["objective"])
            T.main(blk + ["--max-steps", "10"])  # resumes from its own checkpoint, still block-causal
            logs = run_log(d, "wb")
            starts = [r for r in logs if r["type"] == "start"]
            self.assertEqual(starts[-1]["resumed_from"], os.path.join(d, "wb", "ckpt.pt"))
            self.assertTrue(starts[-1]["config"]["block_causal"])

    def test_pack_corpus_npz(self):
        """pack_corpus.py's train.npz loads as the same Corpus as the jsonl (also with answers skipped)."""
        import numpy as np
        import shutil
        with tempfile.TemporaryDirectory() as d:
            src, dst = os.path.join(d, "src"), os.path.join(d, "dst")
            make_synth(src, 200, 10)
            os.makedirs(dst)
            subprocess.run([sys.executable, os.path.join(HERE, "pack_corpus.py"), "--corpus", src,
                            "--out", os.path.join(dst, "train.npz")], check=True)
            for g in (16, 6, 3):
                a = T.Corpus(os.path.join(src, "train.jsonl"), g, 257)
                b = T.Corpus(os.path.join(dst, "train.jsonl"), g, 257)  # no jsonl there: the npz
                self.assertEqual((a.suites, a.skipped, len(a)), (b.suites, b.skipped, len(b)))
                for k in ("flat", "offs", "plen", "ans", "alen", "suite", "level"):
                    self.assertTrue(np.array_equal(getattr(a, k), getattr(b, k)), k)
            self.assertGreater(T.Corpus(os.path.join(dst, "train.jsonl"), 3, 257).skipped, 0)
            shutil.copy(os.path.join(src, "meta.json"), dst)
            shutil.copy(os.path.join(src, "eval.jsonl"), dst)
            # --time-budget: stops by wall time (max-steps far away), evaluates and exports
            out = os.path.join(d, "out")
            T.main(["--corpus", dst, "--work", os.path.join(d, "work"), "--out", out, "--n-layers", "2",
                    "--d-model", "32", "--n-heads", "2", "--mlp-hidden", "64", "--batch-tokens", "512",
                    "--log-every", "2", "--warmup", "2", "--recall-frac", "0", "--max-steps", "1000000",
                    "--time-budget", "3", "--eval-every", "1000000", "--eval-seconds", "1", "--eval-per-suite", "1"])
            logs = run_log(d)
            self.assertEqual(logs[-1]["type"], "stop")
            self.assertLess(logs[-1]["step"], 1000000)
            self.assertTrue([r for r in logs if r["type"] == "eval"])
            self.assertTrue(os.path.exists(os.path.join(out, "model.safetensors")))
        a = T.parse_args(["--warmup", "0", "--lr", "1e-3", "--min-lr-frac", "0.1", "--time-budget", "100"])
        self.assertAlmostEqual(T.lr_at(5, a, prog=0.0), 1e-3)
        self.assertAlmostEqual(T.lr_at(5, a, prog=1.0), 1e-4)
        self.assertAlmostEqual(T.lr_at(5, a, prog=0.5), 0.55e-3)

    def test_queue_samples(self):
        """RecallGen queues: the answer is the name right after the asked one, or the m names after it."""
        import numpy as np
        from recall import RecallGen
        tok = os.path.join(HERE, "..", "..", "models", "llada-tiny", "tokenizer.json")
        g = RecallGen(tok, 32, 2043, queues=1.0)
        rng = np.random.RandomState(5)
        seen_many = False
        for level in range(RecallGen.MAX_LEVEL + 1):
            for _ in range(20):
                p, a = g.sample(rng, level)
                self.assertLessEqual(len(a), g.slots(level))
                self.assertEqual((a[0], a[-1]), (g.ans, g.eos))
                q0 = p.index(g.queue_head[-1]) + 1
                q1 = q0 + p[q0:].index(g.period[0])
                names = [x for x in p[q0:q1] if x != g.comma[0]]
                self.assertEqual(len(set(names)), len(names))
                got = [x for x in a[1:-1] if x != g.comma[0]]
                if g.framed(level):
                    asked = p[p.index(g.q_many[1][-1]) + 1] if len(got) > 1 else p[len(p) - len(g.tail) - 1]
                    seen_many |= len(got) > 1
                else:
                    asked = p[-2]
                i = names.index(asked)
                self.assertEqual(got, names[i + 1:i + 1 + len(got)])
        self.assertTrue(seen_many)

    def test_queue_split(self):
        """--recall-queue-split: the split range separates the whole queue from the asked name, and
        split_offsets puts a block boundary inside it; other samples keep their offsets."""
        import numpy as np
        import torch
        from recall import RecallGen
        tok = os.path.join(HERE, "..", "..", "models", "llada-tiny", "tokenizer.json")
        g = RecallGen(tok, 32, 2043, queues=0.5, sums=0.5)
        bs = 32
        for level in (0, 5, RecallGen.MAX_LEVEL):
            ranges = []
            prompts, answers = g.batch(np.random.RandomState(level), level, 8192, 64, 1, ranges)
            self.assertEqual(len(ranges), len(prompts))
            self.assertTrue(any(r is None for r in ranges) and any(r is not None for r in ranges))
            rng_t = torch.Generator().manual_seed(3)
            before = torch.randint(0, bs, (len(prompts),), generator=rng_t)
            off = T.split_offsets(before.clone(), ranges, bs, 1.0, rng_t)
            for p, a, r, o, o0 in zip(prompts, answers, ranges, off.tolist(), before.tolist()):
                if r is None:
                    self.assertEqual(o, o0)
                    continue
                lo, hi = r
                self.assertEqual(p[lo - 1], g.period[0])  # the queue ends just before lo
                asked = a[1]  # the first name of the answer follows the asked one in the queue
                q0 = p.index(g.queue_head[-1]) + 1
                names = [x for x in p[q0:lo - 1] if x != g.comma[0]]
                self.assertEqual(names[names.index(p[hi]) + 1], asked)
                blk = [(o + j) // bs for j in range(len(p))]
                self.assertLess(blk[lo - 1], blk[hi])  # every queue token in an earlier block than the asked name
            self.assertTrue(torch.equal(T.split_offsets(before.clone(), ranges, bs, 0.0, rng_t), before))

    def test_queue_diag_helpers(self):
        import queue_diag as Q
        H, C, K, P = 1, 2, 3, 4  # header, colon, comma, period
        p = [9, 9, H, C, 11, K, 12, K, 13, P, 9, 12]
        self.assertEqual(Q.list_names(p, {H}, C, K, P), ([11, 12, 13], 9))
        names = ("3-5", "6-9", "10-15", "16+")
        self.assertEqual([Q.bucket(v, (6, 10, 16), names) for v in (3, 6, 15, 40)], list(names))

    def test_sequence_bridge(self):
        """--sequence-bridge: the list becomes one '* a SEP b' row per neighbour pair, the question
        stays or becomes the lookup suite's; the rest of the prompt is unchanged."""
        import numpy as np
        bv = T.bridge_vocab(os.path.join(HERE, "..", "..", "models", "llada-tiny", "tokenizer.json"))
        v = bv["v"]
        a, b, c = v["Ġsep"], v["Ġlef"], v["Ġdeli"]
        which = [v[x] for x in ("Which", "Ġguest", "Ġcomes", "Ġright", "Ġafter")]
        p = [v["<|startoftext|>"], v["Queue"], v[":"], a, v[","], b, v[","], c, v["."], v["Ċ"]] + which + [b, v["?"]]
        seen = set()
        for seed in range(40):
            q = T.bridge_prompt(np.asarray(p), bv, np.random.RandomState(seed)).tolist()
            self.assertEqual(q[:3], p[:3])
            self.assertEqual(q[-2:], [b, v["?"]])
            sep = q[6]
            self.assertIn(sep, (v["Ġ="], v[","]))
            self.assertEqual(q[3:13], [v["Ċ"], v["*"], a, sep, b, v["Ċ"], v["*"], b, sep, c])
            self.assertEqual(q[13], v["Ċ"])
            lookup = q[14:-2] == bv["lookq"]
            self.assertTrue(lookup or q[14:-2] == which)
            seen.add((sep, lookup))
        self.assertEqual(len(seen), 4)  # both separators, both questions

    def test_bridge_layouts(self):
        """--bridge-layouts: each rung's list layout; the chain and list keep a closing period, the span
        question is never rewritten, --sequence-max-names counts the list's names."""
        import numpy as np
        bv = T.bridge_vocab(os.path.join(HERE, "..", "..", "models", "llada-tiny", "tokenizer.json"))
        v = bv["v"]
        a, b, c = v["Ġsep"], v["Ġlef"], v["Ġdeli"]
        which = [v[x] for x in ("Which", "Ġguest", "Ġcomes", "Ġright", "Ġafter")]
        lst = [a, v[","], b, v[","], c, v["."]]
        p = [v["<|startoftext|>"], v["Queue"], v[":"]] + lst + [v["Ċ"]] + which + [b, v["?"]]
        self.assertEqual(T.list_len(p, bv), 3)
        seps = set()
        for seed in range(20):
            rng = np.random.RandomState(seed)
            q = T.bridge_prompt(np.asarray(p), bv, rng, "lines", 0.0).tolist()
            sep = q[5]
            seps.add(sep)
            self.assertEqual(q[3:11], [v["Ċ"], a, sep, b, v["Ċ"], b, sep, c])
            self.assertEqual(q[11:], [v["Ċ"]] + which + [b, v["?"]])
            q = T.bridge_prompt(np.asarray(p), bv, rng, "chain", 0.0).tolist()
            self.assertEqual(q[3:9], [a, v["Ġ="], b, v["Ġ="], c, v["."]])
            self.assertEqual(q[9:], p[9:])
            q = T.bridge_prompt(np.asarray(p), bv, rng, "chain", 0.0, sep=v[";"]).tolist()
            self.assertEqual(q[3:9], [a, v[";"], b, v[";"], c, v["."]])
            q = T.bridge_prompt(np.asarray(p), bv, rng, "chain-any", 0.0).tolist()
            self.assertEqual((q[3], q[5], q[7:]), (a, b, p[7:]))
            self.assertEqual(q[4], q[6])
            self.assertEqual(T.bridge_prompt(np.asarray(p), bv, rng, "list", 0.0).tolist(), p)
            q = T.bridge_prompt(np.asarray(p), bv, rng, "list", 1.0).tolist()
            self.assertEqual(q, p[:10] + bv["lookq"] + [b, v["?"]])
        self.assertEqual(seps, {v["Ġ="], v[","]})
        rng = np.random.RandomState(0)
        any_seps = {T.bridge_prompt(np.asarray(p), bv, rng, "chain-any", 0.0)[4] for _ in range(200)}
        self.assertEqual(any_seps, {v[x] for x in T.CHAIN_SEPS})  # all eight, never the list's comma
        span_q = [v[x] for x in ("ist", "Ġthe", "Ġ18", "Ġgues", "ts", "Ġthat", "Ġcom", "e", "Ġright", "Ġafter")]
        sp = p[:10] + span_q + [a, v["?"]]
        q = T.bridge_prompt(np.asarray(sp), bv, np.random.RandomState(0), "chain", 1.0).tolist()
        self.assertEqual(q[9:], sp[9:])  # a span question stays
        self.assertEqual(T.bridge_layouts("rows=1, chain=3"), (["rows", "chain"], [0.25, 0.75]))
        for bad in ("rows", "tree=1", "rows=-1", "rows=0", "rows=x"):
            with self.assertRaises(SystemExit):
                T.bridge_layouts(bad)

    def test_sequence_max_names(self):
        """--sequence-max-names: the exact mix draws only sequence samples with short lists; --bench
        with --init-from runs its steps from the resumed step and prints tokens/s."""
        import numpy as np
        bv = T.bridge_vocab(os.path.join(HERE, "..", "..", "models", "llada-tiny", "tokenizer.json"))
        v = bv["v"]
        names = [v[x] for x in ("Ġsep", "Ġlef", "Ġdeli", "Ġnat", "Ġvis", "Ġchang", "Ġnam")]
        q = [v["Ċ"], v["Which"], v["Ġafter"], names[0], v["?"]]
        with tempfile.TemporaryDirectory() as d:
            rows = []
            for k in range(2, 8):  # lists of 2..7 names; other suites' prompts have no list
                lst = sum(([n, v[","]] for n in names[:k]), [])[:-1] + [v["."]]
                for _ in range(4):
                    rows.append({"suite": "sequence", "ids": [v["Queue"], v[":"]] + lst + q, "answer": [names[1], 1]})
            rows += [{"suite": "lookup", "ids": [5, 6, 7], "answer": [8, 1]}] * 8
            path = os.path.join(d, "train.jsonl")
            with open(path, "w") as f:
                f.write("".join(json.dumps(r) + "\n" for r in rows))
            c = T.Corpus(path, 4, 1)
            a = T.parse_args(["--suite-mix", "exact", "--sequence-max-names", "4", "--curriculum-start", "1.0",
                              "--batch-tokens", "64", "--max-batch", "8"])
            bt = T.Batcher(c, a, np.random.RandomState(0))
            bt.set_bridge_vocab(bv)
            self.assertEqual(sorted(set(bt.names[c.suite == c.suites.index("sequence")].tolist())), [2, 3, 4, 5, 6, 7])
            seen = set()
            for step in range(50):
                for i in bt.batch(step):
                    if c.suites[c.suite[i]] == "sequence":
                        seen.add(int(bt.names[i]))
            self.assertEqual(seen, {2, 3, 4})
            bt.reshuffle()  # the cap survives the trainer's reshuffles
            self.assertEqual(len(bt.by_suite[c.suites.index("sequence")]), 12)

    def test_bench_after_init_from(self):
        with tempfile.TemporaryDirectory() as d:
            corpus = synth_corpus(d, 300, 30, quiet=True)
            T.main(tiny_run(d, corpus) + ["--max-steps", "4", "--eval-every", "4", "--eval-per-suite", "2"])
            os.remove(os.path.join(d, "work", "ckpt.pt"))  # start from the export (step 4), as from a bundled model
            r = subprocess.run([sys.executable, os.path.join(HERE, "train.py")] + tiny_run(d, corpus) +
                               ["--init-from", os.path.join(d, "out"), "--bench", "5", "--max-steps", "4"],
                               capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr[-2000:])
            self.assertRegex(r.stdout, r'"bench": \{.*"tokens_per_s": [1-9]')

    def test_canvases(self):
        a = T.parse_args(["--canvas", "128,32,64", "--canvas-weights", "1,2,1"])
        cs, ps = T.canvases(a, 16)
        self.assertEqual(cs, [32, 64, 128])
        self.assertAlmostEqual(sum(ps), 1.0)
        self.assertAlmostEqual(ps[0], 0.5)  # 32 had weight 2
        self.assertEqual(T.canvases(T.parse_args([]), 16), ([16], [1.0]))
        self.assertEqual(T.raise_canvas(cs, 32, 45), 64)
        self.assertEqual(T.raise_canvas(cs, 64, 45), 64)
        self.assertEqual(T.raise_canvas(cs, 32, 300), 300)
        a = T.parse_args(["--warmup", "10", "--max-steps", "200", "--lr", "1e-3"])
        self.assertAlmostEqual(T.lr_at(100, a, warm_from=100, phase_from=100), 1e-4)  # warm-up restarts
        self.assertGreater(T.lr_at(109, a, warm_from=100, phase_from=100), 0.95e-3)  # warm-up done, cosine at its top
        self.assertAlmostEqual(T.lr_at(200, a, warm_from=100, phase_from=100), 1e-4)  # cosine ends at min


def llama_reference_logits(cfg, W, ids):
    """Logits [n, vocab] of a Hugging Face Llama checkpoint (config.json dict cfg, tensors W by
    their HF names) for one sequence, in float64, written from the public Llama modeling
    conventions and nothing of pyllada: pre-norm RMSNorm (x * rsqrt(mean(x^2) + eps) * w), RoPE
    with inv_freq = theta^(-2i/hd) applied as x*cos + rotate_half(x)*sin (halves, cos/sin of
    cat(freqs, freqs)), causal softmax attention with grouped K/V heads, SwiGLU MLP
    down(silu(gate(x)) * up(x)), final norm and lm_head."""
    import torch
    import torch.nn.functional as F
    W = {k: v.double() for k, v in W.items()}
    d, H = cfg["hidden_size"], cfg["num_attention_heads"]
    KH = cfg.get("num_key_value_heads", H)
    hd = cfg.get("head_dim") or d // H
    eps, n = cfg["rms_norm_eps"], len(ids)

    def rms(x, w):
        return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))

    def rotate_half(t):
        return torch.cat([-t[..., hd // 2:], t[..., :hd // 2]], dim=-1)

    inv = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    freqs = torch.outer(torch.arange(n, dtype=torch.float64), inv)
    emb = torch.cat([freqs, freqs], dim=-1)
    cos, sin = emb.cos(), emb.sin()
    causal = torch.full((n, n), float("-inf"), dtype=torch.float64).triu(1)
    x = W["model.embed_tokens.weight"][torch.as_tensor(ids)]
    for layer in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        h = rms(x, W[p + "input_layernorm.weight"])
        q = (h @ W[p + "self_attn.q_proj.weight"].T).view(n, H, hd).transpose(0, 1)
        k = (h @ W[p + "self_attn.k_proj.weight"].T).view(n, KH, hd).transpose(0, 1)
        v = (h @ W[p + "self_attn.v_proj.weight"].T).view(n, KH, hd).transpose(0, 1)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, v = k.repeat_interleave(H // KH, dim=0), v.repeat_interleave(H // KH, dim=0)
        a = torch.softmax(q @ k.transpose(-1, -2) / hd ** 0.5 + causal, dim=-1) @ v
        x = x + a.transpose(0, 1).reshape(n, H * hd) @ W[p + "self_attn.o_proj.weight"].T
        h = rms(x, W[p + "post_attention_layernorm.weight"])
        x = x + (F.silu(h @ W[p + "mlp.gate_proj.weight"].T) * (h @ W[p + "mlp.up_proj.weight"].T)) @ \
            W[p + "mlp.down_proj.weight"].T
    return rms(x, W["model.norm.weight"]) @ W["lm_head.weight"].T


class TestAR(unittest.TestCase):
    """--objective ar: the causal guide model."""

    def model(self, n_kv_heads=4, seed=0):
        import torch
        from pyllada.model import LLaDA, LLaDAConfig
        c = LLaDAConfig(d_model=32, n_layers=2, n_heads=4, n_kv_heads=n_kv_heads, mlp_hidden_size=48,
                        vocab_size=60, embedding_size=64, mask_token_id=58, eos_token_id=57, pad_token_id=57,
                        block_causal=True, block_size=1, extra={"bos_token_id": 56})
        torch.manual_seed(seed)
        m = LLaDA(c)
        with torch.no_grad():  # norms off 1, so the export's norm mapping is tested too
            for name, p in m.named_parameters():
                if p.dim() == 1:
                    p.uniform_(0.5, 1.5)
        return m.eval()

    def test_causal(self):
        import torch
        m = self.model()
        ids = torch.randint(0, 56, (2, 20))
        later = ids.clone()
        later[:, 12:] = torch.randint(0, 56, (2, 8))
        with torch.no_grad():
            a, b = m(ids), m(later)
        self.assertEqual(float((a[:, :12] - b[:, :12]).abs().max()), 0.0)  # earlier rows untouched
        self.assertGreater(float((a[:, 12:] - b[:, 12:]).abs().max()), 1e-3)
        # right padding is invisible to the real rows (the batches and the eval are right-padded)
        valid = torch.ones(2, 20, dtype=torch.bool)
        valid[0, 15:] = False
        with torch.no_grad():
            c = m(ids, key_valid=valid)
        self.assertLess(float((c[0, :15] - a[0, :15]).abs().max()), 1e-6)

    def test_loss_mask(self):
        import numpy as np
        import torch
        import torch.nn.functional as F
        m = self.model()
        eos = 57
        prompts = [np.arange(1, 8), np.arange(10, 14)]
        answers = [np.array([40, 41, eos, eos, eos]), np.array([42, eos, eos, eos, eos])]  # canvas-padded
        alen = np.array([3, 2])                                          # the answer + its one EOS
        ids, valid, ans_pos = T.pack(prompts, answers, 5, eos)
        arow, prow = T.ar_targets(ans_pos, alen, valid)
        self.assertEqual(arow.tolist(), [[True] * 3 + [False] * 2, [True] * 2 + [False] * 3])
        self.assertEqual(prow.sum(1).tolist(), [6, 3])                  # rows 0..P-2
        loss, s = T.loss_ar(m, ids, valid, ans_pos, alen, 0.0)
        with torch.no_grad():
            lg = m(ids, key_valid=valid)
        want = [F.cross_entropy(lg[0, [6, 7, 8]], torch.tensor([40, 41, eos]), reduction="sum"),
                F.cross_entropy(lg[1, [3, 4]], torch.tensor([42, eos]), reduction="sum")]
        self.assertAlmostEqual(float(loss), float(sum(want)) / 5, places=5)
        self.assertEqual((s["n_content"], s["n_pad"]), (3, 2))         # content = answer, pad = its EOS
        # the canvas padding after the EOS is no target: other tokens there change nothing
        ids2 = ids.clone()
        ids2[0, 10:12] = 3
        ids2[1, 6:9] = 5
        loss2, _ = T.loss_ar(m, ids2, valid, ans_pos, alen, 0.0)
        self.assertAlmostEqual(float(loss2), float(loss), places=6)
        # the prompt term: w x the mean next-token CE over rows 0..P-2
        w = 0.25
        loss3, s3 = T.loss_ar(m, ids, valid, ans_pos, alen, w)
        pc = [F.cross_entropy(lg[0, :6], ids[0, 1:7], reduction="sum"),
              F.cross_entropy(lg[1, :3], ids[1, 1:4], reduction="sum")]
        self.assertAlmostEqual(float(loss3), float(loss) + w * float(sum(pc)) / 9, places=5)
        self.assertEqual(s3["n_prompt"], 9)

    def test_export_matches_llama_reference(self):
        import torch
        from pyllada import safetensors_io as st
        from pyllada.hf_llama import from_llama, save_llama
        for kv in (4, 2):  # multi-head and grouped K/V
            m = self.model(n_kv_heads=kv, seed=kv)
            with tempfile.TemporaryDirectory() as d:
                save_llama(m, d)
                cfg = json.load(open(os.path.join(d, "config.json")))
                W = st.load_file(os.path.join(d, "model.safetensors"))
                self.assertEqual(cfg["architectures"], ["LlamaForCausalLM"])
                for k in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                          "num_key_value_heads", "rms_norm_eps", "rope_theta", "vocab_size",
                          "max_position_embeddings", "tie_word_embeddings", "bos_token_id", "eos_token_id",
                          "pad_token_id"):
                    self.assertIn(k, cfg)
                self.assertEqual((cfg["vocab_size"], cfg["num_key_value_heads"], cfg["bos_token_id"]), (64, kv, 56))
                names = {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"} | {
                    f"model.layers.{i}.{n}.weight" for i in range(2) for n in (
                        "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                        "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj", "input_layernorm",
                        "post_attention_layernorm")}
                self.assertEqual(set(W), names)
                ids = torch.randint(0, 60, (23,))
                with torch.no_grad():
                    ours = m(ids[None])[0].double()
                ref = llama_reference_logits(cfg, W, ids.tolist())
                self.assertLess(float((ours - ref).abs().max()), 1e-4)
                m2 = from_llama(d)
                self.assertTrue(m2.config.block_causal and m2.config.block_size == 1)
                with torch.no_grad():
                    self.assertEqual(float((m2(ids[None])[0] - m(ids[None])[0]).abs().max()), 0.0)

    def test_greedy_ar(self):
        import torch
        m = self.model()
        prompts = [[1, 2, 3, 4, 5], [7, 8]]
        outs = T.greedy_ar(m, prompts, 4, eos=57)
        for p, o in zip(prompts, outs):  # batched right-padded decoding = one sequence at a time
            seq = list(p)
            for t in o:
                with torch.no_grad():
                    self.assertEqual(int(m(torch.tensor([seq]))[0, -1].argmax()), t)
                seq.append(t)
            self.assertTrue(len(o) == 4 or o[-1] == 57)

    def test_train_export_resume(self):
        from pyllada import safetensors_io as st
        with tempfile.TemporaryDirectory() as d:
            corpus = synth_corpus(d, 300, 30, quiet=True)
            base = tiny_run(d, corpus) + ["--objective", "ar", "--eval-every", "4", "--eval-per-suite", "3"]
            T.main(base + ["--max-steps", "6"])
            out = os.path.join(d, "out")
            cfg = json.load(open(os.path.join(out, "config.json")))
            self.assertEqual((cfg["architectures"], cfg["vocab_size"], cfg["eos_token_id"]),
                             (["LlamaForCausalLM"], 320, 257))
            self.assertIn("model.layers.1.mlp.down_proj.weight", st.load_file(os.path.join(out, "model.safetensors")))
            ts = json.load(open(os.path.join(out, "train_state.json")))
            self.assertIn(ts["step"], (4, 6))
            self.assertTrue(ts["objective"].startswith("autoregressive"))
            T.main(base + ["--max-steps", "8"])  # resumes from ckpt.pt
            logs = run_log(d)
            self.assertEqual([r["step"] for r in logs if r["type"] == "start"], [0, 6])
            self.assertEqual(logs[-1], dict(logs[-1], type="stop", step=8))
            ev = [r for r in logs if r["type"] == "eval"]
            self.assertTrue(ev and all(r["decoding"] == "greedy ar" for r in ev))
            os.remove(os.path.join(d, "work", "ckpt.pt"))
            exported = json.load(open(os.path.join(out, "train_state.json")))["step"]
            T.main(base + ["--max-steps", "9"])  # resumes from the Llama export
            logs = run_log(d)
            start = [r for r in logs if r["type"] == "start"][-1]
            self.assertEqual((start["resumed_from"], start["step"]), (out, exported))
            self.assertEqual(logs[-1]["type"], "stop")
            self.assertTrue(start["config"]["block_causal"] and start["config"]["block_size"] == 1)
            with self.assertRaises(SystemExit):  # a diffusion run refuses the causal export
                T.main(tiny_run(d, corpus) + ["--max-steps", "10"])

    def test_token_shift_and_complementary_masks(self):
        """The block conversion's two options: with shift_logits position i's hidden state and
        logits are row i-1's (0 its own); --complementary-masks trains each sample twice, its block
        masked by m and by the block's complement of m, so every block slot is a target once."""
        import numpy as np
        import torch
        from pyllada.model import LLaDA, LLaDAConfig
        bs, G = 4, 12
        kw = dict(d_model=32, n_layers=2, n_heads=2, n_kv_heads=2, mlp_hidden_size=64, vocab_size=64,
                  embedding_size=64, mask_token_id=63, eos_token_id=62, pad_token_id=62,
                  block_causal=True, block_size=bs)
        torch.manual_seed(0)
        plain = LLaDA(LLaDAConfig(**kw)).eval()
        shifted = LLaDA(LLaDAConfig(**kw, shift_logits=True)).eval()
        shifted.load_state_dict(plain.state_dict())
        ids = torch.randint(0, 60, (2, 10))
        with torch.no_grad():
            a, b = plain(ids), shifted(ids)
            ha, hb = plain(ids, return_hidden=True), shifted(ids, return_hidden=True)
        self.assertEqual(float((b[:, 1:] - a[:, :-1]).abs().max()), 0.0)
        self.assertEqual(float((b[:, 0] - a[:, 0]).abs().max()), 0.0)
        self.assertEqual(float((hb[:, 1:] - ha[:, :-1]).abs().max()), 0.0)

        prompts = [list(range(1, 7)), list(range(1, 4))]
        answers = [[20, 21, 62], [22, 23, 24, 25, 26, 62]]
        pids, valid, ans_pos = T.pack(prompts, answers, G, 62)
        alen = np.array([len(x) for x in answers])
        seen = {}

        class Rec(LLaDA):
            def forward(self, x, **kw):
                seen["x"] = x.clone()
                return super().forward(x, **kw)
        m = Rec(LLaDAConfig(**kw, shift_logits=True))
        a = T.parse_args(["--block-causal", "--block-size", str(bs), "--token-shift", "--complementary-masks"])
        for seed in range(10):
            loss, st_ = T.loss_on(m, pids, valid, ans_pos, a, torch.Generator().manual_seed(seed), 63, alen, G,
                                  suite=[0, 1], nsuites=2, block=bs)
            x = seen["x"]
            self.assertTrue(torch.isfinite(loss))
            self.assertEqual(x.shape[0], 4)
            for j, p in enumerate(prompts):
                m1, m2 = x[j] == 63, x[j + 2] == 63
                self.assertFalse(bool((m1 & m2).any()))               # disjoint
                both = torch.nonzero(m1 | m2).flatten().tolist()       # together: the whole block
                b = both[0] // bs
                n_ = min(x.shape[1], len(p) + G, (b + 1) * bs)
                self.assertEqual(both, [q for q in range(max(len(p), b * bs), n_)])
            self.assertEqual(sum(st_["suite_n"]), st_["n_content"])
        loss.backward()
        with self.assertRaises(SystemExit):
            T.main(["--token-shift"])

    def test_copy_warmup_run(self):
        """--copy-frac in a causal run: copy steps are taken and their CE logged apart."""
        with tempfile.TemporaryDirectory() as d:
            corpus = synth_corpus(d, 200, 10, quiet=True)
            T.main(tiny_run(d, corpus) + ["--objective", "ar", "--copy-frac", "0.5", "--eval-every", "100",
                                         "--max-steps", "8", "--log-every", "4"])
            logs = run_log(d)
            tr = [r for r in logs if r["type"] == "train"]
            self.assertTrue(tr and all("ce_copy" in r for r in tr))
            self.assertTrue(any(r["ce_copy"] > 0 for r in tr))

    def test_convert_from_ar(self):
        """Block conversion end to end: an AR (Llama) export trained on as a block-diffusion model
        with the token shift; the export is a LLaDA block model with shift_logits."""
        with tempfile.TemporaryDirectory() as d:
            corpus = synth_corpus(d, 300, 30, quiet=True)
            T.main(tiny_run(d, corpus) + ["--objective", "ar", "--eval-every", "4", "--eval-per-suite", "2",
                                         "--max-steps", "4"])
            blk = block_run(d, corpus) + ["--token-shift", "--complementary-masks", "--phase", "convert",
                                          "--max-steps", "8"]
            T.main(blk)
            cfg = json.load(open(os.path.join(d, "ob", "config.json")))
            self.assertEqual((cfg["architectures"], cfg["block_causal"], cfg["block_size"], cfg["shift_logits"]),
                             (["LLaDAModelLM"], True, 4, True))
            logs = run_log(d, "wb")
            self.assertEqual(logs[0]["resumed_from"], os.path.join(d, "out"))
            self.assertTrue([r for r in logs if r["type"] == "eval"])


if __name__ == "__main__":
    unittest.main()
