"""Minimal safetensors reading and writing for the reference scripts.

Debian's python3-torch has no `safetensors` module, and the format is
small: an 8-byte little-endian header length, a JSON header mapping each
tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets
relative to the end of the header), then the raw little-endian data.
"""
import json
import struct

import numpy as np
import torch

_DTYPES = {"F32": np.float32, "F64": np.float64, "I32": np.int32, "I64": np.int64, "U16": np.uint16,
           "U8": np.uint8}
_NAMES = {np.dtype(v): k for k, v in _DTYPES.items()}


def save(path, tensors, metadata=None):
    """Writes {name: tensor or ndarray} in name order (deterministic bytes)."""
    header, blobs, off = {}, [], 0
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name in sorted(tensors):
        t = tensors[name]
        a = t.detach().cpu().numpy() if isinstance(t, torch.Tensor) else np.asarray(t)
        a = np.ascontiguousarray(a)
        if a.dtype not in _NAMES:
            raise ValueError(f"{name}: unsupported dtype {a.dtype}")
        b = a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": _NAMES[a.dtype], "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def load(path):
    """Returns {name: torch tensor} (copies)."""
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        lo, hi = e["data_offsets"]
        a = np.frombuffer(data[base + lo:base + hi], dtype=np.dtype(_DTYPES[e["dtype"]]).newbyteorder("<"))
        out[name] = torch.from_numpy(a.reshape(e["shape"]).astype(_DTYPES[e["dtype"]]).copy())
    return out
