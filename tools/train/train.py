#!/usr/bin/env python3
"""Trains the bundled LLaDA-architecture masked diffusion model (issue 3).

Reproduce (from the repo root; resumes automatically, see below):

    /usr/bin/python3 tools/train/train.py --corpus data/corpus --out models/llada-tiny --resume

Data: <corpus>/train.jsonl, eval.jsonl (lines {"suite", "ids": prompt ids, "prefix_len",
"answer": answer ids ending with one EOS}) and meta.json {vocab_size, mask_id, eos_id,
bos_id, gen_length, ...}, written by `go run ./tools/corpus`.

Objective (LLaDA SFT): the answer is padded with EOS to gen_length; input = prompt ⊕
answer; per sample t ~ U(0, 1), p = (1−eps)·t + eps; every answer token is replaced by
MASK with probability p (the prompt stays clean); loss = Σ_masked CE / p, divided by
the answer length (gen_length) and averaged over the batch. Logits are computed for
the masked rows only.

Batches: samples sorted by length (ties shuffled), a batch is a window of neighbours
around a suite-balanced random anchor, sized to --batch-tokens; padding keys are
masked out of attention. Curriculum: only prompts up to a length quantile are
eligible; it starts at --curriculum-start and grows by --advance-by whenever a log
interval's answer-content CE is below --advance-ce (--curriculum adaptive, the
default: the model stays on short prompts until it reads its prefix), or linearly to
1 over --curriculum-steps (--curriculum linear). --recall-frac F trains a fraction F of
the steps on synthetic key→value recall in the corpus's vocabulary and chat framing
(recall.py), whose table size grows each time its CE falls below --recall-advance-ce:
a warm-up for the lookup circuit every suite needs, on by default (--recall-early-frac
of the steps until level --recall-handover, then --recall-frac; 0 turns it off). Its
first levels are bare tables without chat framing: irrelevant context lengthens the
plateau before the circuit forms. See docs/training.md.

Outputs: --work (default train-out/llada-tiny): ckpt.pt (model, optimizer, step,
RNG; every --ckpt-minutes and on SIGTERM/SIGINT), log.jsonl. --out: the best
checkpoint by mean eval accuracy (greedy diffusion decoding of held-out samples,
gen_length from meta, 2 tokens per step), as config.json, model.safetensors,
train_state.json, each replaced atomically.

--objective ar trains a causal next-token model instead (block-causal with blocks of 1; the
FlashDLM-style guide and the base a block-diffusion model is converted from): prompt ⊕ answer
(ending in its one EOS, no canvas padding), CE on the answer and EOS plus --prompt-loss-weight
times the prompt's mean CE; eval by greedy autoregressive decoding; exported as a Hugging Face
LlamaForCausalLM (pyllada/hf_llama.py). The batching, curriculum and recall warm-up are shared.

Resume (--resume): from <work>/ckpt.pt; if missing, from <out>/model.safetensors +
train_state.json with a fresh optimizer (a new short warmup).
"""
import argparse
import array
import json
import math
import os
import random
import shutil
import signal
import sys
import time


def _threads_from_argv(default=1):
    for i, a in enumerate(sys.argv):
        if a == "--threads" and i + 1 < len(sys.argv):
            return sys.argv[i + 1]
        if a.startswith("--threads="):
            return a.split("=", 1)[1]
    return str(default)


# torch.set_num_threads does not reach the system BLAS (Debian's torch calls
# libblas.so.3, which is OpenBLAS with its own thread pool once libopenblas is
# installed): pin every pool before torch is imported.
for _v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS"):
    os.environ.setdefault(_v, _threads_from_argv())

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))

from pyllada import safetensors_io as st  # noqa: E402
from pyllada.model import LLaDA, LLaDAConfig, save_pretrained  # noqa: E402
from pyllada.generate import generate_batch, generate_block_batch  # noqa: E402
from pyllada.hf_llama import config_from_llama, is_llama_dir, load_llama_into, save_llama  # noqa: E402
from recall import CopyGen, RecallGen  # noqa: E402

