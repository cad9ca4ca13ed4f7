"""Synthetic key→value recall samples in the corpus's own vocabulary and chat framing.

Every suite of the bundled corpus is a retrieval task (find the row of a table whose
key matches the question, copy what follows it). A small masked diffusion model
trained on the suites alone sits for thousands of steps on a plateau where it has
learnt the answers' format and marginal distribution but not the lookup (see
docs/training.md: the synthetic recall probe escapes its plateau only after ≈1,300
steps even with three single-token pairs). train.py --recall-frac mixes batches of
this task into training: short "Codes:" tables of names built from the tokenizer's
own lowercase pieces, a question naming one key, the answer "## value". Its
difficulty (rows, pieces per name) grows whenever the model's CE on it falls below
a threshold, so it is a warm-up that hands over to the real suites.
"""
import json
import re

import numpy as np


class RecallGen:
    """Builds recall samples from tokenizer.json; level 0 is 2–4 bare rows of
    single-piece names from the 24 most frequent word-initial pieces, later levels widen
    the pool, add the chat framing, then add rows and pieces (LEVELS)."""

    def __init__(self, tokenizer_json, gen_length, eos, numbers=0.0, sums=0.0, queues=0.0):
        with open(tokenizer_json) as f:
            t = json.load(f)
        self.vocab = dict(t["model"]["vocab"])
        for a in t.get("added_tokens", []):
            self.vocab[a["content"]] = a["id"]
        self.G, self.eos = gen_length, eos
        first = sorted(i for s, i in self.vocab.items() if re.fullmatch(r"Ġ[a-z]{1,4}", s))
        cont = sorted(i for s, i in self.vocab.items() if re.fullmatch(r"[a-z]{1,3}", s))
        if len(first) < 32 or len(cont) < 16:
            raise ValueError(f"{tokenizer_json}: too few lowercase pieces for recall names "
                             f"({len(first)} word-initial, {len(cont)} continuations)")
        first = [i for i in first if i != self.vocab.get("Ġand")]  # the multi-key question's joiner
        self.first, self.cont = np.asarray(first), np.asarray(cont)
        # numbers: the share of samples whose keys are capital letters and whose values
        # are the number tokens " 1" … " 49", as in the arithmetic suite's "let X = 17"
        # (a copy circuit learnt on lowercase names does not carry over to them).
        self.numbers = float(numbers)
        self.nums = np.asarray([self.vocab[f"Ġ{v}"] for v in range(1, 50) if f"Ġ{v}" in self.vocab])
        if self.numbers > 0 and len(self.nums) < 10:
            raise ValueError(f"{tokenizer_json}: too few single-token numbers for --recall-numbers ({len(self.nums)})")
        # sums: the share of samples that are a bare worked sum, "<|startoftext|>## 13 + 4 ="
        # with the answer "17": the arithmetic suite's answer without its lookup, so the
        # sum facts get hundreds of examples per batch instead of one per long sample.
        self.sums = float(sums)
        if self.sums > 0:  # a tokenizer without " +", " -", " =" can still serve the other samples
            self.plus, self.minus, self.eq = (self.enc(t)[0] for t in ("Ġ+", "Ġ-", "Ġ="))
        self.caps = np.asarray([self.vocab[f"Ġ{c}"] for c in "BCDEFGHJKLMNOPQRSTUVWXYZ" if f"Ġ{c}" in self.vocab])
        self.head = self.enc("<|startoftext|>", "<|start_header_id|>", "system", "<|end_header_id|>", "ĊĊ",
                             "Codes", ":", "Ċ")
        self.instr = self.enc("Ċ", "Answer", "Ġwith", "Ġ##", "Ġand", "Ġthen", "Ġthe", "Ġcode", ",", "Ġnothing",
                              "Ġelse", ".", "<|eot_id|>", "<|start_header_id|>", "user", "<|end_header_id|>", "ĊĊ")
        self.q = [self.enc("Which", "Ġcode", "Ġbelongs", "Ġto"), self.enc("What", "Ġis", "Ġthe", "Ġcode", "Ġfor")]
        self.tail = self.enc("?", "<|eot_id|>", "<|start_header_id|>", "assistant", "<|end_header_id|>", "ĊĊ")
        self.star, self.nl, self.ans = self.enc("*")[0], self.enc("Ċ")[0], self.enc("##")[0]
        self.comma, self.and_ = self.enc(","), self.enc("Ġand")
        self.seps = [self.enc(s) for s in ("Ġ=", "Ġ->", ":") if all(p in self.vocab for p in self.split(s))]
        # queues: the share of samples that are the sequence and span suites' task in the same
        # levels, "Queue: a, b, c, d." and "Which guest comes right after b?" -> "## c" (or the m
        # names after b, "## c, d"): the successor lookup, a circuit of its own under block-causal
        # attention (the queue's rows cannot see the question).
        self.queues = float(queues)
        if self.queues > 0:
            self.queue_head = self.enc("Queue", ":")
            self.period = self.enc(".")
            self.after = self.enc("Ġafter")
            self.q_one = self.enc("Which", "Ġguest", "Ġcomes", "Ġright", "Ġafter")
            self.q_many = (self.enc("L", "ist", "Ġthe"), self.enc("Ġgues", "ts", "Ġthat", "Ġcom", "e", "Ġright", "Ġafter"),
                           self.enc(",", "Ġin", "Ġorder", "."))
            self.instr_one = self.enc("Ċ", "Answer", "Ġwith", "Ġ##", "Ġand", "Ġthen", "Ġthe", "Ġname", ",", "Ġnothing",
                                      "Ġelse", ".", "<|eot_id|>", "<|start_header_id|>", "user", "<|end_header_id|>", "ĊĊ")
            self.instr_many = self.enc("Ċ", "Answer", "Ġwith", "Ġ##", "Ġand", "Ġthen", "Ġthe", "Ġnames", "Ġin", "Ġorder",
                                       ",", "Ġnothing", "Ġelse", ".", "<|eot_id|>", "<|start_header_id|>", "user",
                                       "<|end_header_id|>", "ĊĊ")

    def split(self, s):
        # "ĊĊ" may be one token or two
        return [s] if s in self.vocab else list(s)

    def enc(self, *pieces):
        out = []
        for p in pieces:
            parts = self.split(p)
            for q in parts:
                if q not in self.vocab:
                    raise ValueError(f"recall framing: token {q!r} not in the vocabulary")
                out.append(self.vocab[q])
        return out

    # level: (min rows, max rows, max pieces per name, pool of word-initial pieces, framed).
    # A small pool first: the recall probe forms its lookup circuit over 26 tokens in
    # ≈1,300 steps, the real vocabulary's hundreds of rare pieces keep it on the plateau.
    # The first levels are bare ("<|startoftext|>* k = v ... k?" with a 4-slot answer, the
    # probe's shape): every irrelevant token in the context lengthens the plateau
    # (docs/training.md, "Context dilutes the signal"), so the circuit forms there and the
    # chat framing and full answer window come after. Multi-piece names get a bare level
    # of their own too (level 8): run J sat on the framed one for 2,300 steps.
    LEVELS = [(2, 4, 1, 24, False), (2, 6, 1, 96, False), (2, 8, 1, 0, False),
              (2, 4, 1, 24, True), (2, 4, 1, 48, True), (2, 6, 1, 96, True), (2, 8, 1, 192, True),
              (2, 8, 1, 0, True), (2, 6, 2, 0, False), (2, 10, 2, 0, True), (3, 12, 2, 0, True), (4, 16, 3, 0, True),
              (6, 20, 3, 0, True)]
    MAX_LEVEL = len(LEVELS) - 1

    def shape(self, level):
        """(min rows, max rows, max pieces per name) at a level."""
        return self.LEVELS[level][:3]

    def framed(self, level):
        """Whether a level's samples carry the lookup suite's chat framing."""
        return self.LEVELS[min(level, self.MAX_LEVEL)][4]

    def slots(self, level):
        """Answer slots at a level: gen_length when framed, else the longest answer
        ("##", one value, EOS) plus one EOS pad, as in the probe."""
        level = min(level, self.MAX_LEVEL)
        return self.G if self.framed(level) else min(self.G, 2 + self.shape(level)[2] + 1)

    def pool(self, level):
        n = self.LEVELS[level][3]
        return (self.first, self.cont) if n <= 0 else (self.first[:n], self.cont[:n])

    def name(self, rng, pieces, pool):
        first, cont = pool
        n = 1 + rng.randint(0, pieces)
        return (int(first[rng.randint(len(first))]),) + \
            tuple(int(x) for x in cont[rng.randint(len(cont), size=n - 1)])

    # The sums' ranges: the arithmetic suite's (datasets/suites.go: constants 1–20,
    # operands 1–4).
    SUM_MAX_VALUE, SUM_MAX_OPERAND = 20, 4

    def sum_sample(self, rng):
        """A bare worked sum: prompt "<|startoftext|>## V op K =", answer "R" and EOS,
        laid out as the suite's answer "## V op K = R" so that R sits where it does there."""
        v = 1 + rng.randint(self.SUM_MAX_VALUE)
        k = 1 + rng.randint(self.SUM_MAX_OPERAND)
        minus = v > k and rng.randint(2) == 0
        r = v - k if minus else v + k
        ids = [self.head[0], self.ans, self.vocab[f"Ġ{v}"], self.minus if minus else self.plus,
               self.vocab[f"Ġ{k}"], self.eq]
        return ids, [self.vocab[f"Ġ{r}"], self.eos]

    def queue_sample(self, rng, level, ranges=None):
        """A queue of single-piece names (the level's pool, its row range + 2) and the question for
        the name right after one of them, or (half the time, where the answer window holds them)
        for the m names after it, in the sequence and span suites' words when the level is framed
        ("Queue: a, b, c." ... "Which guest comes right after a?" / "List the 2 guests that come
        right after a, in order."), bare otherwise ("<|startoftext|>Queue: a, b, c.\n after a?")."""
        lo, hi, _ = self.shape(level)
        first = self.pool(level)[0]
        framed, slots = self.framed(level), self.slots(level)
        rows = min(len(first), lo + 2 + rng.randint(0, hi - lo + 1))
        names = [int(x) for x in rng.choice(first, size=rows, replace=False)]
        i = rng.randint(rows - 1)
        most = min(rows - 1 - i, (slots - 1) // 2, 48)  # "##", m names, m-1 commas, EOS
        m = 1 if most < 2 or rng.random_sample() < 0.5 else 2 + rng.randint(most - 1)
        if m > 1 and f"Ġ{m}" not in self.vocab:
            m = 1
        ids = list(self.head[:-3]) if framed else [self.head[0]]  # the system header without "Codes:"
        ids += self.queue_head
        for n, x in enumerate(names):
            ids += ([self.comma[0]] if n else []) + [x]
        ids += self.period
        list_end = len(ids) - 1  # the "." that ends the queue
        if framed:
            ids += self.instr_one if m == 1 else self.instr_many
            if m == 1:
                ids += self.q_one + [names[i]] + self.tail
            else:
                ids += self.q_many[0] + [self.vocab[f"Ġ{m}"]] + self.q_many[1] + [names[i]] + self.q_many[2] + \
                    self.tail[1:]
        else:
            ids += [self.nl] + self.after + [names[i]] + self.tail[:1]
        if ranges is not None:  # where a block boundary separates the whole queue from the asked name
            ranges.append((list_end + 1, len(ids) - 1 - ids[::-1].index(names[i])))
        answer = [self.ans]
        for n, x in enumerate(names[i + 1:i + 1 + m]):
            answer += ([self.comma[0]] if n else []) + [x]
        return ids, answer + [self.eos]

    def sample(self, rng, level, queries=1, ranges=None):
        """One sample; with queries > 1 the user asks for up to that many distinct keys
        ("Which code belongs to a, b and c?") and the answer lists their values in order,
        which multiplies the supervised recall events per sample. ranges (a list) receives
        the sample's split range: for a queue (lo, hi), the prompt positions b with lo <= b <= hi
        at which a block starting puts the whole queue in earlier blocks than the asked name
        (the backwards successor lookup), None for the other kinds."""
        if self.queues > 0 and rng.random_sample() < self.queues:
            return self.queue_sample(rng, min(level, self.MAX_LEVEL), ranges)
        if ranges is not None:
            ranges.append(None)
        if self.sums > 0 and rng.random_sample() < self.sums:
            return self.sum_sample(rng)
        level = min(level, self.MAX_LEVEL)
        lo, hi, pieces = self.shape(level)
        pool = self.pool(level)
        rows = lo + rng.randint(0, hi - lo + 1)
        numeric = self.numbers > 0 and rng.random_sample() < self.numbers
        if numeric:
            rows = min(rows, len(self.caps))
        keys, vals = [], []
        while len(keys) < rows:
            k = (int(self.caps[rng.randint(len(self.caps))]),) if numeric else self.name(rng, pieces, pool)
            if k not in keys:
                keys.append(k)
                if numeric:
                    vals.append((int(self.nums[rng.randint(len(self.nums))]),))
                else:
                    vals.append(self.name(rng, min(pieces, self.G - 2), pool))
        sep = self.seps[rng.randint(len(self.seps))]
        framed = self.framed(level)
        ids = list(self.head) if framed else [self.head[0]]
        for k, v in zip(keys, vals):
            ids += [self.star, *k, *sep, *v, self.nl]
        nq = 1 + rng.randint(0, min(queries, rows))
        js = []
        for j in rng.permutation(rows):
            if len(js) < nq and 2 + sum(len(vals[i]) for i in js) + len(vals[j]) <= self.slots(level):
                js.append(int(j))
        if framed:
            ids += self.instr + self.q[rng.randint(len(self.q))]
        answer = [self.ans]
        for n, j in enumerate(js):
            if n:
                ids += self.comma if n < len(js) - 1 else self.and_
            ids += list(keys[j])
            answer += list(vals[j])
        ids += self.tail if framed else self.tail[:1]
        answer.append(self.eos)
        return ids, answer

    def batch(self, rng, level, batch_tokens, max_batch, queries=1, ranges=None):
        """Prompts and (unpadded) answers of one batch: samples are added while the batch,
        padded to its longest prompt plus slots(level), stays within batch_tokens. ranges (a
        list) receives each kept sample's split range (sample)."""
        prompts, answers = [], []
        n, G = 0, self.slots(level)
        while len(prompts) < max_batch:
            r = []
            p, a = self.sample(rng, level, queries, r)
            L = max(n, len(p) + G)
            if prompts and (len(prompts) + 1) * L > batch_tokens:
                break
            if ranges is not None:
                ranges.extend(r)
            prompts.append(p)
            answers.append(a)
            n = L
        return prompts, answers


class CopyGen:
    """Induction-style copy samples for a causal model (train.py --copy-frac): a random span
    of word-initial pieces (RecallGen's pool), some random filler pieces, "##", and the span
    again as the answer (then EOS). Every answer token is a target, so one sample gives a
    dozen lookups of "the token after the one I just wrote", the circuit every suite's copy
    needs (the list suites copy names, lookup copies a code after its name); the suites give
    one or a few such targets a sample."""

    def __init__(self, pool, sep, bos, min_len=4, max_len=24, max_filler=32):
        """pool: the token ids spans are drawn from (RecallGen's word-initial pieces); sep: the
        token before the copy ("##"); bos: the first token of every prompt."""
        self.pool, self.ans, self.head = np.asarray(pool), int(sep), [int(bos)]
        self.min_len, self.max_len, self.max_filler = min_len, max_len, max_filler

    def sample(self, rng):
        L = int(rng.randint(self.min_len, self.max_len + 1))
        span = rng.choice(self.pool, L).tolist()
        filler = rng.choice(self.pool, int(rng.randint(0, self.max_filler + 1))).tolist()
        cut = int(rng.randint(0, len(filler) + 1))
        prompt = list(self.head) + filler[:cut] + span + filler[cut:] + [int(self.ans)]
        return prompt, span

    def batch(self, rng, batch_tokens, max_batch):
        """Prompts and answers (the span, EOS appended by the caller's packing) of one batch
        within batch_tokens padded tokens."""
        prompts, answers, n = [], [], 0
        while len(prompts) < max_batch:
            p, a = self.sample(rng)
            L = max(n, len(p) + len(a) + 1)
            if prompts and (len(prompts) + 1) * L > batch_tokens:
                break
            prompts.append(p)
            answers.append(a)
            n = L
        return prompts, answers

