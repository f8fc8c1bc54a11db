"""qparam math, fake quantization and flattening (RULES sections 3-5).

Reference-compatible signatures over the C++ core. Arguments may be numpy arrays or
CPU torch tensors; results are torch tensors when any tensor argument is a torch
tensor, numpy arrays otherwise (see qobs._tensors for bfloat16/float8 under numpy).
``mode="wide"`` selects the core's wide numeric mode (R0.4); the default
"parity" reproduces the reference.
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

from . import _qobs
from ._tensors import kind_of, to_kind
from .args import as_core_args

__all__ = [
    "calculate_qparams",
    "generate_gparam",
    "compute_dynamic_scales_and_zp",
    "fake_quantize",
    "quantize",
    "dequantize",
    "flatten_for_calibration",
    "generate_mx_scales",
]


def _dtype_name(dtype: Any) -> Optional[str]:
    return None if dtype is None else str(dtype)


def calculate_qparams(
    min_vals: Any,
    max_vals: Any,
    quantization_args: Any,
    global_scale: Any = None,
    *,
    mode: str = "parity",
) -> Tuple[Any, Any]:
    """R4.1: (scale, zero_point) from per-qparam min/max statistics."""
    s, z = _qobs.calculate_qparams(min_vals, max_vals, as_core_args(quantization_args), global_scale, mode)
    k = kind_of(min_vals, max_vals, global_scale)
    return to_kind(s, k), to_kind(z, k)


def generate_gparam(updated_min_val: Any, updated_max_val: Any, *, mode: str = "parity") -> Any:
    """R4.2: the FP4 global scale 448*6/absmax as float32 of shape (1,)."""
    g = _qobs.generate_gparam(updated_min_val, updated_max_val, mode)
    return to_kind(g, kind_of(updated_min_val, updated_max_val))


def compute_dynamic_scales_and_zp(value: Any, args: Any, module: Any = None, global_scale: Any = None, *,
                                  mode: str = "parity") -> Tuple[Any, Any]:
    """R4.3: run-time scales of dynamic quantization. `module` is accepted for the
    reference's signature; pass the module's global scale as `global_scale`."""
    s, z = _qobs.compute_dynamic_scales_and_zp(value, as_core_args(args), global_scale, mode)
    k = kind_of(value)
    return to_kind(s, k), to_kind(z, k)


def fake_quantize(
    x: Any,
    scale: Any,
    zero_point: Any,
    args: Any,
    g_idx: Any = None,
    global_scale: Any = None,
    *,
    mode: str = "parity",
) -> Any:
    """R5.1-R5.4 quantize-dequantize. Result dtype per Q18: x's dtype on the group
    paths, the (promoted) scale dtype otherwise."""
    r = _qobs.fake_quantize(x, scale, zero_point, as_core_args(args), g_idx, global_scale, None, mode)
    return to_kind(r, kind_of(x, scale))


def quantize(x: Any, scale: Any, zero_point: Any, args: Any, g_idx: Any = None, global_scale: Any = None,
             dtype: Any = None, *, mode: str = "parity") -> Any:
    """R5.1.2: values on the quantized grid, optionally cast to `dtype` (e.g. int8)."""
    r = _qobs.quantize(x, scale, zero_point, as_core_args(args), g_idx, global_scale, _dtype_name(dtype), mode)
    return to_kind(r, kind_of(x, scale))


def dequantize(x_q: Any, scale: Any, zero_point: Any = None, args: Any = None, g_idx: Any = None,
               global_scale: Any = None, dtype: Any = None, *, mode: str = "parity") -> Any:
    """R5.1.3 with known args; result dtype `dtype` (default: scale's dtype). Without args
    it raises ValueError, as the reference does (R5.6.1)."""
    if args is None:
        raise ValueError("qobs.dequantize: args is None; the quantization args cannot be inferred from "
                         "the shapes of x_q and scale (rule R5.6.1 in docs/RULES.md): pass args=")
    r = _qobs.dequantize(x_q, scale, zero_point, as_core_args(args), g_idx, global_scale, _dtype_name(dtype), mode)
    return to_kind(r, kind_of(x_q, scale))


def flatten_for_calibration(value: Any, base_name: str, args: Any, g_idx: Any = None) -> Any:
    """R3: `value` as (num_observations, *qparam_shape, group_len). Returned as a new
    contiguous array (the reference returns a view where torch can express one)."""
    r = _qobs.flatten_for_calibration(value, base_name, as_core_args(args), g_idx)
    return to_kind(r, kind_of(value))


def generate_mx_scales(x: Any, num_bits: int) -> Any:
    """R2.4.2 over per-group absmax values (biased exponents as floats)."""
    return to_kind(_qobs.generate_mx_scales(x, num_bits), kind_of(x))