ARCH_KEYS = ("n_layers", "d_model", "n_heads", "mlp_hidden")


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", default="data/corpus")
    ap.add_argument("--out", default="models/llada-tiny")
    ap.add_argument("--work", default="train-out/llada-tiny")
    ap.add_argument("--resume", action="store_true", help="continue from ckpt.pt or the exported model")
    ap.add_argument("--seed", type=int, default=1)
    # architecture
    ap.add_argument("--n-layers", type=int, default=8)
    ap.add_argument("--d-model", type=int, default=128)
    ap.add_argument("--n-heads", type=int, default=4)
    ap.add_argument("--mlp-hidden", type=int, default=384)
    ap.add_argument("--rope-theta", type=float, default=10000.0)
    ap.add_argument("--init", choices=["torch", "scaled"], default="torch",
                    help="fresh weights: PyTorch's module defaults (after --seed) or init_weights (N(0, 1/fan_in), "
                         "depth-scaled residual outputs)")
    # optimisation
    ap.add_argument("--lr", type=float, default=1e-3,
                    help="2e-3 delays the recall circuit (docs/training.md)")
    ap.add_argument("--min-lr-frac", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--max-steps", type=int, default=20000, help="cosine schedule length; training stops there")
    ap.add_argument("--schedule", choices=["cosine", "constant"], default="cosine")
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--beta2", type=float, default=0.98)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--batch-tokens", type=int, default=4096, help="padded tokens per batch")
    ap.add_argument("--max-batch", type=int, default=128)
    ap.add_argument("--mask-eps", type=float, default=1e-3)
    ap.add_argument("--curriculum-start", type=float, default=0.05, help="length quantile eligible at step 0")
    ap.add_argument("--curriculum-steps", type=int, default=3000)
    ap.add_argument("--curriculum", choices=["linear", "adaptive"], default="adaptive",
                    help="linear: the quantile grows with the step; adaptive: it grows by --advance-by each "
                         "log interval whose content cross-entropy is below --advance-ce (stays on short "
                         "prompts until the model reads its prefix)")
    ap.add_argument("--advance-ce", type=float, default=1.0)
    ap.add_argument("--advance-by", type=float, default=0.05)
    ap.add_argument("--pretrain-frac", type=float, default=0.0,
                    help="share of samples that also get their prompt masked at the same ratio, with CE on those "
                         "tokens too (LLaDA's pretraining objective as an auxiliary task: ~100 predictions a sample, "
                         "most of them copy/lookup problems, instead of ~3)")
    ap.add_argument("--mask-count", action=argparse.BooleanOptionalAction, default=False,
                    help="LLaDA's lower-variance form of the same objective: mask exactly l ~ U{1..gen_length} "
                         "answer slots, weight gen_length/l (bounded by gen_length instead of 1/eps)")
    ap.add_argument("--stratified-t", action=argparse.BooleanOptionalAction, default=True,
                    help="draw the batch's mask ratios stratified over (0,1) (each still U(0,1)): lower-variance 1/t weights")
    ap.add_argument("--recall-frac", type=float, default=0.25,
                    help="fraction of steps trained on synthetic key→value recall in the corpus vocabulary "
                         "(recall.py), once the recall level reaches --recall-handover; 0 turns the warm-up off")
    ap.add_argument("--copy-frac", type=float, default=0.0,
                    help="--objective ar: fraction of steps trained on induction-style copies (recall.CopyGen: a "
                         "random span of name pieces, filler, then the span again, every copied token a target), "
                         "taken before the recall warm-up's share")
    ap.add_argument("--recall-early-frac", type=float, default=0.9,
                    help="the recall fraction below level --recall-handover (run J: the lookup circuit forms there)")
    ap.add_argument("--recall-handover", type=int, default=7,
                    help="recall level from which --recall-frac applies instead of --recall-early-frac")
    ap.add_argument("--recall-max-level", type=int, default=7,
                    help="highest recall level (RecallGen.LEVELS); 7, framed tables of single-piece names from the "
                         "whole pool, is the suites' shape since SuiteVersion 2 (single-token names)")
    ap.add_argument("--recall-advance-ce", type=float, default=0.15,
                    help="raise the recall level when a log interval's recall answer CE is below this")
    ap.add_argument("--recall-queries", type=int, default=1,
                    help="recall samples ask for up to this many keys at once (denser supervision)")
    ap.add_argument("--recall-numbers", type=float, default=0.0,
                    help="share of recall samples whose values are number tokens (teaches copying numbers)")
    ap.add_argument("--recall-sums", type=float, default=0.0,
                    help="share of recall samples that are bare worked sums (## 13 + 4 = 17) for the arithmetic suite")
    ap.add_argument("--recall-queues", type=float, default=0.0,
                    help="share of recall samples that are queues (the sequence and span suites' successor lookup: "
                         "the name right after one, or the m names after it)")
    ap.add_argument("--recall-queue-split", type=float, default=0.0,
                    help="block-causal: share of the queue samples placed (their position offset) so that a block "
                         "boundary falls between the queue and the asked name: the whole queue in earlier blocks, "
                         "which cannot see the question (the sequence and span suites' case; with a random offset a "
                         "short queue mostly shares the question's block and is read bidirectionally)")
    ap.add_argument("--sequence-bridge", type=float, default=0.0,
                    help="share of the corpus's sequence samples whose list is rewritten in one of the "
                         "--bridge-layouts (default: lookup rows '* a = b' or '* a, b', one per neighbour pair), "
                         "a share --bridge-lookup-q of their 'after' questions asked in the lookup suite's words: a "
                         "bridge from the table lookup the model has to the list's layout (docs/training.md, "
                         "'Why the queue suites stay low')")
    ap.add_argument("--span-bridge", type=float, default=0.0,
                    help="the same rewrite (--bridge-layouts) for a share of the span samples' lists; their "
                         "question is kept")
    ap.add_argument("--bridge-layouts", default="rows=1",
                    help="the rungs of the bridge and their weights, NAME=WEIGHT,...: rows ('\\n* a SEP b', SEP "
                         "'=' or ',' at random), lines ('\\n a SEP b', no row marker), chain ('a = b = c', the "
                         "list with '=' for its commas), chain-any (a chain whose separator is drawn per sample from eight "
                         "tokens, '=', '->', ':', ';', '/', '|', '+', '&': the comma held out), list (the suite's own "
                         "list: only the question changes)")
    ap.add_argument("--bridge-lookup-q", type=float, default=0.5,
                    help="share of the bridged sequence samples' 'after' questions asked in the lookup suite's "
                         "words ('What is the code for a?')")
    ap.add_argument("--sequence-max-names", type=int, default=0,
                    help="--suite-mix exact: only sequence samples whose list has at most this many names "
                         "(a curriculum over the list's length; 0: all)")
    ap.add_argument("--recall-t", type=float, default=1.0,
                    help="if > 0, recall answers are masked with this fixed ratio and weight 1 instead of "
                         "the SFT objective's t ~ U(0, 1) with 1/t (1: every answer slot masked, as in the probe)")
    ap.add_argument("--suite-weights", default="",
                    help="relative sampling weight per suite, e.g. arithmetic=2,rule=2 (default: balanced)")
    ap.add_argument("--suite-mix", choices=["window", "exact"], default="window",
                    help="how --suite-weights reach a batch: window (a window of the length-sorted corpus around a "
                         "weighted anchor: its neighbours dilute the weights, e.g. span=3 of 8 gives ~22%% of the "
                         "samples instead of 37.5%%) or exact (each batch's samples split over the suites by the "
                         "weights, each suite's share a window of its own length-sorted samples near the anchor's "
                         "length)")
    ap.add_argument("--canvas", default="",
                    help="answer canvas lengths to train on, e.g. 32,64,128,256 (EOS-padded, LLaDA SFT); "
                         "'' = the corpus's gen_length. A batch uses one canvas, raised to the smallest listed "
                         "length that holds its longest answer")
    ap.add_argument("--canvas-weights", default="", help="sampling weights of --canvas (default: equal)")
    ap.add_argument("--semi-ar-frac", type=float, default=0.0,
                    help="share of samples masked as semi-autoregressive decoding sees them: earlier blocks "
                         "clean, the current block masked at ratio t, later blocks fully masked")
    ap.add_argument("--semi-ar-blocks", default="16,32", help="block lengths of the semi-AR masking")
    ap.add_argument("--phase", default="",
                    help="name of a training phase: resuming a checkpoint of another phase restarts the "
                         "warm-up, the cosine (from this step to --max-steps) and the best-export record")
    ap.add_argument("--eval-gen-length", type=int, default=0, help="eval canvas (0: the corpus's gen_length)")
    ap.add_argument("--init-from", default="",
                    help="without <work>/ckpt.pt: start from this model directory's weights (config.json, "
                         "model.safetensors, train_state.json) with a fresh optimizer, e.g. models/llada-tiny")
    # block diffusion (LLaDA 2.x / SDAR): block-causal attention, blocks absolute from position 0
    ap.add_argument("--block-causal", action="store_true",
                    help="train a block-diffusion model: the config gets block_causal/--block-size; each sample "
                         "trains one answer block b (earlier answer blocks clean, b masked at ratio t ~ U(0,1) with "
                         "1/t weights, the sequence cut after b), exactly the states block decoding visits; the eval "
                         "uses block decoding (--eval-decoding)")
    ap.add_argument("--block-size", type=int, default=32)
    ap.add_argument("--token-shift", action=argparse.BooleanOptionalAction, default=False,
                    help="with --block-causal: Fast-dLLM v2's token shift (config shift_logits): slot i is predicted "
                         "from row i-1, as a causal model predicts, so a model converted from an AR start keeps its "
                         "next-token head")
    ap.add_argument("--complementary-masks", action=argparse.BooleanOptionalAction, default=False,
                    help="with --block-causal: each sample is trained twice, its block masked by m and by the "
                         "complement of m (Fast-dLLM v2 / SDAR), so every slot of the block is a target")
    # autoregressive guide (FlashDLM-style verifier; the base a block-diffusion model is converted from)
    ap.add_argument("--objective", choices=["diffusion", "ar"], default="diffusion",
                    help="diffusion: LLaDA SFT (or block diffusion with --block-causal); ar: a causal next-token "
                         "model (block-causal with blocks of 1), CE on the answer and its one EOS, --prompt-loss-weight "
                         "on the prompt, greedy autoregressive eval, exported as a Hugging Face LlamaForCausalLM")
    ap.add_argument("--prompt-loss-weight", type=float, default=0.1,
                    help="ar: loss = mean answer CE + this x mean prompt CE (next-token on the prompt: dense signal "
                         "for the chat framing and prose, kept small because the tables' values are random and "
                         "their CE irreducible)")
    ap.add_argument("--block-decay", default="",
                    help="block-causal: larger blocks first, e.g. 128:250,64:250 = the phase's first 250 steps with "
                         "blocks of 128, the next 250 with 64, then --block-size (LLaDA 2.0's decaying block size: a "
                         "bidirectional start keeps part of its skill in large blocks); eval and export always use "
                         "--block-size")
    ap.add_argument("--block-pad-weight", type=float, default=0.15,
                    help="block-causal: sampling weight of an answer block holding only EOS padding (content blocks 1)")
    ap.add_argument("--eval-decoding", default="schedule,threshold",
                    help="block-causal eval decoders (comma list): schedule (steps from --tokens-per-step) and/or "
                         "threshold (--eval-threshold); the export keeps the best mean over them")
    ap.add_argument("--eval-threshold", type=float, default=0.95)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu",
                    help="where the model, its batches and the periodic eval run: cpu or cuda (cuda[:N]); masks and "
                         "batches are drawn on the CPU (same random streams), the forward, backward and decoding run "
                         "there; on cuda the attention is fused (scaled_dot_product_attention) and fp32 matrix "
                         "products use TF32")
    ap.add_argument("--time-budget", type=float, default=0,
                    help="seconds of this process's training: the cosine runs over this wall time instead of "
                         "--max-steps, training stops when it is spent, then evaluates, exports if better and "
                         "checkpoints (0: off)")
    ap.add_argument("--curriculum-frac", type=float, default=0.4,
                    help="with --time-budget and --curriculum linear: the share of the budget over which the prompt "
                         "length quantile grows to 1")
    ap.add_argument("--recall-offset", action=argparse.BooleanOptionalAction, default=True,
                    help="block-causal: recall samples start at a random position in [0, block size) so that block "
                         "boundaries fall inside their short tables (rows in earlier blocks than the question: the "
                         "backwards lookup); without it a bare table sits in one bidirectional block")
    # evaluation / saving
    ap.add_argument("--eval-every", type=int, default=1000, help="steps between evaluations")
    ap.add_argument("--eval-seconds", type=float, default=0,
                    help="also evaluate when this many seconds of wall time passed since the last evaluation "
                         "(0: steps only)")
    ap.add_argument("--eval-per-suite", type=int, default=50)
    ap.add_argument("--eval-batch", type=int, default=16)
    ap.add_argument("--tokens-per-step", type=int, default=2, help="eval decoding: gen_length/steps")
    ap.add_argument("--block-length", type=int, default=0, help="eval decoding block length (0: meta or gen_length)")
    ap.add_argument("--ckpt-minutes", type=float, default=5.0)
    ap.add_argument("--log-every", type=int, default=25)
    ap.add_argument("--export-dtype", choices=["auto", "F32", "BF16"], default="auto",
                    help="auto: F32 if it fits 30 MB, else BF16 (eval then uses the bf16-rounded weights)")
    ap.add_argument("--max-hours", type=float, default=0, help="stop (after a checkpoint) after this many hours; 0 = no limit")
    ap.add_argument("--bench", type=int, default=0, help="run N steps, print tokens/s, write nothing")
    return ap.parse_args(argv)


# ----------------------------------------------------------------------------- data
class Corpus:
    """A jsonl split held as numpy arrays: prompts flat + offsets, answers [N, G]."""

    def __init__(self, path, gen_length, eos, suites=None):
        if not os.path.exists(path) and os.path.exists(path[:-len(".jsonl")] + ".npz"):
            self._load_npz(path[:-len(".jsonl")] + ".npz", gen_length, eos, suites)
            return
        flat, offs = array.array("i"), [0]
        plen, ans, alen, suite, level = [], array.array("i"), [], [], []
        self.suites = list(suites or [])
        self.skipped = 0
        with open(path) as f:
            for line in f:
                if not line.strip():
                    continue
                r = json.loads(line)
                a = r["answer"]
                if len(a) > gen_length:
                    self.skipped += 1
                    continue
                if r["suite"] not in self.suites:
                    self.suites.append(r["suite"])
                flat.extend(r["ids"])
                offs.append(len(flat))
                plen.append(len(r["ids"]))
                ans.extend(a + [eos] * (gen_length - len(a)))
                alen.append(len(a))
                suite.append(self.suites.index(r["suite"]))
                level.append(int(r.get("level", -1)))
        self.flat = np.frombuffer(flat, dtype=np.int32).astype(np.int64) if len(flat) else np.zeros(0, np.int64)
        self.offs = np.asarray(offs, dtype=np.int64)
        self.plen = np.asarray(plen, dtype=np.int64)
        self.ans = np.frombuffer(ans, dtype=np.int32).astype(np.int64).reshape(-1, gen_length)
        self.alen = np.asarray(alen, dtype=np.int64)
        self.suite = np.asarray(suite, dtype=np.int64)
        self.level = np.asarray(level, dtype=np.int64)
        self.G, self.eos = gen_length, eos

    def _load_npz(self, path, gen_length, eos, suites):
        """The compact form pack_corpus.py writes (the same samples, for machines the jsonl is too large to carry)."""
        z = np.load(path)
        names = [str(x) for x in z["suites"]]
        alen = z["alen"].astype(np.int64)
        keep = alen <= gen_length
        self.skipped = int((~keep).sum())
        codes = z["suite"].astype(np.int64)[keep]
        u, first = np.unique(codes, return_index=True)
        self.suites = list(suites or [])
        for c in u[np.argsort(first)]:  # suites not given: in the order the kept samples show them, as the jsonl
            if names[c] not in self.suites:
                self.suites.append(names[c])
        offs = z["offs"].astype(np.int64)
        aoffs = z["aoffs"].astype(np.int64)
        flat, aflat = z["flat"].astype(np.int64), z["aflat"].astype(np.int64)
        idx = np.nonzero(keep)[0]
        plen = offs[1:] - offs[:-1]
        ans = np.full((len(alen), gen_length), eos, dtype=np.int64)
        r = np.repeat(np.arange(len(alen)), np.where(keep, alen, 0))
        src = np.arange(len(aflat)) if keep.all() else \
            np.concatenate([np.arange(aoffs[i], aoffs[i + 1]) for i in idx] + [np.zeros(0, np.int64)])
        ans[r, src - aoffs[:-1][r]] = aflat[src]
        if keep.all():
            self.offs, self.flat = offs, flat
        else:
            self.offs = np.concatenate([[0], np.cumsum(plen[idx])]).astype(np.int64)
            self.flat = np.concatenate([flat[offs[i]:offs[i + 1]] for i in idx] + [np.zeros(0, np.int64)])
        self.plen = plen[idx]
        self.ans = ans[idx]
        self.alen = alen[idx]
        remap = np.asarray([self.suites.index(nm) if nm in self.suites else -1 for nm in names], dtype=np.int64)
        self.suite = remap[z["suite"].astype(np.int64)[idx]]
        self.level = z["level"].astype(np.int64)[idx]
        self.G, self.eos = gen_length, eos

    def __len__(self):
        return len(self.plen)

    def prompt(self, i):
        return self.flat[self.offs[i]:self.offs[i + 1]]


