"""LLaDA low-confidence remasking sampler (as in LLaDA's generate.py), batch size 1 or B.

Canvas = prompt ⊕ MASK×gen_length; gen_length splits into blocks of block_length
filled left to right; steps split evenly over blocks. In a block with M masked
positions at its start and s steps, step i commits M//s tokens, +1 for i < M%s.
Each step: x0 = argmax(logits [+ T·Gumbel]) over all embedding_size rows;
confidence = softmax(logits in fp64)[x0]; positions after the current block get
-inf; the top-k confident masked positions take x0.
"""
import numpy as np
import torch


def num_transfer_tokens(masked, steps):
    base, rem = divmod(int(masked), steps)
    return [base + (1 if i < rem else 0) for i in range(steps)]


def add_gumbel_noise(logits, temperature, generator=None):
    # LLaDA: exp(logits)/(-log u)^T in fp64, equivalent in argmax to logits + T*Gumbel.
    if temperature == 0:
        return logits
    logits = logits.to(torch.float64)
    u = torch.rand(logits.shape, dtype=torch.float64, generator=generator)
    g = (-torch.log(u)) ** temperature
    return logits.exp() / g


@torch.no_grad()
def generate(model, prompt, gen_length=16, steps=8, block_length=8, temperature=0.0,
             mask_id=None, remasking="low_confidence", pos=None, key_valid=None,
             trace=None, generator=None, tokens_per_step=None):
    """prompt: [B, P] int64 (same length, left context) -> full canvas [B, P+gen_length].

    trace, if a list, receives per step a dict with the committed positions and the
    canvas after the step (batch element 0). key_valid [B, P+gen] masks padding keys.
    """
    if prompt.dim() == 1:
        prompt = prompt[None]
    if mask_id is None:
        mask_id = model.config.mask_token_id
    B, P = prompt.shape
    x = torch.full((B, P + gen_length), mask_id, dtype=torch.long)
    x[:, :P] = prompt
    assert gen_length % block_length == 0, "gen_length must be a multiple of block_length"
    nblocks = gen_length // block_length
    assert steps % nblocks == 0, "steps must be a multiple of the number of blocks"
    spb = steps // nblocks
    for b in range(nblocks):
        lo, hi = P + b * block_length, P + (b + 1) * block_length
        ntt = [num_transfer_tokens((x[j, lo:hi] == mask_id).sum(), spb) for j in range(B)]
        for i in range(spb):
            mask_index = x == mask_id
            logits = model(x, pos=pos, key_valid=key_valid)
            noisy = add_gumbel_noise(logits, temperature, generator)
            x0 = torch.argmax(noisy, dim=-1)
            if remasking == "low_confidence":
                p = torch.softmax(logits.to(torch.float64), dim=-1)
                x0p = torch.gather(p, -1, x0[..., None]).squeeze(-1)
            elif remasking == "random":
                x0p = torch.rand(x0.shape, dtype=torch.float64, generator=generator)
            else:
                raise ValueError(remasking)
            x0p[:, hi:] = -np.inf
            x0 = torch.where(mask_index, x0, x)
            conf = torch.where(mask_index, x0p, torch.full_like(x0p, -np.inf))
            committed = []
            for j in range(B):
                k = ntt[j][i]
                if k == 0:
                    committed.append([])
                    continue
                _, sel = torch.topk(conf[j], k=k)
                x[j, sel] = x0[j, sel]
                committed.append(sorted(sel.tolist()))
            if trace is not None:
                trace.append({"block": b, "step": i, "committed": committed[0],
                              "canvas": x[0].tolist()})
    return x


@torch.no_grad()
def generate_batch(model, prompts, gen_length, steps, block_length, mask_id=None, pad_id=0,
                   key_valid_pad=True):
    """Greedy (temperature 0) low-confidence remasking for prompts of different lengths.

    Row j of the batch is prompt_j ⊕ MASK×gen_length ⊕ PAD×(P_max−P_j), positions
    0..P_j+gen_length−1 for the real tokens; padding keys are masked out, so each row
    decodes exactly as generate() would alone. Returns a list of answer id lists
    (gen_length each).
    """
    if mask_id is None:
        mask_id = model.config.mask_token_id
    B = len(prompts)
    lens = [len(p) for p in prompts]
    N = max(lens) + gen_length
    x = torch.full((B, N), pad_id, dtype=torch.long)
    valid = torch.zeros((B, N), dtype=torch.bool)
    pos = torch.zeros((B, N), dtype=torch.long)
    ans = torch.zeros((B, gen_length), dtype=torch.long)  # canvas index of answer slot i
    for j, p in enumerate(prompts):
        P = lens[j]
        x[j, :P] = torch.as_tensor(p)
        x[j, P:P + gen_length] = mask_id
        valid[j, :P + gen_length] = True
        pos[j, :P + gen_length] = torch.arange(P + gen_length)
        pos[j, P + gen_length:] = torch.arange(N - P - gen_length) + P + gen_length
        ans[j] = torch.arange(P, P + gen_length)
    dev = next(model.parameters()).device
    x, valid, pos, ans = x.to(dev), valid.to(dev), pos.to(dev), ans.to(dev)
    nblocks = gen_length // block_length
    assert gen_length % block_length == 0 and steps % nblocks == 0
    spb = steps // nblocks
    rows = torch.arange(B, device=dev)[:, None]
    for b in range(nblocks):
        # answer-slot indices of this block and of everything after it
        ntt = [num_transfer_tokens(int((x[j, ans[j, b * block_length:(b + 1) * block_length]] == mask_id).sum()), spb)
               for j in range(B)]
        for i in range(spb):
            logits = model(x, pos=pos, key_valid=valid if key_valid_pad else None)
            la = logits[rows, ans]                       # [B, G, E]
            xa = x[rows, ans]                            # [B, G]
            x0 = torch.argmax(la, dim=-1)
            p = torch.softmax(la.to(torch.float64), dim=-1)
            x0p = torch.gather(p, -1, x0[..., None]).squeeze(-1)
            x0p[:, (b + 1) * block_length:] = -np.inf
            m = xa == mask_id
            conf = torch.where(m, x0p, torch.full_like(x0p, -np.inf))
            for j in range(B):
                k = ntt[j][i]
                if k:
                    _, sel = torch.topk(conf[j], k=k)
                    x[j, ans[j, sel]] = x0[j, sel]
    return [x[j, ans[j]].tolist() for j in range(B)]


