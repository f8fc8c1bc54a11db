"""Pieces shared by the golden-vector generators (make_golden.py, make_golden_ct020.py).

Only torch is imported here, so that a generator that runs without llm-compressor
(compressed-tensors alone) can use it. The JSON schema is described in tools/README.md.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import zlib
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
OUT_DIR = REPO / "tests" / "golden"

F32, BF16, F16 = torch.float32, torch.bfloat16, torch.float16
FP8 = torch.float8_e4m3fn
DTYPES = [F32, BF16, F16]
DT_SHORT = {F32: "f32", BF16: "bf16", F16: "f16"}
DTYPE_NAME = {
    torch.float32: "float32",
    torch.bfloat16: "bfloat16",
    torch.float16: "float16",
    torch.float8_e4m3fn: "float8_e4m3fn",
    torch.int8: "int8",
    torch.uint8: "uint8",
    torch.int32: "int32",
    torch.int64: "int64",
}


def seed_of(*parts) -> int:
    return zlib.crc32("|".join(str(p) for p in parts).encode()) & 0x7FFFFFFF


class Store:
    """Content-addressed tensor table for one JSON file."""

    def __init__(self):
        self.tensors: dict[str, dict] = {}
        self._by_digest: dict[str, str] = {}

    def add(self, t: torch.Tensor, name: str) -> str:
        t = t.detach().cpu().contiguous()
        if t.dtype not in DTYPE_NAME:
            raise TypeError(f"unsupported dtype {t.dtype} for {name}")
        raw = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        key = DTYPE_NAME[t.dtype] + repr(list(t.shape))
        digest = hashlib.sha256(key.encode() + raw).hexdigest()
        if digest in self._by_digest:
            return self._by_digest[digest]
        tid = name
        n = 2
        while tid in self.tensors:
            tid = f"{name}~{n}"
            n += 1
        self.tensors[tid] = {
            "dtype": DTYPE_NAME[t.dtype],
            "shape": list(t.shape),
            "b64": base64.b64encode(raw).decode("ascii"),
        }
        self._by_digest[digest] = tid
        return tid

    def opt(self, t, name):
        return None if t is None else self.add(t, name)


def json_float(v):
    if isinstance(v, float) and not math.isfinite(v):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
    return v


def json_kwargs(kw: dict) -> dict:
    return {k: json_float(v) for k, v in kw.items()}


def dump_args(args) -> dict:
    """QuantizationArgs as the installed compressed-tensors serialises them (JSON mode)."""
    return args.model_dump(mode="json")


def zp_dtype_of(args) -> str:
    """The in-memory zp_dtype (model_dump writes null, or nothing, for symmetric args)."""
    return str(args.zp_dtype)


def exc_record(e: BaseException) -> dict:
    bases = [c.__name__ for c in type(e).__mro__[1:] if c not in (object, BaseException)]
    return {"exception": type(e).__name__, "exception_bases": bases, "message": str(e)}


def make_data(dist: str, shape, dtype, seed: int, channel_dim: int = -1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    shape = tuple(shape)
    mult = 0.25 if dtype == F16 else 1.0  # keep f16 error sums finite
    if dist == "gauss":
        x = torch.randn(shape, generator=g) * mult
    elif dist == "student_t":  # df = 3
        z = torch.randn(shape, generator=g)
        chi = sum(torch.randn(shape, generator=g) ** 2 for _ in range(3)) / 3.0
        x = z / chi.sqrt() * mult
    elif dist == "outlier":
        x = torch.randn(shape, generator=g) * mult
        n = shape[channel_dim]
        for c in sorted({1 % n, (n // 3) % n, (2 * n // 3 + 1) % n}):
            idx = [slice(None)] * len(shape)
            idx[channel_dim] = c
            x[tuple(idx)] *= 50.0
    elif dist == "const":
        x = torch.full(shape, 0.37)
    elif dist == "zero":
        x = torch.zeros(shape)
    elif dist == "tiny":
        x = 1e-3 + 1e-4 * torch.randn(shape, generator=g)
    else:
        raise ValueError(dist)
    return x.to(dtype)


def write_json(name: str, obj: dict) -> Path:
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    path = OUT_DIR / name
    text = json.dumps(obj, indent=None, separators=(",", ":"), allow_nan=False)
    path.write_text(text + "\n")
    return path
