"""Array kinds in and out of the C++ core.

The extension reads numpy arrays (buffer protocol) and CPU torch tensors (data_ptr,
shape, stride) in place and returns owned ``_qobs.Tensor`` results. This module turns
those results into the kind the caller gave: torch in, torch out (in the dtype the
reference returns, e.g. bfloat16 scales or float8_e4m3fn zero points); otherwise numpy.

numpy has no bfloat16 and no float8: results of those dtypes come back to numpy users
widened to float32, which is exact (every bfloat16 and float8_e4m3fn value is a
float32 value), and ``qobs.Tensor.dtype`` of the raw result still names the original.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from . import _qobs

# dtypes whose buffer is exported as raw bits (no numpy equivalent).
_RAW_BITS = {"bfloat16": "int16", "float8_e4m3fn": "uint8"}


def _torch():
    # torch is optional: only consult it when the caller already imported it (a torch
    # tensor cannot exist otherwise), which also keeps `import qobs` cheap.
    return sys.modules.get("torch")


def is_torch(x: Any) -> bool:
    t = _torch()
    return t is not None and isinstance(x, t.Tensor)


def kind_of(*xs: Any) -> str:
    """"torch" if any argument is a torch tensor; "qobs" if the arrays given are
    qobs.Tensor objects (results stay qobs.Tensor, keeping bfloat16/float8 dtypes
    without torch); else "numpy"."""
    if any(is_torch(x) for x in xs):
        return "torch"
    given = [x for x in xs if x is not None]
    if given and all(isinstance(x, _qobs.Tensor) for x in given):
        return "qobs"
    return "numpy"


def to_numpy(t: _qobs.Tensor) -> np.ndarray:
    if t.dtype in _RAW_BITS:
        return np.asarray(t.to("float32"))
    return np.asarray(t)


def to_torch(t: _qobs.Tensor):
    torch = _torch()
    if torch is None:  # torch-kind output is only requested for torch input
        import torch  # noqa: F811
    raw = torch.from_numpy(np.asarray(t))  # shares the result's memory
    if t.dtype in _RAW_BITS:
        raw = raw.view(getattr(torch, t.dtype))
    return raw


def to_kind(t: _qobs.Tensor | None, kind: str):
    if t is None:
        return None
    if kind == "qobs":
        return t
    return to_torch(t) if kind == "torch" else to_numpy(t)


def _tensor_numpy(self):
    """This tensor as a numpy array (bfloat16/float8 widened exactly to float32)."""
    return to_numpy(self)


def _tensor_torch(self):
    """This tensor as a torch tensor of the same dtype, sharing memory."""
    return to_torch(self)


# faiss-style class wrapper: conveniences added to the extension's class in Python.
_qobs.Tensor.numpy = _tensor_numpy
_qobs.Tensor.torch = _tensor_torch
