#!/usr/bin/env python3
"""Writes model/testdata/kquants/: blocks of ggml's K-quants (Q3_K, Q4_K, Q5_K, Q6_K), of
IQ4_XS (super-blocks of 256 too, its 4-bit quants mapped to 16 int8 levels) and
of the 32-value types llama-quantize falls back to where a row is no whole
super-block (Q4_1, Q5_0, Q5_1, IQ4_NL), and their values, dequantized here from the public
block layout (ggml's block_q3_K, block_q4_K, block_q5_K, block_q6_K, block_iq4_xs, block_q4_1,
block_q5_0, block_q5_1, block_iq4_nl; gguf-py's quants.py computes the same), so that dlmcache's decoders
(model/gguf in Go, model/cpu in C) are held to a reference they do not share.

    python3 tools/kquants/make_golden.py            # from the repo root

Pure Python (struct only). Each float32 operation is done in Python's double and
rounded to float32 once, which is what one IEEE float32 operation gives; the
sub-block scales' products are exact in float32, so the only rounding step is
Q4_K's and Q5_K's subtraction of the minimum (not fused with the product).

Outputs, per type T in q4_k, q5_k, q6_k, q4_1, q5_0, q5_1, q3_k, iq4_xs, iq4_nl:
  T.bin   blocks (NBLOCKS of the K-quants, 8·NBLOCKS of 32 values: random bytes,
          seeded; the float16 scales set to chosen values: normal, negative,
          subnormal, zero)
  T.f32   their 256·NBLOCKS values, float32 little-endian
"""
import os
import random
import struct

NBLOCKS = 4
QK = 256
OUT = os.path.join("model", "testdata", "kquants")


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def half(b, off):
    return struct.unpack_from("<e", b, off)[0]


# The float16 scales of the blocks (d, and dmin where the type has it):
# ordinary, negative, a subnormal and zero.
HALVES = [(0.01234, 0.00321), (-0.5, 0.25), (3.0e-6, -1.5e-6), (0.0, 0.0078125)]


def scale_min_k4(j, q):
    """The 6-bit scale and minimum of sub-block j of Q4_K / Q5_K's 12 bytes."""
    if j < 4:
        return q[j] & 63, q[j + 4] & 63
    return (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4)


def deq_q4_k(b):
    # d, dmin (float16), scales[12], qs[128]
    d, dmin = half(b, 0), half(b, 2)
    sc, qs = b[4:16], b[16:144]
    y = []
    for j in range(4):  # 64 values per pair of sub-blocks
        s1, m1 = scale_min_k4(2 * j, sc)
        s2, m2 = scale_min_k4(2 * j + 1, sc)
        d1, mm1, d2, mm2 = f32(d * s1), f32(dmin * m1), f32(d * s2), f32(dmin * m2)
        q = qs[32 * j:32 * j + 32]
        y += [f32(f32(d1 * (v & 0xF)) - mm1) for v in q]
        y += [f32(f32(d2 * (v >> 4)) - mm2) for v in q]
    return y


def deq_q5_k(b):
    # d, dmin (float16), scales[12], qh[32], qs[128]
    d, dmin = half(b, 0), half(b, 2)
    sc, qh, qs = b[4:16], b[16:48], b[48:176]
    y = []
    for j in range(4):
        s1, m1 = scale_min_k4(2 * j, sc)
        s2, m2 = scale_min_k4(2 * j + 1, sc)
        d1, mm1, d2, mm2 = f32(d * s1), f32(dmin * m1), f32(d * s2), f32(dmin * m2)
        q = qs[32 * j:32 * j + 32]
        lo, hi = 1 << (2 * j), 2 << (2 * j)  # the high bit of each value, in qh
        y += [f32(f32(d1 * ((v & 0xF) + (16 if qh[l] & lo else 0))) - mm1) for l, v in enumerate(q)]
        y += [f32(f32(d2 * ((v >> 4) + (16 if qh[l] & hi else 0))) - mm2) for l, v in enumerate(q)]
    return y


def deq_q6_k(b):
    # ql[128] (low 4 bits), qh[64] (high 2 bits), scales[16] (int8), d (float16)
    ql, qh = b[0:128], b[128:192]
    sc = struct.unpack_from("<16b", b, 192)
    d = half(b, 208)
    y = [0.0] * QK
    for n in range(2):  # halves of 128 values
        L, H, S = ql[64 * n:64 * n + 64], qh[32 * n:32 * n + 32], sc[8 * n:8 * n + 8]
        for l in range(32):
            i = l // 16
            q1 = ((L[l] & 0xF) | (((H[l] >> 0) & 3) << 4)) - 32
            q2 = ((L[l + 32] & 0xF) | (((H[l] >> 2) & 3) << 4)) - 32
            q3 = ((L[l] >> 4) | (((H[l] >> 4) & 3) << 4)) - 32
            q4 = ((L[l + 32] >> 4) | (((H[l] >> 6) & 3) << 4)) - 32
            base = 128 * n
            y[base + l] = f32(f32(d * S[i]) * q1)
            y[base + l + 32] = f32(f32(d * S[i + 2]) * q2)
            y[base + l + 64] = f32(f32(d * S[i + 4]) * q3)
            y[base + l + 96] = f32(f32(d * S[i + 6]) * q4)
    return y


