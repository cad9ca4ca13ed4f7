"""End-to-end check of train.py on a tiny synthetic corpus (about 30 s on one core).

    /usr/bin/python3 tools/train/test_train.py
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import train as T  # noqa: E402


class TestTrain(unittest.TestCase):
    def test_train_export_resume(self):
        with tempfile.TemporaryDirectory() as d:
            corpus = os.path.join(d, "corpus")
            subprocess.run([sys.executable, os.path.join(HERE, "make_synth.py"), "--out", corpus,
                            "--train", "300", "--eval", "30"], check=True)
            base = ["--corpus", corpus, "--work", os.path.join(d, "work"), "--out", os.path.join(d, "out"),
                    "--resume", "--n-layers", "2", "--d-model", "32", "--n-heads", "2", "--mlp-hidden", "64",
                    "--batch-tokens", "1024", "--eval-every", "4", "--eval-per-suite", "3", "--log-every", "2",
                    "--warmup", "2"]
            T.main(base + ["--max-steps", "6"])
            st = json.load(open(os.path.join(d, "out", "train_state.json")))
            self.assertIn(st["step"], (4, 6))
            cfg = json.load(open(os.path.join(d, "out", "config.json")))
            self.assertEqual((cfg["vocab_size"], cfg["embedding_size"], cfg["mask_token_id"]), (262, 320, 258))
            T.main(base + ["--max-steps", "8"])  # resumes from ckpt.pt
            logs = [json.loads(l) for l in open(os.path.join(d, "work", "log.jsonl"))]
            starts = [r for r in logs if r["type"] == "start"]
            self.assertEqual([s["step"] for s in starts], [0, 6])
            os.remove(os.path.join(d, "work", "ckpt.pt"))
            T.main(base + ["--max-steps", "9"])  # resumes from the export
            logs = [json.loads(l) for l in open(os.path.join(d, "work", "log.jsonl"))]
            self.assertEqual(logs[-1]["type"], "stop")
            self.assertEqual([r for r in logs if r["type"] == "start"][-1]["resumed_from"], os.path.join(d, "out"))

    def test_batcher_curriculum(self):
        with tempfile.TemporaryDirectory() as d:
            subprocess.run([sys.executable, os.path.join(HERE, "make_synth.py"), "--out", d,
                            "--train", "500", "--eval", "10"], check=True)
            c = T.Corpus(os.path.join(d, "train.jsonl"), 12, 257)
            a = T.parse_args(["--batch-tokens", "2000", "--curriculum-steps", "100"])
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


if __name__ == "__main__":
    unittest.main()