def suite_weight_parts(args):
    """The entries of --suite-weights ("rule=2,arithmetic=2") as (entry, name, "=", weight text)."""
    for part in filter(None, (getattr(args, "suite_weights", "") or "").split(",")):
        name, eq, w = part.partition("=")
        yield part.strip(), name.strip(), eq, w


def suite_weight(args, suite):
    """The sampling weight of a suite from --suite-weights (suites not named weigh 1)."""
    for _, name, _, w in suite_weight_parts(args):
        if name == suite:
            return float(w)
    return 1.0


def check_suite_weights(args, suites):
    """Exit with a clear message if --suite-weights names a suite the corpus lacks
    or gives a weight that is not a positive number."""
    for part, name, eq, w in suite_weight_parts(args):
        try:
            ok = eq == "=" and float(w) > 0
        except ValueError:
            ok = False
        if not ok:
            sys.exit(f"--suite-weights: {part!r} is not NAME=WEIGHT with a positive weight")
        if name not in suites:
            sys.exit(f"--suite-weights: no suite {name!r} in the corpus (it has {', '.join(suites)})")


class Batcher:
    """Length-sorted windows around suite-balanced anchors, with a length curriculum."""

    def __init__(self, corpus, args, rng):
        self.c, self.a, self.rng = corpus, args, rng
        self.total_len = corpus.plen + corpus.G
        counts = np.bincount(corpus.suite, minlength=len(corpus.suites)).astype(np.float64)
        weights = np.asarray([suite_weight(args, s) for s in corpus.suites], dtype=np.float64)
        self.w = weights[corpus.suite] / np.maximum(counts[corpus.suite], 1)
        self.suite_w = np.where(counts > 0, weights, 0.0)  # --suite-mix exact: each batch split by these
        self.q = args.curriculum_start  # adaptive curriculum: eligible length quantile
        self.reshuffle()

    def reshuffle(self):
        tie = self.rng.random_sample(len(self.c))
        self.order = np.lexsort((tie, self.total_len))  # by length, random among equals
        self.sorted_len = self.total_len[self.order]
        self.cum_w = np.cumsum(self.w[self.order])
        # per suite: its samples in the same order (--suite-mix exact)
        self.by_suite = [self.order[self.c.suite[self.order] == s] for s in range(len(self.c.suites))]
        cap = getattr(self.a, "sequence_max_names", 0)
        if cap > 0 and getattr(self, "names", None) is not None:  # --sequence-max-names: short lists only
            s = self.c.suites.index("sequence")
            self.by_suite[s] = self.by_suite[s][self.names[self.by_suite[s]] <= cap]

    def set_bridge_vocab(self, bv):
        """The token ids of bridge_prompt and --bridge-layouts' rungs (parsed once: a bad entry exits here,
        before any step); counts each sequence sample's names (--sequence-max-names)."""
        self.bridge_mix = bridge_layouts(getattr(self.a, "bridge_layouts", "rows=1"))
        self.bridge_vocab = bv
        if getattr(self.a, "sequence_max_names", 0) > 0 and "sequence" in self.c.suites:
            self.names = np.full(len(self.c), -1, dtype=np.int64)
            for i in np.nonzero(self.c.suite == self.c.suites.index("sequence"))[0]:
                self.names[i] = list_len(self.c.prompt(i), bv)
            self.reshuffle()

    def limit(self, step):
        a = self.a
        if a.curriculum == "adaptive":
            return int(np.quantile(self.sorted_len, self.q))
        if getattr(self, "time_frac", None) is not None:  # --time-budget: the linear curriculum runs over wall time
            f = getattr(a, "curriculum_frac", 0.4)
            q = 1.0 if f <= 0 else min(1.0, a.curriculum_start + (1 - a.curriculum_start) * self.time_frac / f)
            return int(np.quantile(self.sorted_len, q))
        q = 1.0 if a.curriculum_steps <= 0 else min(1.0, a.curriculum_start + (1 - a.curriculum_start) * step / a.curriculum_steps)
        return int(np.quantile(self.sorted_len, q))

    def batch(self, step, G=None):
        n_elig = int(np.searchsorted(self.sorted_len, self.limit(step), side="right"))
        n_elig = max(n_elig, 1)
        u = self.rng.random_sample() * self.cum_w[n_elig - 1]
        anchor = int(np.searchsorted(self.cum_w[:n_elig], u, side="right"))
        anchor = min(anchor, n_elig - 1)
        L = int(self.sorted_len[anchor]) - self.c.G + (G or self.c.G)
        bs = max(1, min(self.a.max_batch, self.a.batch_tokens // L, n_elig))
        if getattr(self.a, "suite_mix", "window") == "exact":
            return self.exact_batch(self.limit(step), int(self.sorted_len[anchor]), bs)
        lo = anchor - self.rng.randint(0, bs)
        lo = min(max(lo, 0), n_elig - bs)
        return self.order[lo:lo + bs]

    def exact_batch(self, limit, length, bs):
        """--suite-mix exact: bs samples split over the suites by a multinomial draw with the suite
        weights (suites with no sample under the length limit left out); each suite's share is a
        window of its own length-sorted eligible samples around the anchor's length (prompt + G)."""
        elig = [int(np.searchsorted(self.total_len[o], limit, side="right")) for o in self.by_suite]
        w = np.asarray([wt if n > 0 else 0.0 for wt, n in zip(self.suite_w, elig)])
        if w.sum() <= 0:
            w = np.asarray([1.0 if n > 0 else 0.0 for n in elig])
        k = self.rng.multinomial(bs, w / w.sum())
        out = []
        for s, (o, n, ks) in enumerate(zip(self.by_suite, elig, k)):
            ks = min(int(ks), n)
            if ks == 0:
                continue
            lens = self.total_len[o[:n]]
            at = int(np.searchsorted(lens, length, side="left"))
            lo = min(max(at - self.rng.randint(0, ks), 0), n - ks)
            out.append(o[lo:lo + ks])
        return np.concatenate(out)

    def tensors(self, idx, G=None):
        c = self.c
        G = G or c.G
        return pack([self.prompt(i) for i in idx], [c.ans[i][:G] for i in idx], G, c.eos)

    def prompt(self, i):
        """Sample i's prompt; with --sequence-bridge / --span-bridge (and bridge_vocab set) a share of
        the sequence / span samples rewritten by bridge_prompt in one of --bridge-layouts."""
        c, bv = self.c, getattr(self, "bridge_vocab", None)
        suite = c.suites[c.suite[i]]
        frac = {"sequence": getattr(self.a, "sequence_bridge", 0.0),
                "span": getattr(self.a, "span_bridge", 0.0)}.get(suite, 0.0)
        if frac <= 0 or bv is None or self.rng.random_sample() >= frac:
            return c.prompt(i)
        names, w = self.bridge_mix
        layout = names[int(self.rng.choice(len(names), p=w))]
        return bridge_prompt(c.prompt(i), bv, self.rng, layout, getattr(self.a, "bridge_lookup_q", 0.5))


def bridge_vocab(tokenizer_json):
    """The token ids bridge_prompt needs, from a tokenizer.json."""
    with open(tokenizer_json) as f:
        t = json.load(f)
    v = dict(t["model"]["vocab"])
    for a in t.get("added_tokens", []):
        v[a["content"]] = a["id"]
    return {"v": v, "heads": {v[h] for h in ("Route", "Order", "Queue")},
            "lookq": [v[x] for x in ("What", "Ġis", "Ġthe", "Ġcode", "Ġfor")]}


BRIDGE_LAYOUTS = ("rows", "lines", "chain", "chain-any", "list")
CHAIN_SEPS = ("Ġ=", "Ġ->", ":", ";", "/", "|", "Ġ+", "&")  # chain-any's separators (not the list's comma)


def bridge_layouts(text):
    """--bridge-layouts "rows=1,chain=2" as (names, probabilities); exits on a bad entry."""
    names, w = [], []
    for part in filter(None, (x.strip() for x in text.split(","))):
        name, eq, wt = part.partition("=")
        try:
            ok = eq == "=" and float(wt) >= 0 and name in BRIDGE_LAYOUTS
        except ValueError:
            ok = False
        if not ok:
            sys.exit(f"--bridge-layouts: {part!r} is not LAYOUT=WEIGHT with LAYOUT one of {', '.join(BRIDGE_LAYOUTS)}")
        names.append(name)
        w.append(float(wt))
    if not names or sum(w) <= 0:
        sys.exit("--bridge-layouts: no layout with a positive weight")
    return names, [x / sum(w) for x in w]


def list_span(p, bv):
    """(h, e): the list's header index ("Queue" of "Queue: a, b, c.") and its closing period's."""
    v = bv["v"]
    h = next(j for j in range(len(p) - 1) if p[j] in bv["heads"] and p[j + 1] == v[":"])
    return h, h + 2 + p[h + 2:].index(v["."])


def list_len(p, bv):
    """How many names the list of prompt p holds."""
    p = [int(x) for x in p]
    h, e = list_span(p, bv)
    return sum(1 for x in p[h + 2:e] if x != bv["v"][","])


def bridge_prompt(p, bv, rng, layout="rows", lookup_q=0.5, sep=None):
    """A sequence or span prompt with its list ("Queue: a, b, c.") rewritten in one layout (the rungs
    from the lookup table to the list): rows "\n* a = b\n* b = c" (or with a comma for "="), lines
    "\n a = b\n b = c" (or a comma), chain "a = b = c", chain-any (a chain with one of CHAIN_SEPS,
    drawn per sample: a separator-agnostic successor, the comma held out), list (unchanged). A share lookup_q of the
    sequence suite's "after" questions ("Which guest comes right after a?") are asked as the lookup
    suite's ("What is the code for a?"); sep: the rows', lines' or chain's separator token (None: "="
    or "," at random, the chain's "="). The answer is unchanged."""
    v = bv["v"]
    p = [int(x) for x in p]
    h, e = list_span(p, bv)
    names = [x for x in p[h + 2:e] if x != v[","]]
    jq = max(j for j in range(len(p)) if p[j] in (v["Ġafter"], v["Ġbefore"]))
    chain_sep = v["Ġ="] if sep is None else sep
    if sep is None:
        sep = v["Ġ="] if rng.random_sample() < 0.5 else v[","]
    if layout == "rows":
        body = sum(([v["Ċ"], v["*"], a, sep, b] for a, b in zip(names, names[1:])), [])
    elif layout == "lines":
        body = sum(([v["Ċ"], a, sep, b] for a, b in zip(names, names[1:])), [])
    elif layout in ("chain", "chain-any"):
        cs = chain_sep if layout == "chain" else v[CHAIN_SEPS[rng.randint(len(CHAIN_SEPS))]]
        body = sum(([cs, n] if k else [n] for k, n in enumerate(names)), []) + [v["."]]
    elif layout == "list":
        body = p[h + 2:e + 1]
    else:
        raise ValueError(f"bridge layout {layout!r}")
    tail = p[e + 1:]
    if p[jq] == v["Ġafter"] and p[jq - 4] == v["Which"] and rng.random_sample() < lookup_q:
        tail = p[e + 1:jq - 4] + bv["lookq"] + p[jq + 1:]  # "Which <noun> comes right after" -> "What is the code for"
    return np.asarray(p[:h + 2] + body + tail, dtype=np.int64)


def pack(prompts, answers, G, eos):
    """Right-padded batch tensors: ids [B, n] (prompt ⊕ answer padded with eos to G
    slots, then zeros), valid [B, n] (the non-padding positions) and ans_pos [B, G]."""
    n = max(len(p) for p in prompts) + G
    B = len(prompts)
    ids = np.zeros((B, n), dtype=np.int64)
    valid = np.zeros((B, n), dtype=bool)
    ans_pos = np.zeros((B, G), dtype=np.int64)
    for j, (p, a) in enumerate(zip(prompts, answers)):
        P = len(p)
        ids[j, :P] = p
        ids[j, P:P + len(a)] = a
        ids[j, P + len(a):P + G] = eos
        valid[j, :P + G] = True
        ans_pos[j] = np.arange(P, P + G)
    return torch.from_numpy(ids), torch.from_numpy(valid), torch.from_numpy(ans_pos)


def parse_ints(text):
    return [int(x) for x in text.split(",") if x.strip()]


def canvases(args, G):
    """(lengths, probabilities) of --canvas / --canvas-weights; ([G], [1]) without them."""
    cs = parse_ints(args.canvas) if args.canvas else [G]
    w = [float(x) for x in args.canvas_weights.split(",")] if args.canvas_weights else [1.0] * len(cs)
    if len(w) != len(cs) or min(cs) <= 0 or min(w) < 0 or sum(w) <= 0:
        sys.exit(f"--canvas {args.canvas!r} / --canvas-weights {args.canvas_weights!r}: positive lengths, "
                 f"as many non-negative weights")
    return sorted(cs), [x / sum(w) for _, x in sorted(zip(cs, w))]


def raise_canvas(cs, g, need):
    """g, or the smallest length of cs that holds need answer tokens (the batch's longest answer)."""
    return g if g >= need else next((c for c in cs if c >= need), need)


def semi_ar_mask(m, p, G, blocks, frac, rng_t):
    """Rewrites rows of the mask m [B, G] (a share frac of them) into the states semi-AR decoding
    visits: a block length from blocks (those dividing G), a current block c, slots before it clean,
    slots in it masked with the row's ratio p, slots after it all masked. Returns (m, pslot [B, G]):
    each slot's masking probability, for the 1/p weight."""
    B = m.shape[0]
    pslot = p[:, None].expand(B, G).clone()
    bls = [b for b in blocks if G % b == 0 and b < G]
    if not bls or frac <= 0:
        return m, pslot
    rows = torch.nonzero(torch.rand(B, generator=rng_t) < frac).flatten().tolist()
    slot = torch.arange(G)
    for j in rows:
        bl = bls[int(torch.randint(len(bls), (1,), generator=rng_t))]
        c = int(torch.randint(G // bl, (1,), generator=rng_t))
        cur = (slot >= c * bl) & (slot < (c + 1) * bl)
        later = slot >= (c + 1) * bl
        m[j] = (cur & (torch.rand(G, generator=rng_t) < p[j])) | later
        if not bool(m[j].any()):
            m[j, c * bl] = True
        pslot[j] = torch.where(later, torch.ones(G), pslot[j])
    return m, pslot


# ----------------------------------------------------------------------------- model
def make_config(args, meta):
    V = int(meta["vocab_size"])
    E = (V + 63) // 64 * 64
    return LLaDAConfig(d_model=args.d_model, n_layers=args.n_layers, n_heads=args.n_heads,
                       n_kv_heads=args.n_heads, mlp_hidden_size=args.mlp_hidden, vocab_size=V,
                       embedding_size=E, rope_theta=args.rope_theta, rms_norm_eps=1e-5,
                       mask_token_id=int(meta["mask_id"]), eos_token_id=int(meta["eos_id"]),
                       pad_token_id=int(meta["eos_id"]), max_sequence_length=4096,
                       extra={k2: int(meta[k1]) for k1, k2 in (("bos_id", "bos_token_id"), ("eot_id", "eot_token_id"))
                              if k1 in meta})


def init_weights(m, seed):
    g = torch.Generator().manual_seed(seed)
    c = m.config
    with torch.no_grad():
        for name, p in m.named_parameters():
            if p.dim() == 1:
                p.fill_(1.0)
            elif name == "wte.weight":
                p.normal_(0, 1.0, generator=g)
            else:
                p.normal_(0, 1.0 / math.sqrt(p.shape[1]), generator=g)
        for b in m.blocks:  # residual branches start small (depth-scaled)
            b.attn_out.weight.mul_(1.0 / math.sqrt(2 * c.n_layers))
            b.ff_out.weight.mul_(1.0 / math.sqrt(2 * c.n_layers))


def param_groups(m, wd):
    decay, no = [], []
    for n, p in m.named_parameters():
        (decay if p.dim() == 2 and n != "wte.weight" else no).append(p)
    return [{"params": decay, "weight_decay": wd}, {"params": no, "weight_decay": 0.0}]


def block_size_at(step, args, phase_from=0):
    """The training block size at a step under --block-decay (size:steps,...), then --block-size."""
    k = step - phase_from
    for part in filter(None, args.block_decay.split(",")):
        size, _, n = part.partition(":")
        if k < int(n):
            return int(size)
        k -= int(n)
    return args.block_size


def lr_at(step, args, warm_from=0, phase_from=0, prog=None):
    """The learning rate at a step: linear warm-up, then the cosine over the phase's steps (or over
    prog, the spent share of --time-budget, when given)."""
    w = step - warm_from
    if w < args.warmup:
        f = (w + 1) / args.warmup
    else:
        f = 1.0
    if args.schedule == "cosine":
        if prog is None:
            prog = (step - phase_from) / max(1, args.max_steps - phase_from)
        prog = min(1.0, prog)
        f *= args.min_lr_frac + (1 - args.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * prog))
    return args.lr * f


def export_bytes(cfg):
    n = sum(v.numel() for v in LLaDA(cfg).hf_state_dict().values())
    return n * 4


# ----------------------------------------------------------------------------- train step
def mask_ratios(B, args, rng_t):
    """Per-sample masking probabilities p = (1−eps)·t + eps, t ~ U(0, 1); with
    --stratified-t the batch's t hold one draw from each of the B strata [i/B, (i+1)/B)."""
    t = torch.rand(B, generator=rng_t)
    if args.stratified_t:
        t = (torch.randperm(B, generator=rng_t) + t) / B
    return (1 - args.mask_eps) * t + args.mask_eps


def block_targets(ans_pos, alen, G, bs, pad_weight, rng_t):
    """Block-causal training states: per sample one answer block b among the (absolute, size bs)
    blocks that hold answer slots, content blocks weighted 1, EOS-only blocks pad_weight. Returns
    (inb [B, G]: answer slots in b, end [B]: the position after b's last answer slot)."""
    B = ans_pos.shape[0]
    P = ans_pos[:, 0]
    blk = torch.div(ans_pos, bs, rounding_mode="floor")                  # [B, G]
    first = torch.div(P, bs, rounding_mode="floor")
    nblk = (P + G - 1) // bs - first + 1                                  # answer blocks per sample
    K = int(nblk.max())
    k = torch.arange(K)[None]                                             # block offset from first
    last_content = (P + torch.as_tensor(alen) - 1) // bs - first          # block of the final EOS
    w = torch.where(k <= last_content[:, None], torch.ones(1), torch.full((1,), float(pad_weight)))
    w = torch.where(k < nblk[:, None], w, torch.zeros(1))
    b = first + torch.multinomial(w, 1, generator=rng_t).squeeze(1)
    inb = blk == b[:, None]
    end = torch.minimum(P + G, (b + 1) * bs)
    return inb, end


def loss_on(model, ids, valid, ans_pos, args, rng_t, mask_id, alen, G, suite=None, nsuites=0, fixed_t=0.0,
            semi_ar=0.0, block=0, pos_offset=None):
    """LLaDA SFT loss on one batch (with fixed_t > 0: every sample masked at that ratio,
    unweighted, for the recall warm-up; with block > 0, the block-diffusion states of
    block_targets, normalised by the answer slots of the trained blocks; pos_offset [B]: each
    sample's position ids start there instead of 0). The batch is drawn on the CPU and the
    forward runs on the model's device. Returns (loss, stats); on a CUDA device the CE sums in
    stats are device tensors (no synchronisation per step), on the CPU floats."""
    B, n = ids.shape
    dev = next(model.parameters()).device
    num = float if dev.type == "cpu" else (lambda t: t.detach())
    denom = B * G
    if block > 0 and not fixed_t:
        p = mask_ratios(B, args, rng_t)
        inb, end = block_targets(ans_pos, alen, G, block, args.block_pad_weight, rng_t)
        m = inb & (torch.rand(B, G, generator=rng_t) < p[:, None])
        none = ~m.any(dim=1)
        m[none] = inb[none] & (torch.cumsum(inb[none].long(), dim=1) == 1)  # at least the block's first slot
        denom = int(inb.sum())
        if getattr(args, "complementary_masks", False):
            # Fast-dLLM v2 / SDAR: each sample twice, masked by m and by its complement in
            # the block (ratio 1 - p), so every slot of the block is a target once
            ids, valid, ans_pos, end = (torch.cat([t_, t_]) for t_ in (ids, valid, ans_pos, end))
            alen = np.concatenate([np.asarray(alen), np.asarray(alen)])
            if suite is not None:
                suite = np.concatenate([np.asarray(suite), np.asarray(suite)])
            if pos_offset is not None:
                pos_offset = torch.cat([torch.as_tensor(pos_offset)] * 2)
            m = torch.cat([m, inb & ~m])
            p = torch.cat([p, (1 - p).clamp(min=args.mask_eps)])
            B, denom = 2 * B, 2 * denom
        n = int(end.max())                          # later blocks cannot reach block b: cut them
        ids, ans_pos = ids[:, :n], ans_pos
        valid = valid[:, :n] & (torch.arange(n)[None] < end[:, None])
        semi_ar = 0.0
    elif fixed_t > 0:
        p = torch.full((B,), 1.0)
        m = torch.rand(B, G, generator=rng_t) < fixed_t
        m[:, 0] |= ~m.any(dim=1)  # at least one slot
    elif args.mask_count:  # l ~ U{1..G} slots masked without replacement; p = l/G
        l = 1 + (mask_ratios(B, args, rng_t) * G).long().clamp(max=G - 1)
        rank = torch.rand(B, G, generator=rng_t).argsort(dim=1).argsort(dim=1)
        m = rank < l[:, None]                                             # [B, G]
        p = l.float() / G
    else:
        p = mask_ratios(B, args, rng_t)
        m = torch.rand(B, G, generator=rng_t) < p[:, None]                # [B, G]
    pslot = None
    if semi_ar > 0 and not fixed_t:
        m, pslot = semi_ar_mask(m, p, G, parse_ints(args.semi_ar_blocks), semi_ar, rng_t)
    noisy = ids.clone()
    rows = torch.arange(B)[:, None].expand(B, G)
    mpos = ans_pos[m]
    mrow = rows[m]
    noisy[mrow, mpos] = mask_id
    pm = None
    if args.pretrain_frac > 0 and not fixed_t:  # auxiliary: mask prompt tokens (not BOS) of some samples too
        P = ans_pos[:, 0]
        col = torch.arange(n)[None]
        pt = torch.rand(B, generator=rng_t) < args.pretrain_frac
        pm = (col > 0) & (col < P[:, None]) & pt[:, None] & (torch.rand(B, n, generator=rng_t) < p[:, None])
        noisy[pm] = mask_id
    pos = torch.arange(n)
    if pos_offset is not None:
        pos = pos[None] + torch.as_tensor(pos_offset)[:, None]
    x = model(noisy.to(dev), pos=pos.to(dev), key_valid=valid, return_hidden=True)  # [B, n, d] (valid: moved there)
    h = x[mrow.to(dev), mpos.to(dev)]                                    # [M, d]
    logits = model.head(h)
    tgt = ids[mrow, mpos].to(dev)
    ce = F.cross_entropy(logits, tgt, reduction="none")                  # [M]
    w = (p[mrow] if pslot is None else pslot[m]).to(dev)
    loss = (ce / w).sum() / denom
    ce_prompt, n_prompt = 0.0, 0
    if pm is not None and bool(pm.any()):
        prow = torch.arange(B)[:, None].expand(B, n)[pm]
        cp = F.cross_entropy(model.head(x[pm.to(dev)]), ids[pm].to(dev), reduction="none")
        denom = float((P[pt] - 1).sum())
        loss = loss + (cp / p[prow].to(dev)).sum() / max(1.0, denom)
        ce_prompt, n_prompt = num(cp.sum()), int(pm.sum())
    slot = torch.arange(G)[None].expand(B, G)[m]
    content = slot < torch.as_tensor(alen)[mrow]
    if pm is not None:  # score the answer only where the prompt was clean (the SFT task)
        content &= ~pt[mrow]
    cd = content.to(dev)
    st_ = {"ce_content": num(ce[cd].sum()), "n_content": int(content.sum()),
           "ce_pad": num(ce[~cd].sum()), "n_pad": int((~content).sum()),
           "ce_prompt": ce_prompt, "n_prompt": n_prompt, "n_tokens": int(valid.sum())}
    if suite is not None:  # content CE per suite: which task is stuck
        srow = torch.as_tensor(suite)[mrow][content]
        cc = ce[cd].detach()
        sce = torch.zeros(nsuites, dtype=torch.float64, device=dev).index_add_(0, srow.to(dev), cc.double())
        st_["suite_ce"] = sce.tolist() if dev.type == "cpu" else sce
        st_["suite_n"] = torch.bincount(srow, minlength=nsuites).tolist()
    return loss, st_


def ar_targets(ans_pos, alen, valid):
    """--objective ar: which rows are scored. Row r's logits predict token r + 1. Returns
    (arow [B, G]: answer slot s < alen scored from row P + s - 1, i.e. the answer and its one
    EOS, never the canvas padding after it; prow [B, n]: rows 0..P-2, the prompt's next tokens)."""
    B, G = ans_pos.shape
    n = valid.shape[1]
    P = ans_pos[:, 0]
    arow = torch.arange(G)[None].expand(B, G) < torch.as_tensor(alen)[:, None]
    prow = torch.arange(n)[None] < (P - 1)[:, None]
    return arow, prow


def loss_ar(model, ids, valid, ans_pos, alen, prompt_w=0.0, suite=None, nsuites=0):
    """Next-token loss of a causal model on one batch (prompt ⊕ answer, answers ending in one EOS):
    mean CE over the answer tokens and their EOS (+ prompt_w x mean CE over the prompt's next
    tokens). Stats as loss_on's: content = answer tokens before the EOS, pad = the EOS."""
    B, n = ids.shape
    dev = next(model.parameters()).device
    num = float if dev.type == "cpu" else (lambda t: t.detach())
    arow, prow = ar_targets(ans_pos, alen, valid)
    x = model(ids.to(dev), key_valid=valid, return_hidden=True)        # [B, n, d]
    rows = torch.arange(B)[:, None].expand_as(ans_pos)
    r, c = rows[arow], ans_pos[arow]
    ce = F.cross_entropy(model.head(x[r.to(dev), (c - 1).to(dev)]), ids[r, c].to(dev), reduction="none")
    loss = ce.mean()
    ce_prompt, n_prompt = 0.0, 0
    if prompt_w > 0 and bool(prow.any()):
        pr = torch.arange(B)[:, None].expand(B, n)[prow]
        pc = torch.arange(n)[None].expand(B, n)[prow]
        cp = F.cross_entropy(model.head(x[pr.to(dev), pc.to(dev)]), ids[pr, pc + 1].to(dev), reduction="none")
        loss = loss + prompt_w * cp.mean()
        ce_prompt, n_prompt = num(cp.detach().sum()), int(prow.sum())
    slot = torch.arange(ans_pos.shape[1])[None].expand_as(ans_pos)[arow]
    content = slot < torch.as_tensor(alen)[r] - 1
    cd = content.to(dev)
    st_ = {"ce_content": num(ce[cd].detach().sum()), "n_content": int(content.sum()),
           "ce_pad": num(ce[~cd].detach().sum()), "n_pad": int((~content).sum()),
           "ce_prompt": ce_prompt, "n_prompt": n_prompt, "n_tokens": int(valid.sum())}
    if suite is not None:
        srow = torch.as_tensor(suite)[r][content]
        sce = torch.zeros(nsuites, dtype=torch.float64, device=dev).index_add_(0, srow.to(dev), ce[cd].detach().double())
        st_["suite_ce"] = sce.tolist() if dev.type == "cpu" else sce
        st_["suite_n"] = torch.bincount(srow, minlength=nsuites).tolist()
    return loss, st_


@torch.no_grad()
def greedy_ar(model, prompts, max_new, eos, stop_ids=()):
    """Greedy autoregressive decoding of a causal model, recomputing the whole sequence per
    token (right-padded batch; causal attention makes the padding invisible to real rows).
    Returns each prompt's new tokens, up to and including the first EOS (or a stop id)."""
    dev = next(model.parameters()).device
    seqs = [list(map(int, p)) for p in prompts]
    outs = [[] for _ in prompts]
    live = list(range(len(prompts)))
    stop = {eos, *stop_ids}
    for _ in range(max_new):
        if not live:
            break
        n = max(len(seqs[j]) for j in live)
        ids = torch.full((len(live), n), eos, dtype=torch.long)
        last = torch.zeros(len(live), dtype=torch.long)
        for k, j in enumerate(live):
            ids[k, :len(seqs[j])] = torch.as_tensor(seqs[j])
            last[k] = len(seqs[j]) - 1
        x = model(ids.to(dev), return_hidden=True)
        nxt = model.head(x[torch.arange(len(live), device=dev), last.to(dev)]).argmax(-1).tolist()
        keep = []
        for j, t in zip(live, nxt):
            outs[j].append(t)
            seqs[j].append(t)
            if t not in stop:
                keep.append(j)
        live = keep
    return outs


def evaluate_ar(model, corpus, order, args, G, stop_flag=None):
    """Held-out exact-match accuracy of a causal model under greedy decoding (up to G tokens)."""
    eos = model.config.eos_token_id
    t0 = time.time()
    r = suite_accuracy(corpus, order, args.eval_batch, G, eos, stop_flag,
                       lambda chunk: greedy_ar(model, [corpus.prompt(i) for i in chunk], G, eos))
    model.train()
    if r is None:
        return None
    acc, mean = r
    return {"acc": acc, "mean": mean, "n": len(order),
            "seconds": time.time() - t0, "steps": 0, "block_length": 1, "gen_length": G, "decoding": "greedy ar"}


# ----------------------------------------------------------------------------- eval
def eval_set(corpus, per_suite, seed):
    rng = np.random.RandomState(seed)
    idx = []
    for s in range(len(corpus.suites)):
        ii = np.nonzero(corpus.suite == s)[0]
        idx.extend(rng.permutation(ii)[:per_suite].tolist())
    return idx


def strip_eos(a, eos):
    a = list(a)
    return a[:a.index(eos)] if eos in a else a


def suite_accuracy(corpus, order, batch, G, eos, stop_flag, decode):
    """Exact-match accuracy per suite of decode(chunk) (one answer per sample of chunk, up to its
    EOS) over the samples order in chunks of batch, against their first G answer tokens ->
    (acc {suite: accuracy}, the mean over suites, 0 without any), or None once stop_flag() is true."""
    hits = {s: [0, 0] for s in corpus.suites}
    for k in range(0, len(order), batch):
        if stop_flag is not None and stop_flag():
            return None
        chunk = order[k:k + batch]
        for i, o in zip(chunk, decode(chunk)):
            s = corpus.suites[corpus.suite[i]]
            hits[s][1] += 1
            hits[s][0] += int(strip_eos(o, eos) == strip_eos(corpus.ans[i][:G], eos))
    acc = {s: h[0] / h[1] for s, h in hits.items() if h[1]}
    return acc, float(np.mean(list(acc.values()))) if acc else 0.0


@torch.no_grad()
def evaluate(model, corpus, idx, args, meta, stop_flag=None):
    model.eval()
    G = getattr(args, "eval_gen_length", 0) or int(meta["gen_length"])
    bl = args.block_length or int(meta.get("block_length", G))
    steps = max(1, G // args.tokens_per_step)
    nb = G // bl
    steps = max(nb, steps // nb * nb)
    eos = model.config.eos_token_id
    order = sorted(idx, key=lambda i: corpus.plen[i])
    if getattr(args, "objective", "diffusion") == "ar":
        return evaluate_ar(model, corpus, order, args, G, stop_flag)
    if model.config.block_causal:
        return evaluate_block(model, corpus, order, args, G, steps, stop_flag)
    t0 = time.time()
    r = suite_accuracy(corpus, order, args.eval_batch, G, eos, stop_flag,
                       lambda chunk: generate_batch(model, [corpus.prompt(i).tolist() for i in chunk], G, steps, bl,
                                                    pad_id=eos))
    if r is None:
        return None
    acc, mean = r
    model.train()
    return {"acc": acc, "mean": mean,
            "n": len(idx), "seconds": time.time() - t0, "steps": steps, "block_length": bl, "gen_length": G}


def evaluate_block(model, corpus, order, args, G, steps, stop_flag=None):
    """Held-out accuracy of a block-causal model under block decoding (generate_block_batch),
    per decoder of --eval-decoding; acc/mean are the first decoder's, "select" the mean over
    decoders (what the export keeps the best of)."""
    eos = model.config.eos_token_id
    decs = [d.strip() for d in args.eval_decoding.split(",") if d.strip()]
    t0 = time.time()
    by = {}
    for dec in decs:
        nfe, td = [], time.time()

        def decode(chunk):
            stats = {}
            outs = generate_block_batch(model, [corpus.prompt(i).tolist() for i in chunk], G, decoding=dec,
                                        threshold=args.eval_threshold, steps=steps, pad_id=eos, stats=stats)
            nfe.extend(stats["nfe"])
            return outs
        r = suite_accuracy(corpus, order, args.eval_batch, G, eos, stop_flag, decode)
        if r is None:
            model.train()
            return None
        acc, mean = r
        by[dec] = {"acc": acc, "mean": mean,
                   "nfe_mean": round(float(np.mean(nfe)), 2) if nfe else 0.0, "seconds": round(time.time() - td, 1)}
    model.train()
    first = by[decs[0]]
    return {"acc": first["acc"], "mean": first["mean"], "select": float(np.mean([b["mean"] for b in by.values()])),
            "by_decoding": by, "n": len(order), "seconds": time.time() - t0, "steps": steps,
            "block_length": model.config.block_size, "gen_length": G, "threshold": args.eval_threshold,
            "decoding": decs}


# ----------------------------------------------------------------------------- io
def atomic_json(obj, path):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)


def bf16_copy(model):
    import copy
    m2 = copy.deepcopy(model)
    with torch.no_grad():
        for p in m2.parameters():
            p.copy_(st.round_bf16(p))
    return m2


def export(model, args, state, dtype, tokenizer_dir=None):
    """The export into --out: config.json + model.safetensors (LLaDA's layout, or with --objective ar
    Hugging Face Llama's), train_state.json and the tokenizer files (from the corpus directory, else
    tokenizer_dir)."""
    os.makedirs(args.out, exist_ok=True)
    md = {"generator": "tools/train/train.py", "step": str(state["step"])}
    if getattr(args, "objective", "diffusion") == "ar":
        save_llama(model, args.out, dtype=dtype, metadata=md)
    else:
        save_pretrained(model, args.out, dtype=dtype,
                        metadata={"generator": "tools/train/train.py", "step": state["step"]})
    atomic_json(state, os.path.join(args.out, "train_state.json"))
    for name in ("tokenizer.json", "tokenizer_config.json"):
        dst = os.path.join(args.out, name)
        for d in (args.corpus, tokenizer_dir):
            src = os.path.join(d, name) if d else None
            if src and os.path.exists(src):
                if not os.path.exists(dst):
                    shutil.copyfile(src, dst)
                break


def save_ckpt(path, model, opt, meta_state, batcher_rng, rng_t):
    tmp = path + ".tmp"
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "state": meta_state,
                "config": model.config.to_json(), "torch_rng": torch.get_rng_state(),
                "rng_t": rng_t.get_state(), "np_rng": batcher_rng.get_state(),
                "py_rng": random.getstate()}, tmp)
    os.replace(tmp, path)


def split_offsets(off, ranges, bs, frac, rng_t):
    """--recall-queue-split: rewrites the position offsets off [B] of a share frac of the samples
    whose ranges entry is (lo, hi) so that a block starts at a prompt position b drawn from
    [lo, hi] (offset + b a multiple of bs): the queue before b lies in earlier blocks than the
    asked name. Entries None (not a queue) keep their offset."""
    if frac <= 0:
        return off
    for j, r in enumerate(ranges):
        if r is None or float(torch.rand(1, generator=rng_t)) >= frac:
            continue
        lo, hi = r
        b = lo + int(torch.randint(0, hi - lo + 1, (1,), generator=rng_t))
        off[j] = (-b) % bs
    return off


def recall_fraction(args, level):
    """The share of steps on the recall warm-up at a recall level: --recall-early-frac
    until the level reaches --recall-handover, --recall-frac from there (0 stays 0)."""
    if args.recall_frac <= 0:
        return 0.0
    return args.recall_early_frac if level < args.recall_handover else args.recall_frac


def below(ce_sum, n, threshold):
    """Whether a log interval's mean CE (ce_sum over n tokens) is below threshold; an
    interval that scored no tokens (every step of it on the other task) is not."""
    return n > 0 and ce_sum / n < threshold


def log(fh, rec):
    rec["time"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    fh.write(json.dumps(rec) + "\n")
    fh.flush()
    print(json.dumps(rec), flush=True)


# ----------------------------------------------------------------------------- main
def main(argv=None):
    args = parse_args(argv)
    if (args.token_shift or args.complementary_masks) and not args.block_causal:
        sys.exit("--token-shift and --complementary-masks train a block-diffusion model: add --block-causal")
    if args.copy_frac > 0 and args.objective != "ar":
        sys.exit("--copy-frac trains a causal model: add --objective ar")
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise SystemExit(f"--device {args.device}: no CUDA device is available to this PyTorch")
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    elif device.type != "cpu":
        raise SystemExit(f"--device {args.device!r}: cpu or cuda[:N]")
    with open(os.path.join(args.corpus, "meta.json")) as f:
        meta = json.load(f)
    G = int(meta["gen_length"])
    mask_id, eos = int(meta["mask_id"]), int(meta["eos_id"])
    cs, ps = canvases(args, G)
    Gmax = max(G, cs[-1], args.eval_gen_length)
    t_load = time.time()
    train = Corpus(os.path.join(args.corpus, "train.jsonl"), Gmax, eos, meta.get("suites"))
    evalc = Corpus(os.path.join(args.corpus, "eval.jsonl"), Gmax, eos, train.suites)
    print(f"corpus: {len(train)} train ({train.skipped} skipped: answer > gen_length {G}), {len(evalc)} eval, "
          f"suites {train.suites}, prompt len median {int(np.median(train.plen))} max {int(train.plen.max())}, "
          f"loaded in {time.time() - t_load:.1f}s", flush=True)

    cfg = make_config(args, meta)
    ckpt_path = os.path.join(args.work, "ckpt.pt")
    ckpt = None
    resumed_from = None
    if args.resume and os.path.exists(ckpt_path):
        ckpt = torch.load(ckpt_path, map_location="cpu", weights_only=False)  # our own file: RNG states too
        cfg = LLaDAConfig.from_json(ckpt["config"])
        resumed_from = ckpt_path
    elif args.init_from or (args.resume and os.path.exists(os.path.join(args.out, "model.safetensors")) and
                            os.path.exists(os.path.join(args.out, "train_state.json"))):
        resumed_from = args.init_from or args.out
        with open(os.path.join(resumed_from, "config.json")) as f:
            cj = json.load(f)
        cfg = config_from_llama(cj) if is_llama_dir(resumed_from) else LLaDAConfig.from_json(cj)
    ar = args.objective == "ar"
    if ar and args.block_causal:
        sys.exit("--objective ar is causal (block-causal with blocks of 1): drop --block-causal")
    if ar:  # causal = block-causal with blocks of 1
        cfg.block_causal, cfg.block_size, cfg.shift_logits = True, 1, False
    elif cfg.block_causal and cfg.block_size == 1 and not args.block_causal:
        sys.exit(f"{resumed_from} is a causal (AR) model: pass --objective ar")
    if args.block_causal:  # block diffusion (a bidirectional or causal start is adapted)
        cfg.block_causal, cfg.block_size, cfg.shift_logits = True, args.block_size, args.token_shift
    if cfg.vocab_size != int(meta["vocab_size"]) or cfg.mask_token_id != mask_id:
        raise SystemExit(f"checkpoint vocab/mask ({cfg.vocab_size}/{cfg.mask_token_id}) disagrees with "
                         f"{args.corpus}/meta.json ({meta['vocab_size']}/{mask_id}); use another --work/--out")

    torch.manual_seed(args.seed)
    model = LLaDA(cfg)
    if args.init == "scaled":
        init_weights(model, args.seed)
    model.to(device)
    opt = torch.optim.AdamW(param_groups(model, args.weight_decay), lr=args.lr, betas=(0.9, args.beta2), eps=1e-8)
    rng = np.random.RandomState(args.seed)
    rng_t = torch.Generator().manual_seed(args.seed + 1)
    random.seed(args.seed)
    state = {"step": 0, "samples": 0, "tokens": 0, "wall_seconds": 0.0, "best_mean": -1.0, "best_step": -1,
             "warm_from": 0, "eval": None}
    if ckpt is not None:
        model.load_state_dict(ckpt["model"])
        opt.load_state_dict(ckpt["opt"])
        state.update(ckpt["state"])
        torch.set_rng_state(ckpt["torch_rng"])
        rng_t.set_state(ckpt["rng_t"])
        rng.set_state(ckpt["np_rng"])
        random.setstate(ckpt["py_rng"])
    elif resumed_from is not None:
        if is_llama_dir(resumed_from):
            load_llama_into(model, resumed_from)
        else:
            sd = st.load_file(os.path.join(resumed_from, "model.safetensors"))
            model.load_hf_state_dict(sd, resumed_from)
        with open(os.path.join(resumed_from, "train_state.json")) as f:
            ts = json.load(f)
        for k in ("step", "samples", "tokens", "wall_seconds"):
            state[k] = ts.get(k, 0)
        state["best_mean"] = ts.get("eval", {}).get("mean", -1.0) if ts.get("eval") else -1.0
        state["best_step"] = state["step"]
        state["warm_from"] = state["step"]  # fresh optimizer: warm up again
    if args.phase and state.get("phase") != args.phase:  # a new phase: fresh warm-up, cosine and best export
        state.update(phase=args.phase, phase_from=state["step"], warm_from=state["step"], best_mean=-1.0,
                     best_step=-1)
    for g in opt.param_groups:
        g.setdefault("initial_lr", args.lr)

    nparams = sum(p.numel() for p in model.parameters())
    exp_dtype = args.export_dtype
    if exp_dtype == "auto":
        exp_dtype = "F32" if export_bytes(cfg) <= 30e6 else "BF16"
    print(f"model: {cfg.n_layers} layers, d {cfg.d_model}, heads {cfg.n_heads}, mlp {cfg.mlp_hidden_size}, "
          f"vocab {cfg.vocab_size} (rows {cfg.embedding_size}), {nparams / 1e6:.2f} M params, export {exp_dtype}; "
          f"resumed from {resumed_from} at step {state['step']}; device {device}"
          f"{' (' + torch.cuda.get_device_name(device) + ')' if device.type == 'cuda' else ''}", flush=True)

    check_suite_weights(args, train.suites)
    batcher = Batcher(train, args, rng)
    if args.sequence_max_names > 0 and args.suite_mix != "exact":
        sys.exit("--sequence-max-names needs --suite-mix exact")
    if args.sequence_bridge > 0 or args.span_bridge > 0 or args.sequence_max_names > 0:
        tok_dir = meta.get("tokenizer_dir", args.out)
        batcher.set_bridge_vocab(bridge_vocab(os.path.join(tok_dir if os.path.isabs(tok_dir) else os.path.join(ROOT, tok_dir),
                                                           "tokenizer.json")))
    recall = None
    if args.recall_frac > 0:
        tok_dir = meta.get("tokenizer_dir", args.out)
        if not os.path.isabs(tok_dir):
            tok_dir = os.path.join(ROOT, tok_dir)
        recall = RecallGen(os.path.join(tok_dir, "tokenizer.json"), min(G, cs[0]), eos, numbers=args.recall_numbers,
                           sums=args.recall_sums, queues=args.recall_queues)
        state.setdefault("recall_level", 0)
    copygen = None
    if args.copy_frac > 0:
        tok_dir = meta.get("tokenizer_dir", args.out)
        if not os.path.isabs(tok_dir):
            tok_dir = os.path.join(ROOT, tok_dir)
        rg = recall
        if rg is None and os.path.exists(os.path.join(tok_dir, "tokenizer.json")):
            rg = RecallGen(os.path.join(tok_dir, "tokenizer.json"), min(G, cs[0]), eos)
        if rg is not None:
            copygen = CopyGen(rg.first, rg.ans, rg.head[0])
        else:  # no tokenizer (a synthetic corpus): the answers' own tokens, after their first
            toks = np.unique(np.concatenate([np.asarray(a[1:]) for a in train.ans[:2000]]))
            first = np.bincount([int(a[0]) for a in train.ans[:2000]]).argmax()
            copygen = CopyGen(toks[toks != eos], first, int(meta.get("bos_id", train.ans[0][0])))
    if args.curriculum == "adaptive" and "curriculum_q" in state:
        batcher.q = state["curriculum_q"]
    eval_idx = eval_set(evalc, args.eval_per_suite, 12345)
    tokenizer_dir = meta.get("tokenizer_dir")  # the tokenizer the corpus was encoded with
    if tokenizer_dir and not os.path.isabs(tokenizer_dir):
        tokenizer_dir = os.path.join(ROOT, tokenizer_dir)
    ar_size_G = max(1, int(round(float(train.alen.mean())))) if ar else 0  # batch sizing: the mean answer
    os.makedirs(args.work, exist_ok=True)
    logf = open(os.path.join(args.work, "log.jsonl"), "a") if not args.bench else open(os.devnull, "w")
    command = "python3 tools/train/train.py " + " ".join(sys.argv[1:] if argv is None else argv)
    if not args.bench:
        log(logf, {"type": "start", "step": state["step"], "resumed_from": resumed_from, "params": nparams,
                   "config": cfg.to_json(), "args": vars(args), "pid": os.getpid()})

    stop = {"flag": False}

    def on_signal(signum, frame):
        stop["flag"] = True
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    def checkpoint():
        if args.bench:
            return
        save_ckpt(ckpt_path, model, opt, state, rng, rng_t)

    t_last_eval = [time.time()]

    def do_eval():
        t_last_eval[0] = time.time()
        em = bf16_copy(model) if exp_dtype == "BF16" else model
        r = evaluate(em, evalc, eval_idx, args, meta, stop_flag=lambda: stop["flag"])
        if r is None:
            return
        state["eval"] = r
        rec = {"type": "eval", "step": state["step"], "samples": state["samples"], **r}
        score = r.get("select", r["mean"])
        if score > state["best_mean"]:
            state["best_mean"], state["best_step"] = score, state["step"]
            ts = {"step": state["step"], "samples": state["samples"], "tokens": state["tokens"],
                  "wall_seconds": round(state["wall_seconds"], 1), "eval": r,
                  "eval_accuracy": r["acc"], "export_dtype": exp_dtype, "command": command,
                  "corpus": os.path.abspath(args.corpus), "corpus_meta": {k: v for k, v in meta.items() if len(json.dumps(v)) < 400}, "params": nparams,
                  "objective": ("autoregressive next-token (causal): CE on the answer and its one EOS"
                                + (f" + {args.prompt_loss_weight} x mean prompt CE" if args.prompt_loss_weight > 0 else "")
                                if ar else
                                f"block diffusion (block-causal, blocks of {cfg.block_size} from position 0): one answer "
                                "block per sample, earlier answer blocks clean, the block masked at t~U(0,1), CE / t "
                                "over the block's answer slots, sequence cut after the block; canvas EOS-padded"
                                if cfg.block_causal else
                                "LLaDA SFT: answer padded with EOS to gen_length, t~U(0,1), CE on masked answer / t / gen_length"),
                  "eval_decoding": (f"greedy autoregressive, up to {r['gen_length']} tokens" if ar else
                                    f"block decoding ({', '.join(r['decoding'])}; threshold {r.get('threshold')}), "
                                    f"gen_length {r['gen_length']}, steps {r['steps']}, block {r['block_length']}"
                                    if cfg.block_causal else
                                    f"greedy low-confidence remasking, gen_length {r['gen_length']}, steps {r['steps']}, block {r['block_length']}"),
                  "canvas": args.canvas, "semi_ar_frac": args.semi_ar_frac, "phase": state.get("phase", "")}
            export(model, args, ts, exp_dtype, tokenizer_dir=tokenizer_dir if ar else None)
            rec["exported"] = True
        log(logf, rec)

    def new_acc():  # sums over one log interval (CE sums may be device tensors: read once per log line)
        return {"loss": 0.0, "n": 0, "ce_content": 0.0, "n_content": 0, "ce_pad": 0.0, "n_pad": 0, "ce_prompt": 0.0,
                "n_prompt": 0, "tok": 0, "t": time.time(),
                "sce": torch.zeros(len(train.suites), dtype=torch.float64, device=device),
                "sn": [0] * len(train.suites), "rce": 0.0, "rn": 0, "cce": 0.0, "cn": 0}

    model.train()
    t_last_ckpt = time.time()
    t_start = time.time()
    wall0 = state["wall_seconds"]
    acc = new_acc()
    bench_t0, bench_tok = None, 0
    bench_from = state["step"]  # --bench counts its steps from here (a resumed run starts past 0)
    bench_warm = min(3, max(args.bench - 1, 0))  # untimed first steps
    if args.bench and not bench_warm:
        bench_t0 = time.time()
    budget_spent = hours_spent = False
    while (state["step"] < args.max_steps or args.bench) and not stop["flag"]:
        step = state["step"]
        if step % 1000 == 0:
            batcher.reshuffle()
        tprog = None
        if args.time_budget > 0:
            tprog = (time.time() - t_start) / args.time_budget
            if tprog >= 1.0:
                budget_spent = True
                break
            batcher.time_frac = tprog
        lr = lr_at(step, args, state["warm_from"], state.get("phase_from", 0), prog=tprog)
        for g in opt.param_groups:
            g["lr"] = lr
        if copygen is not None and rng.random_sample() < args.copy_frac:
            prompts, answers = copygen.batch(rng, args.batch_tokens, args.max_batch)
            answers = [a + [eos] for a in answers]
            ids, valid, ans_pos = pack(prompts, answers, max(len(a) for a in answers), eos)
            loss, s = loss_ar(model, ids, valid, ans_pos, np.array([len(a) for a in answers]), 0.0)
            idx = prompts
            acc["cce"] += s["ce_content"]
            acc["cn"] += s["n_content"]
            s = dict(s, ce_content=0.0, n_content=0, ce_pad=0.0, n_pad=0,
                     suite_ce=[0.0] * len(train.suites), suite_n=[0] * len(train.suites))
        elif recall is not None and rng.random_sample() < recall_fraction(args, state["recall_level"]):
            ranges = []
            prompts, answers = recall.batch(rng, state["recall_level"], args.batch_tokens, args.max_batch,
                                            args.recall_queries, ranges)
            Gr = recall.slots(state["recall_level"])
            ids, valid, ans_pos = pack(prompts, answers, Gr, eos)
            idx = prompts
            off = None
            if cfg.block_causal and not ar and args.recall_offset:
                off = torch.randint(0, cfg.block_size, (len(prompts),), generator=rng_t)
                split_offsets(off, ranges, cfg.block_size, args.recall_queue_split, rng_t)
            if ar:
                ids, valid, ans_pos = pack(prompts, answers, max(len(a) for a in answers), eos)
                loss, s = loss_ar(model, ids, valid, ans_pos, np.array([len(a) for a in answers]),
                                  args.prompt_loss_weight)
            else:
                loss, s = loss_on(model, ids, valid, ans_pos, args, rng_t, mask_id,
                                  np.array([len(a) for a in answers]), Gr, fixed_t=args.recall_t, pos_offset=off)
            acc["rce"] += s["ce_content"]
            acc["rn"] += s["n_content"]
            s = dict(s, ce_content=0.0, n_content=0, ce_pad=0.0, n_pad=0,
                     suite_ce=[0.0] * len(train.suites), suite_n=[0] * len(train.suites))
        elif ar:  # answer + its EOS only: no canvas padding
            idx = batcher.batch(step, ar_size_G)
            Ga = int(train.alen[idx].max())
            ids, valid, ans_pos = batcher.tensors(idx, Ga)
            loss, s = loss_ar(model, ids, valid, ans_pos, train.alen[idx], args.prompt_loss_weight,
                              train.suite[idx], len(train.suites))
        else:
            Gb = cs[int(rng.choice(len(cs), p=ps))]
            if cfg.block_causal:  # the training block size (--block-decay); eval/export restore --block-size
                cfg.block_size = block_size_at(step, args, state.get("phase_from", 0))
            idx = batcher.batch(step, min(Gb, 2 * cfg.block_size) if cfg.block_causal else Gb)  # sized to the cut
            Gb = raise_canvas(cs, Gb, int(train.alen[idx].max()))
            ids, valid, ans_pos = batcher.tensors(idx, Gb)
            loss, s = loss_on(model, ids, valid, ans_pos, args, rng_t, mask_id, train.alen[idx], Gb,
                              train.suite[idx], len(train.suites), semi_ar=args.semi_ar_frac,
                              block=cfg.block_size if cfg.block_causal else 0)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if args.clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        opt.step()
        if cfg.block_causal and not ar:
            cfg.block_size = args.block_size
        ntok = int(s.get("n_tokens", int(valid.sum())))
        state["step"] += 1
        state["samples"] += len(idx)
        state["tokens"] += ntok
        state["wall_seconds"] = wall0 + (time.time() - t_start)
        acc["loss"] += float(loss) if device.type == "cpu" else loss.detach()
        acc["n"] += 1
        acc["tok"] += ntok
        for k in ("ce_content", "n_content", "ce_pad", "n_pad", "ce_prompt", "n_prompt"):
            acc[k] += s[k]
        acc["sce"] += torch.as_tensor(s["suite_ce"], dtype=torch.float64, device=device)
        for j in range(len(train.suites)):
            acc["sn"][j] += s["suite_n"][j]
        if args.bench:
            if bench_warm and state["step"] - bench_from == bench_warm:
                bench_t0, bench_tok = time.time(), 0
            elif bench_t0 is not None:
                bench_tok += ntok
            if state["step"] - bench_from >= args.bench:
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                dt = time.time() - bench_t0
                print(json.dumps({"bench": {"layers": cfg.n_layers, "d": cfg.d_model, "heads": cfg.n_heads,
                                            "mlp": cfg.mlp_hidden_size, "params_M": round(nparams / 1e6, 2),
                                            "tokens_per_s": round(bench_tok / dt), "steps_per_min": round((args.bench - bench_warm) / dt * 60, 1),
                                            "batch_tokens": args.batch_tokens, "loss": round(float(acc["loss"]) / acc["n"], 3)}}))
                return
            continue
        if state["step"] % args.log_every == 0:
            for k in ("loss", "ce_content", "ce_pad", "ce_prompt", "rce"):  # one synchronisation per log line
                acc[k] = float(acc[k])
            sce = acc["sce"].tolist()
            dt = time.time() - acc["t"]
            log(logf, {"type": "train", "step": state["step"], "samples": state["samples"], "lr": lr,
                       "loss": acc["loss"] / acc["n"],
                       "ce_content": acc["ce_content"] / max(1, acc["n_content"]),
                       "ce_pad": acc["ce_pad"] / max(1, acc["n_pad"]),
                       "ce_prompt": round(acc["ce_prompt"] / max(1, acc["n_prompt"]), 3),
                       "ce_suite": {name: round(sce[j] / max(1, acc["sn"][j]), 3)
                                    for j, name in enumerate(train.suites)},
                       "tok_s": round(acc["tok"] / dt), "len_limit": batcher.limit(step),
                       "wall_h": round(state["wall_seconds"] / 3600, 3),
                       **({"ce_recall": round(acc["rce"] / max(1, acc["rn"]), 3), "recall_level": state["recall_level"]}
                          if recall is not None else {}),
                       **({"ce_copy": round(acc["cce"] / max(1, acc["cn"]), 3)} if copygen is not None else {})})
            if recall is not None and below(acc["rce"], acc["rn"], args.recall_advance_ce) and \
                    state["recall_level"] < min(args.recall_max_level, RecallGen.MAX_LEVEL):
                state["recall_level"] += 1
                log(logf, {"type": "recall_level", "step": state["step"], "level": state["recall_level"]})
            if args.curriculum == "adaptive" and batcher.q < 1.0 and \
                    below(acc["ce_content"], acc["n_content"], args.advance_ce):
                batcher.q = min(1.0, batcher.q + args.advance_by)
                state["curriculum_q"] = batcher.q
                log(logf, {"type": "curriculum", "step": state["step"], "q": batcher.q, "len_limit": batcher.limit(step)})
            acc = new_acc()
        if state["step"] % args.eval_every == 0 or (args.eval_seconds > 0 and
                                                      time.time() - t_last_eval[0] > args.eval_seconds):
            do_eval()
        if time.time() - t_last_ckpt > args.ckpt_minutes * 60:
            checkpoint()
            t_last_ckpt = time.time()
        if args.max_hours and time.time() - t_start > args.max_hours * 3600:
            hours_spent = ar  # the AR guide evaluates (and exports if better) before it stops, too
            break
    if not args.bench:
        if not stop["flag"] and (state["step"] >= args.max_steps or budget_spent or hours_spent):
            do_eval()
        checkpoint()
        log(logf, {"type": "stop", "step": state["step"], "signal": stop["flag"], "best_mean": state["best_mean"],
                   "best_step": state["best_step"]})


if __name__ == "__main__":
    main()