def deq_q3_k(b):
    # hmask[32] (each value's high bit), qs[64] (low 2 bits), scales[12]
    # (sixteen 6-bit scales, less 32), d (float16): value d·(sc − 32)·q,
    # q = low bits − 4 where the high bit is clear
    hm, qs, sc = b[0:32], b[32:96], b[96:108]
    d = half(b, 108)
    scales = [((sc[j % 8] >> (4 * (j // 8))) & 0xF) | (((sc[8 + j % 4] >> (2 * (j // 4))) & 3) << 4) for j in range(16)]
    y = []
    for v in range(QK):
        half_, shift, l = v // 128, (v % 128) // 32, v % 32
        q = ((qs[32 * half_ + l] >> (2 * shift)) & 3) - (0 if hm[l] >> (v // 32) & 1 else 4)
        y.append(f32(f32(d * (scales[v // 16] - 32)) * q))
    return y


# IQ4_NL's and IQ4_XS's sixteen int8 levels, the 4-bit quants' values.
IQ4_LEVELS = (-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113)


def deq_iq4_xs(b):
    # d (float16), scales_h (uint16: 2 high bits of each sub-block's scale),
    # scales_l[4] (4 low bits, two a byte), qs[128]: eight sub-blocks of 32,
    # value d·(ls − 32)·IQ4_LEVELS[q], q the low nibbles of 16 bytes, then
    # their high nibbles
    d = half(b, 0)
    sh = struct.unpack_from("<H", b, 2)[0]
    sl, qs = b[4:8], b[8:136]
    y = []
    for ib in range(8):
        ls = ((sl[ib // 2] >> (4 * (ib % 2))) & 0xF) | (((sh >> (2 * ib)) & 3) << 4)
        dl = f32(d * (ls - 32))
        q = qs[16 * ib:16 * ib + 16]
        y += [f32(dl * IQ4_LEVELS[v & 0xF]) for v in q]
        y += [f32(dl * IQ4_LEVELS[v >> 4]) for v in q]
    return y


def deq_iq4_nl(b):
    # d (float16), qs[16]: value d·IQ4_LEVELS[q], q as Q4_0's nibbles
    d = half(b, 0)
    return [f32(d * IQ4_LEVELS[q]) for q in nibbles(b[2:18])]


def nibbles(qs):
    """The 32 4-bit quants of a 32-value block's 16 bytes: low nibbles, then high."""
    return [v & 0xF for v in qs] + [v >> 4 for v in qs]


def fifth_bits(b, off):
    """Each of the 32 values' fifth bit (bit j of the little-endian uint32 at off) as 16."""
    qh = struct.unpack_from("<I", b, off)[0]
    return [16 if qh >> j & 1 else 0 for j in range(32)]


def deq_q4_1(b):
    # d, m (float16), qs[16]: value q·d + m
    d, m = half(b, 0), half(b, 2)
    return [f32(f32(d * q) + m) for q in nibbles(b[4:20])]


def deq_q5_0(b):
    # d (float16), qh (uint32), qs[16]: value (q − 16)·d, q with its fifth bit
    d = half(b, 0)
    return [f32((q + h - 16) * d) for q, h in zip(nibbles(b[6:22]), fifth_bits(b, 2))]


def deq_q5_1(b):
    # d, m (float16), qh (uint32), qs[16]: value q·d + m
    d, m = half(b, 0), half(b, 2)
    return [f32(f32(d * (q + h)) + m) for q, h in zip(nibbles(b[8:24]), fifth_bits(b, 4))]


TYPES = {
    # name: (bytes per block, values per block, where the float16 scales go, dequantizer)
    "q4_k": (144, QK, (0, 2), deq_q4_k),
    "q5_k": (176, QK, (0, 2), deq_q5_k),
    "q6_k": (210, QK, (208,), deq_q6_k),
    "q4_1": (20, 32, (0, 2), deq_q4_1),
    "q5_0": (22, 32, (0,), deq_q5_0),
    "q5_1": (24, 32, (0, 2), deq_q5_1),
    "q3_k": (110, QK, (108,), deq_q3_k),
    "iq4_xs": (136, QK, (0,), deq_iq4_xs),
    "iq4_nl": (18, 32, (0,), deq_iq4_nl),
}


def main():
    os.makedirs(OUT, exist_ok=True)
    rng = random.Random(51)
    for name, (size, values, offs, deq) in TYPES.items():
        raw, vals = bytearray(), []
        for k in range(NBLOCKS * QK // values):
            b = bytearray(rng.getrandbits(8) for _ in range(size))
            for off, h in zip(offs, HALVES[k % len(HALVES)]):
                struct.pack_into("<e", b, off, h)
            raw += b
            vals += deq(bytes(b))
        with open(os.path.join(OUT, name + ".bin"), "wb") as f:
            f.write(raw)
        with open(os.path.join(OUT, name + ".f32"), "wb") as f:
            f.write(struct.pack("<%df" % len(vals), *vals))


if __name__ == "__main__":
    main()
