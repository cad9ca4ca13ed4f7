"""Minimal safetensors reader/writer (the `safetensors` package is not installed here).

File layout: 8-byte little-endian header length N, N bytes of JSON
{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}},
then the raw little-endian tensor bytes; offsets are relative to the end of the header.
"""
import json
import struct

import numpy as np
import torch

_NP = {"F32": np.float32, "F64": np.float64, "I64": np.int64, "I32": np.int32,
       "U8": np.uint8, "I8": np.int8, "F16": np.float16}


def f32_to_bf16_bits(a):
    """Round float32 array to bfloat16 (round-to-nearest-even); returns uint16 bits."""
    a = np.ascontiguousarray(a, dtype=np.float32)
    u = a.view(np.uint32).astype(np.uint64)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    nan = np.isnan(a)
    out = rounded.astype(np.uint16)
    out[nan] = 0x7FC0
    return out


def bf16_bits_to_f32(b):
    return (np.asarray(b, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def round_bf16(t):
    """torch tensor -> same tensor rounded through bf16 (float32 result)."""
    a = t.detach().to(torch.float32).cpu().numpy()
    return torch.from_numpy(bf16_bits_to_f32(f32_to_bf16_bits(a)).reshape(a.shape))


def save_file(tensors, path, dtype="F32", metadata=None, dtypes=None):
    """Write tensors (dict name -> torch.Tensor or np.ndarray) to path.

    dtype: "F32", "BF16" or "F16" for floating tensors; dtypes overrides per name.
    Tensors are written in sorted name order (as the HF library does).
    """
    header = {}
    blobs = []
    off = 0
    for name in sorted(tensors):
        t = tensors[name]
        a = t.detach().cpu().numpy() if isinstance(t, torch.Tensor) else np.asarray(t)
        dt = (dtypes or {}).get(name, dtype)
        if a.dtype.kind != "f":
            dt = {np.dtype(np.int64): "I64", np.dtype(np.int32): "I32"}[a.dtype]
            raw = np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<")).tobytes()
        elif dt == "BF16":
            raw = f32_to_bf16_bits(a.astype(np.float32)).astype("<u2").tobytes()
        elif dt == "F16":
            raw = np.ascontiguousarray(a, dtype="<f2").tobytes()
        elif dt == "F32":
            raw = np.ascontiguousarray(a, dtype="<f4").tobytes()
        else:
            raise ValueError(f"{path}: unsupported dtype {dt} for {name}")
        header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * ((8 - len(hb) % 8) % 8)  # align data to 8 bytes, as HF does
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for raw in blobs:
            f.write(raw)
    import os
    os.replace(tmp, path)


def load_file(path, return_dtypes=False):
    """Read a safetensors file into a dict of float32 (or integer) torch tensors."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError(f"{path}: truncated (no header length)")
    (n,) = struct.unpack("<Q", data[:8])
    if 8 + n > len(data):
        raise ValueError(f"{path}: header length {n} exceeds file size {len(data)}")
    header = json.loads(data[8:8 + n].decode())
    base = 8 + n
    out, dts = {}, {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        raw = data[base + b:base + e]
        dt, shape = info["dtype"], info["shape"]
        if dt == "BF16":
            a = bf16_bits_to_f32(np.frombuffer(raw, dtype="<u2"))
        elif dt in _NP:
            a = np.frombuffer(raw, dtype=np.dtype(_NP[dt]).newbyteorder("<")).astype(_NP[dt])
            if dt == "F16":
                a = a.astype(np.float32)
        else:
            raise ValueError(f"{path}: tensor {name}: unknown dtype {dt}")
        out[name] = torch.from_numpy(np.array(a).reshape(shape))
        dts[name] = dt
    if return_dtypes:
        return out, dts, header.get("__metadata__", {})
    return out