@torch.no_grad()
def generate_block_batch(model, prompts, gen_length, decoding="threshold", threshold=0.95, steps=None,
                         block_size=None, mask_id=None, eos_id=None, pad_id=0, trace=None, stats=None):
    """Block-diffusion decoding (LLaDA 2.x / SDAR) for a block-causal model, prompts of any lengths.

    Blocks are absolute (aligned at position 0, block_size from the config): the answer canvas
    prompt_j ⊕ MASK×gen_length is filled block by block, the first answer block
    [P//bs·bs, ...) also holding the prompt's tail (never masked); the canvas end may cut the
    last block short. Each step feeds the sequence only up to the end of the current block
    (later positions cannot reach it) and commits, among the block's masked slots:
      decoding="threshold": every slot whose confidence (softmax prob of its argmax over all
        embedding rows) is >= threshold, and at least the most confident one (LLaDA 2.x);
      decoding="schedule": the low-confidence fixed schedule: steps·bs/gen_length steps per
        block, step i commits num_transfer_tokens(masked in block, steps per block)[i] slots
        (steps committing nothing are skipped).
    A committed block never changes. A row stops after the block that completes an EOS run to
    the canvas end (its answer so far has an EOS and every slot after the first one is EOS): the
    rest of the canvas is filled with EOS. Returns a list of answer id lists (gen_length each).
    trace (a list) receives for row 0 per step {"block", "committed" (positions), "n" (length fed)};
    stats (a dict) receives "nfe" (forwards of each row) and "rows" (positions computed).
    """
    c = model.config
    bs = block_size or c.block_size
    if mask_id is None:
        mask_id = c.mask_token_id
    if eos_id is None:
        eos_id = c.eos_token_id
    spb = 0
    if decoding == "schedule":
        if not steps or (steps * bs) % gen_length:
            raise ValueError(f"schedule: steps·block_size ({steps}·{bs}) must be a multiple of gen_length {gen_length}")
        spb = steps * bs // gen_length
    elif decoding != "threshold":
        raise ValueError(f"decoding {decoding!r}: threshold or schedule")
    R = len(prompts)
    lens = [len(p) for p in prompts]
    ends = [P + gen_length for P in lens]
    N = max(ends)
    x = torch.full((R, N), pad_id, dtype=torch.long)
    for j, p in enumerate(prompts):
        x[j, :lens[j]] = torch.as_tensor(p)
        x[j, lens[j]:ends[j]] = mask_id
    dev = next(model.parameters()).device  # the canvas lives beside the weights (CPU or CUDA)
    x = x.to(dev)
    pos = torch.arange(N, device=dev)
    valid = pos[None] < torch.as_tensor(ends, device=dev)[:, None]
    cur = [P // bs for P in lens]
    done = [False] * R
    sched = {}
    nfe = [0] * R
    rows_computed = 0
    while True:
        act = [j for j in range(R) if not done[j]]
        if not act:
            break
        spans = {j: (max(lens[j], cur[j] * bs), min(ends[j], (cur[j] + 1) * bs)) for j in act}
        if spb:
            for j in act:
                if j not in sched:
                    lo, hi = spans[j]
                    sched[j] = [k for k in num_transfer_tokens(int((x[j, lo:hi] == mask_id).sum()), spb) if k]
        n = max(hi for _, hi in spans.values())
        ia = torch.as_tensor(act, device=dev)
        kv = valid[ia, :n]
        logits = model(x[ia, :n], pos=pos[:n], key_valid=None if bool(kv.all()) else kv)
        rows_computed += n * len(act)
        for r, j in enumerate(act):
            lo, hi = spans[j]
            nfe[j] += 1
            seg = x[j, lo:hi]
            m = seg == mask_id
            lg = logits[r, lo:hi]
            x0 = torch.argmax(lg, dim=-1)
            conf = torch.gather(torch.softmax(lg.to(torch.float64), dim=-1), -1, x0[:, None]).squeeze(-1)
            conf = torch.where(m, conf, torch.full_like(conf, -np.inf))
            if spb:
                _, sel = torch.topk(conf, k=sched[j].pop(0))
            else:
                sel = torch.nonzero(conf >= threshold).flatten()
                if sel.numel() == 0:
                    sel = torch.argmax(conf)[None]
            x[j, lo + sel] = x0[sel]
            if trace is not None and j == 0:
                trace.append({"block": cur[j], "committed": sorted((lo + sel).tolist()), "n": n})
            if bool((x[j, lo:hi] == mask_id).any()):
                continue
            sched.pop(j, None)
            a = x[j, lens[j]:hi]
            e = torch.nonzero(a == eos_id).flatten()
            if hi >= ends[j] or (e.numel() and bool((a[int(e[0]):] == eos_id).all())):
                x[j, hi:ends[j]] = eos_id
                done[j] = True
            else:
                cur[j] += 1
    if stats is not None:
        stats["nfe"] = nfe
        stats["rows"] = rows_computed
    return [x[j, lens[j]:ends[j]].tolist() for j in range(R)]
