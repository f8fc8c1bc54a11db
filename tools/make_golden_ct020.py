#!/usr/bin/env python3
"""Generate golden vectors for compressed-tensors 0.20.1 (MXFP6, the new config.json shape).

tools/make_golden.py records the 0.19.0 reference that qobs follows today; this script
records what 0.20.1 changed, so that the C++ side can follow it. It writes:

* mxfp6.json        (compressed-tensors alone): the FP6 E2M3 cast, the MX scale rule with
                    the element mantissa, MXFP6 qparams / fake_quantize / quantize, the
                    mxfp6-pack-quantized packing, errors and non-finite behaviour.
* ct020_configs.json (compressed-tensors alone): every preset's QuantizationArgs, the
                    quantization_config that ModelCompressor.update_config writes for a
                    tiny model quantized with each preset, and QuantizationArgs
                    serialisation cases.
* ct020_llmc.json   (llm-compressor 0.14.0.1 running on compressed-tensors 0.20.1):
                    MXFP6 weight observer cases in the observers.json schema, the
                    quantization_config that model_free_ptq writes for every preset, and
                    the observer="mse" rewrite error.

Run it with a virtual environment that has compressed-tensors 0.20.1 (see tools/README.md).
CI never runs it: its output is committed. Fixed seeds, one CPU thread, CPU tensors only.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import tempfile
import warnings
from pathlib import Path

os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")  # CPU (eager) reference only
os.environ.setdefault("TQDM_DISABLE", "1")  # progress bars of apply / compress / model_free_ptq

import torch  # noqa: E402

torch.set_num_threads(1)
warnings.filterwarnings("ignore")

import compressed_tensors  # noqa: E402
import pydantic  # noqa: E402
from compressed_tensors.compressors import BaseCompressor  # noqa: E402
from compressed_tensors.compressors.format import infer_module_format  # noqa: E402
from compressed_tensors.compressors.mxfp6.helpers import (  # noqa: E402
    kE2M3ToFloat,
    pack_fp6_to_uint8,
    unpack_fp6_from_uint8,
)
from compressed_tensors.quantization import (  # noqa: E402
    QuantizationArgs,
    QuantizationConfig,
    QuantizationScheme,
    preset_name_to_scheme,
)
from compressed_tensors.quantization.lifecycle import fake_quantize, quantize  # noqa: E402
from compressed_tensors.quantization.quant_scheme import PRESET_SCHEMES  # noqa: E402
from compressed_tensors.quantization.utils import (  # noqa: E402
    calculate_qparams,
    calculate_range,
)
from compressed_tensors.quantization.utils.fp6_utils import cast_to_fp6  # noqa: E402
from compressed_tensors.quantization.utils.mxfp_utils import (  # noqa: E402
    generate_mx_scales,
    round_to_power_2,
)
from loguru import logger  # noqa: E402

from golden_common import (  # noqa: E402
    BF16, DT_SHORT, DTYPES, F16, F32, REPO, Store, dump_args, exc_record,
    make_data, seed_of, write_json, zp_dtype_of,
)

logger.remove()  # the reference logs a warning for every fallback

REF_VERSION = "0.20.1"
try:
    import llmcompressor  # noqa: E402
except ImportError:  # the plain compressed-tensors 0.20.1 environment
    llmcompressor = None

GENERATOR = {
    "compressed_tensors": compressed_tensors.__version__,
    "torch": torch.__version__,
    "pydantic": pydantic.VERSION,
    "python": platform.python_version(),
    "script": "tools/make_golden_ct020.py",
    "cpu_capability": torch.backends.cpu.get_cpu_capability(),
}

# The scheme the MXFP6 cases use: the MXFP6A16 preset's weights (group 32, uint8 E8M0
# scales, symmetric, zp_dtype uint8 in memory).
MXFP6 = preset_name_to_scheme("MXFP6A16", ["Linear"]).weights
MXFP4 = preset_name_to_scheme("MXFP4A16", ["Linear"]).weights
MXFP8 = preset_name_to_scheme("MXFP8A16", ["Linear"]).weights
MX_ARGS = {6: MXFP6, 4: MXFP4, 8: MXFP8}
# mantissa width round_to_power_2 uses for each MX element width (generate_mx_scales)
ELEM_MANTISSA = {4: 1, 6: 3, 8: 1}

INT_VIEW = {F32: torch.int32, BF16: torch.int16, F16: torch.int16}
BITS = {F32: (8, 23), BF16: (8, 7), F16: (5, 10)}  # exponent, mantissa widths


def from_bits(patterns, dt) -> torch.Tensor:
    """Tensor of dtype dt whose elements have the given unsigned bit patterns."""
    width = 32 if dt == F32 else 16
    signed = [p - (1 << width) if p >= 1 << (width - 1) else p for p in patterns]
    return torch.tensor(signed, dtype=INT_VIEW[dt]).view(dt)


def nextafter(v: float, toward: float, dt) -> float:
    t = torch.tensor(v, dtype=dt)
    return torch.nextafter(t, torch.tensor(toward, dtype=dt)).item()


# ---------------------------------------------------------------------------
# mxfp6.json
# ---------------------------------------------------------------------------


def fp6_sweep_f32() -> torch.Tensor:
    """f32 inputs for the FP6 cast: every E2M3 value, every midpoint between neighbours and
    one ulp either side, the saturation region, subnormal f32, ±0, huge, ±inf, NaN and a
    random cloud."""
    table = kE2M3ToFloat.tolist()
    vals = []
    for i, a in enumerate(table):
        vals += [a, nextafter(a, 1e9, F32), nextafter(a, -1e9, F32)]
        if i + 1 < len(table):
            mid = (a + table[i + 1]) / 2
            vals += [mid, nextafter(mid, 1e9, F32), nextafter(mid, -1e9, F32)]
    vals += [7.625, 7.75, nextafter(7.75, 1e9, F32), nextafter(7.75, -1e9, F32), 7.9, 8.0,
             8.5, 11.0, 15.5, 16.0, 100.0, 448.0, 65504.0, 1e30, 3.4028234663852886e38]
    vals += [1e-45, 1e-40, 2.0 ** -126, 2.0 ** -127, 1e-30, 2.0 ** -24]
    vals = vals + [-v for v in vals] + [0.0, -0.0, float("inf"), float("-inf"), float("nan")]
    g = torch.Generator().manual_seed(seed_of("fp6_sweep"))
    vals += (torch.rand(3000, generator=g) * 18 - 9).tolist()
    vals += (torch.exp(torch.randn(1000, generator=g) * 4)
             * torch.sign(torch.randn(1000, generator=g))).tolist()
    return torch.tensor(vals, dtype=torch.float64).to(F32)


def all_16bit_nonnegative(dt) -> torch.Tensor:
    """Every 16-bit pattern with the sign bit clear, in order (the cast is sign-symmetric:
    copysign of the rounded magnitude; negative inputs are in the f32 sweep)."""
    return torch.arange(1 << 15, dtype=torch.int16).view(dt)


def amax_sweep(dt) -> torch.Tensor:
    """Non-negative amax values of dtype dt: for every exponent field (subnormal, every
    normal exponent, inf/NaN) the mantissa fields 0, 1, the FP4 and FP6 round-up
    thresholds (3/4 and 15/16 of the mantissa range) and one below each, and the largest;
    then named values and a random log-uniform cloud."""
    e_bits, m_bits = BITS[dt]
    m_max = (1 << m_bits) - 1
    mants = sorted({0, 1, (3 << m_bits) // 4 - 1, (3 << m_bits) // 4,
                    (15 << m_bits) // 16 - 1, (15 << m_bits) // 16, m_max})
    pats = [(e << m_bits) | m for e in range(1 << e_bits) for m in mants]
    named = [0.0, 7.5, 7.6, 7.75, 7.8, 8.0, 6.0, 7.0, 448.0, 1.0, 0.9375, 0.96875, 15.0,
             15.5, 1e-3, 1e-6, 2.0 ** -24, 2.0 ** -14, 2.0 ** -126, 2.0 ** -130]
    g = torch.Generator().manual_seed(seed_of("amax", dt))
    cloud = torch.exp(torch.randn(300, generator=g) * 8).tolist()
    return torch.cat([from_bits(pats, dt),
                      torch.tensor(named + cloud, dtype=torch.float64).to(dt).abs()])


class Mxfp6File:
    def __init__(self):
        self.st = Store()
        self.ids: set[str] = set()
        self.lists: dict[str, list] = {k: [] for k in (
            "code_cases", "round_cases", "qparams_cases", "fake_quant_cases",
            "quantize_cases", "pack_cases", "unpack_cases", "error_cases",
            "nonfinite_cases")}

    def uid(self, cid):
        assert cid not in self.ids, cid
        self.ids.add(cid)
        return cid

    def add(self, lst, case):
        self.lists[lst].append(case)

    # -- codes and the cast --------------------------------------------------
    def build_codes(self):
        st = self.st
        codes = torch.arange(64, dtype=torch.int32)
        word = codes.reshape(16, 4)
        word = word[:, 0] | word[:, 1] << 6 | word[:, 2] << 12 | word[:, 3] << 18
        packed = (torch.stack([word, word >> 8, word >> 16], -1) & 0xFF).to(torch.uint8)
        packed = packed.reshape(1, 48)
        dec = unpack_fp6_from_uint8(packed, 1, 64, dtype=F32)
        self.add("code_cases", {
            "id": self.uid("codes.all64"),
            "note": "bytes hold codes 0..63 in order, four per three bytes, little-endian "
                    "(c0 | c1<<6 | c2<<12 | c3<<18); decoded by unpack_fp6_from_uint8 and "
                    "packed again by pack_fp6_to_uint8",
            "table": st.add(kE2M3ToFloat.clone(), "codes.table"),
            "packed": st.add(packed, "codes.packed"),
            "decoded_f32": st.add(dec, "codes.decoded_f32"),
            "decoded_bf16": st.add(unpack_fp6_from_uint8(packed, 1, 64), "codes.decoded_bf16"),
            "repacked": st.add(pack_fp6_to_uint8(dec), "codes.repacked"),
        })

    def build_round(self):
        st = self.st

        def rc(cid, op, x, y, **extra):
            self.add("round_cases", {"id": self.uid(cid), "op": op, **extra,
                                     "x": st.add(x, f"{cid}.x"), "expect": st.add(y, f"{cid}.y")})

        x = fp6_sweep_f32()
        rc("round.fp6_cast.f32.sweep", "fp6_cast", x, cast_to_fp6(x.clone()))
        for dt in (BF16, F16):
            x = all_16bit_nonnegative(dt)
            rc(f"round.fp6_cast.{DT_SHORT[dt]}.all_nonnegative", "fp6_cast", x,
               cast_to_fp6(x.clone()), note="bit patterns 0x0000..0x7fff, in order")
        for dt in DTYPES:
            x = amax_sweep(dt)
            for m in (3, 1):
                rc(f"round.round_to_power_2.m{m}.{DT_SHORT[dt]}", "round_to_power_2",
                   x, round_to_power_2(x.clone(), m), elem_mantissa=m)
            for nb in (6, 4, 8):
                rc(f"round.mx_scales.b{nb}.{DT_SHORT[dt]}", "mx_scales", x,
                   generate_mx_scales(x.clone(), nb), num_bits=nb,
                   elem_mantissa=ELEM_MANTISSA[nb])

    # -- qparams -------------------------------------------------------------
    def qcase(self, cid, args, mn, mx, note=None, lst="qparams_cases"):
        st = self.st
        s, z = calculate_qparams(mn, mx, args)
        c = {"id": self.uid(cid), "args": dump_args(args), "args_zp_dtype": zp_dtype_of(args),
             "min": st.add(mn, f"{cid}.min"), "max": st.add(mx, f"{cid}.max"),
             "global_scale": None,
             "expect": {"scale": st.add(s, f"{cid}.scale"), "zero_point": st.add(z, f"{cid}.zp")}}
        if note:
            c["note"] = note
        self.add(lst, c)
        return s, z

    def build_qparams(self):
        shape = (6, 256)
        for dt in DTYPES:
            for dist in ("gauss", "student_t", "outlier", "const", "zero", "tiny"):
                w = make_data(dist, shape, dt, seed_of("mxfp6.qp", dist, dt))
                if dist == "gauss":  # one all-zero group, one positive-only, one negative-only
                    w[0, :32] = 0
                    w[1, 32:64] = w[1, 32:64].abs()
                    w[2, 64:96] = -w[2, 64:96].abs()
                    w[3, 96:128] = torch.tensor(-2.5, dtype=dt)
                wg = w.unflatten(-1, (-1, 32))
                for nb in (6, 4, 8) if dist in ("gauss", "outlier") else (6,):
                    self.qcase(f"qparams.mxfp{nb}.{DT_SHORT[dt]}.{dist}", MX_ARGS[nb],
                               wg.amin(-1), wg.amax(-1))
            # amax exactly at and around the MXFP6 / MXFP4 thresholds, as a max and as a
            # min (symmetric: the scale comes from max(|min|, |max|))
            edges = [0.0, 7.5, 7.6, 7.74, 7.75, 7.76, 7.8, 8.0, 3.75, 3.875, 3.9, 15.0, 15.5,
                     16.0, 6.0, 7.0, 448.0, 1.0, 1e-3, 1e-6, 2.0 ** -14, 2.0 ** -24,
                     2.0 ** -126, 1e-40, 1e4, 6e4]
            a = torch.tensor([edges], dtype=torch.float64).to(dt)
            for nb in (6, 4, 8):
                self.qcase(f"qparams.mxfp{nb}.{DT_SHORT[dt]}.edges_as_max", MX_ARGS[nb],
                           torch.zeros_like(a), a)
            self.qcase(f"qparams.mxfp6.{DT_SHORT[dt]}.edges_as_min", MXFP6, -a, torch.zeros_like(a))
            self.qcase(f"qparams.mxfp6.{DT_SHORT[dt]}.0dim", MXFP6,
                       torch.tensor(-7.8, dtype=dt), torch.tensor(1.0, dtype=dt))

    # -- fake_quantize / quantize ---------------------------------------------
    def fq(self, cid, x, s, z, args=MXFP6, note=None):
        st = self.st
        base = {"args": dump_args(args), "args_zp_dtype": zp_dtype_of(args),
                "x": st.add(x, f"{cid}.x"), "scale": st.add(s, f"{cid}.scale"),
                "zero_point": st.opt(z, f"{cid}.zp"), "global_scale": None}
        c = {"id": self.uid("fq." + cid), **base, "g_idx": None,
             "expect": st.add(fake_quantize(x, s, z, args), f"fq.{cid}.y")}
        q = {"id": self.uid("q." + cid), **base, "dtype": None,
             "expect": st.add(quantize(x, s, z, args), f"q.{cid}.y")}
        if note:
            c["note"] = q["note"] = note
        self.add("fake_quant_cases", c)
        self.add("quantize_cases", q)

    def build_fake_quant(self):
        for dt in DTYPES:
            for dist, shape in [("gauss", (4, 64)), ("student_t", (3, 96)), ("outlier", (2, 128)),
                                ("tiny", (2, 32)), ("const", (2, 64))]:
                x = make_data(dist, shape, dt, seed_of("mxfp6.fq", dist, dt))
                x[0, :4] = torch.tensor([0.0, -0.0, -1e-4, 1e-4])  # signed zeros through
                xg = x.unflatten(-1, (-1, 32))
                for shrink in (1.0, 0.5):  # 0.5 forces saturation at ±7.5
                    s, z = calculate_qparams(xg.amin(-1) * shrink, xg.amax(-1) * shrink, MXFP6)
                    cid = f"mxfp6.{DT_SHORT[dt]}.{dist}.{'x'.join(map(str, shape))}.shrink{shrink}"
                    self.fq(cid, x, s, z)
                    self.fq(cid + ".zp_none", x, s, None,
                            note="zero point None keeps the sign of zero (0.0 + zp turns -0 into +0)")
            # mixed dtypes: x and scale of different float dtypes
            x = make_data("gauss", (2, 64), dt, seed_of("mxfp6.mixed", dt))
            xg = x.unflatten(-1, (-1, 32))
            s, z = calculate_qparams(xg.amin(-1), xg.amax(-1), MXFP6)
            for sdt in DTYPES:
                if sdt != dt:
                    self.fq(f"mxfp6.mixed.x={DT_SHORT[dt]}.scale={DT_SHORT[sdt]}", x, s.to(sdt), z)
        # a 3-D activation-like input, as the MXFP6A8 / MXFP8 dynamic input path sees it
        x = make_data("gauss", (2, 3, 64), F32, seed_of("mxfp6.3d"))
        xg = x.unflatten(-1, (-1, 32))
        s, z = calculate_qparams(xg.amin(-1), xg.amax(-1), MXFP6)
        self.fq("mxfp6.f32.3d.2x3x64", x, s, z)

    # -- packing ----------------------------------------------------------------
    def build_pack(self):
        st = self.st
        scheme = preset_name_to_scheme("MXFP6A16", ["Linear"])
        comp = BaseCompressor.get_value_from_registry("mxfp6-pack-quantized")
        for dt in DTYPES:
            for shape, dist in [((4, 32), "gauss"), ((3, 64), "student_t"), ((8, 96), "outlier"),
                                ((16, 128), "gauss"), ((2, 256), "tiny"), ((5, 160), "zero")]:
                w = make_data(dist, shape, dt, seed_of("mxfp6.pack", dist, dt, shape))
                if dist != "zero":
                    w[0, :6] = torch.tensor([0.0, -0.0, -1e-5, 1e-5, 1e4, -1e4])
                wg = w.unflatten(-1, (-1, 32))
                s, z = calculate_qparams(wg.amin(-1), wg.amax(-1), MXFP6)
                cid = f"pack.mxfp6.{DT_SHORT[dt]}.{dist}.{shape[0]}x{shape[1]}"
                c = comp.compress({"weight": w, "weight_scale": s, "weight_zero_point": z}, scheme)
                d = comp.decompress(dict(c), scheme)
                self.add("pack_cases", {
                    "id": self.uid(cid),
                    "note": "MXFP6PackedCompressor.compress on {weight, weight_scale (float, as "
                            "calculate_qparams returns it), weight_zero_point}; then decompress",
                    "weight": st.add(w, f"{cid}.w"),
                    "weight_scale": st.add(s, f"{cid}.s"),
                    "codes": st.add(quantize(w, s, None, MXFP6), f"{cid}.codes"),
                    "compressed": {k: st.add(v, f"{cid}.c.{k}") for k, v in sorted(c.items())},
                    "decompressed": {k: st.add(v.data, f"{cid}.d.{k}") for k, v in sorted(d.items())},
                })
        # arbitrary bytes: every byte pattern is a valid set of codes
        g = torch.Generator().manual_seed(seed_of("mxfp6.unpack"))
        for m, n in [(1, 4), (3, 8), (4, 32), (2, 1024)]:
            a = torch.randint(0, 256, (m, 3 * n // 4), generator=g, dtype=torch.uint8)
            cid = f"unpack.{m}x{n}"
            f = unpack_fp6_from_uint8(a, m, n, dtype=F32)
            self.add("unpack_cases", {
                "id": self.uid(cid), "packed": st.add(a, f"{cid}.packed"), "rows": m, "cols": n,
                "decoded_f32": st.add(f, f"{cid}.f32"),
                "decoded_bf16": st.add(unpack_fp6_from_uint8(a, m, n), f"{cid}.bf16"),
                "repacked": st.add(pack_fp6_to_uint8(f), f"{cid}.repacked")})

    # -- errors and non-finite inputs -------------------------------------------
    def err(self, cid, kind, inputs, fn):
        try:
            fn()
        except Exception as ex:  # noqa: BLE001
            self.add("error_cases", {"id": self.uid(cid), "kind": kind, "inputs": inputs,
                                     **exc_record(ex)})
            return
        raise AssertionError(f"{cid} did not raise")

    def build_errors(self):
        st = self.st
        scheme = preset_name_to_scheme("MXFP6A16", ["Linear"])
        comp = BaseCompressor.get_value_from_registry("mxfp6-pack-quantized")
        for cols in (48, 16, 30):
            w = make_data("gauss", (2, cols), F32, seed_of("err.cols", cols))
            s = torch.ones(2, 1)
            ins = {"args": dump_args(MXFP6), "x": st.add(w, f"err.x{cols}"),
                   "scale": st.add(s, "err.s21")}
            self.err(f"fake_quant.mxfp6.cols={cols}", "fake_quant", ins,
                     lambda w=w, s=s: fake_quantize(w, s, None, MXFP6))
            self.err(f"compress.mxfp6.cols={cols}", "compress", ins,
                     lambda w=w, s=s: comp.compress({"weight": w, "weight_scale": s}, scheme))
        # the 0.19 exception for fewer columns than the group size is gone
        w = make_data("gauss", (2, 8), F32, 5)
        a16 = QuantizationArgs(num_bits=8, type="int", strategy="group", group_size=16)
        self.err("fake_quant.int8.cols_lt_group_size", "fake_quant",
                 {"args": dump_args(a16), "x": st.add(w, "err.x8"),
                  "scale": st.add(torch.ones(2, 1), "err.s21")},
                 lambda: fake_quantize(w, torch.ones(2, 1), None, a16))
        x6 = torch.zeros(2, 6)
        self.err("pack.cols_not_multiple_of_4", "pack", {"x": st.add(x6, "err.x6")},
                 lambda: pack_fp6_to_uint8(x6))
        mn, mx = torch.tensor([[-1.0]]), torch.tensor([[2.0]])
        for name, kw in [("fp6_asymmetric", dict(num_bits=6, type="float", symmetric=False)),
                         ("mxfp6_asymmetric", dict(num_bits=6, type="float", symmetric=False,
                                                   strategy="group", group_size=32,
                                                   scale_dtype=torch.uint8, zp_dtype=torch.uint8)),
                         ("fp4_asymmetric", dict(num_bits=4, type="float", symmetric=False,
                                                 strategy="group", group_size=16))]:
            a = QuantizationArgs(**kw)
            self.err(f"qparams.{name}", "qparams",
                     {"args": dump_args(a), "args_zp_dtype": zp_dtype_of(a),
                      "min": st.add(mn, "err.min"), "max": st.add(mx, "err.max")},
                     lambda a=a: calculate_qparams(mn, mx, a))
        a5 = QuantizationArgs(num_bits=5, type="float", zp_dtype=torch.float8_e4m3fn)
        self.err("range.float5", "range", {"args": dump_args(a5)},
                 lambda: calculate_range(a5, "cpu"))
        self.err("args.float5_no_zp_dtype", "args", {"args_kwargs": {"num_bits": 5, "type": "float"}},
                 lambda: QuantizationArgs(num_bits=5, type="float"))

    def build_nonfinite(self):
        """What the reference returns for NaN / ±inf (it never raises)."""
        st = self.st
        for dt in DTYPES:
            nan, inf = float("nan"), float("inf")
            mn = torch.tensor([[-1.0, nan, -inf, -1.0, nan, 0.0]], dtype=dt)
            mx = torch.tensor([[2.0, 1.0, 1.0, inf, nan, 0.0]], dtype=dt)
            self.qcase(f"nonfinite.qparams.mxfp6.{DT_SHORT[dt]}", MXFP6, mn, mx,
                       lst="nonfinite_cases",
                       note="NaN or an infinite bound gives E8M0 255, i.e. a scale of 2^128 "
                            "(inf in every float dtype); nothing raises")
            x = make_data("gauss", (2, 64), dt, seed_of("nf", dt))
            x[0, 3], x[0, 40], x[1, 5] = nan, inf, -inf
            xg = x.unflatten(-1, (-1, 32))
            s, z = calculate_qparams(xg.amin(-1), xg.amax(-1), MXFP6)
            for op, fn in (("fake_quantize", fake_quantize), ("quantize", quantize)):
                cid = f"nonfinite.{op}.mxfp6.{DT_SHORT[dt]}"
                self.add("nonfinite_cases", {
                    "id": self.uid(cid), "op": op, "args": dump_args(MXFP6),
                    "args_zp_dtype": zp_dtype_of(MXFP6), "x": st.add(x, f"{cid}.x"),
                    "scale": st.add(s, f"{cid}.scale"), "zero_point": st.add(z, f"{cid}.zp"),
                    "expect": st.add(fn(x, s, z, MXFP6), f"{cid}.y")})
            # finite scales, non-finite weights through the packer
            s1 = torch.ones(2, 2, dtype=dt)
            comp = BaseCompressor.get_value_from_registry("mxfp6-pack-quantized")
            c = comp.compress({"weight": x, "weight_scale": s1},
                              preset_name_to_scheme("MXFP6A16", ["Linear"]))
            cid = f"nonfinite.compress.mxfp6.{DT_SHORT[dt]}"
            self.add("nonfinite_cases", {
                "id": self.uid(cid), "op": "compress", "weight": st.add(x, f"{cid}.w"),
                "weight_scale": st.add(s1, f"{cid}.s"),
                "expect": {k: st.add(v, f"{cid}.{k}") for k, v in sorted(c.items())},
                "note": "+inf saturates to code 31 (7.5), -inf to 63 (-7.5); NaN is stored as "
                        "code 32 (-0.0): searchsorted puts NaN past the table (index 32), which "
                        "lands on the sign bit"})

    def write(self):
        self.build_codes()
        self.build_round()
        self.build_qparams()
        self.build_fake_quant()
        self.build_pack()
        self.build_errors()
        self.build_nonfinite()
        return {"generator": GENERATOR, "tensors": self.st.tensors, **self.lists}


# ---------------------------------------------------------------------------
# ct020_configs.json
# ---------------------------------------------------------------------------

TINY_LLAMA = dict(vocab_size=128, hidden_size=256, intermediate_size=512,
                  num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
                  max_position_embeddings=64, tie_word_embeddings=False)


def tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(**TINY_LLAMA)).to(BF16), LlamaConfig(**TINY_LLAMA)


def args_fields(a: QuantizationArgs | None):
    """Every field of the args as held in memory, and which fields count as user-set."""
    if a is None:
        return None
    out = {}
    for k in QuantizationArgs.model_fields:
        v = getattr(a, k)
        out[k] = str(v) if isinstance(v, torch.dtype) else v
    return {"fields": json.loads(json.dumps(out, default=str)),
            "fields_set": sorted(a.model_fields_set)}


def compressor_config(preset: str) -> dict:
    """The quantization_config that ModelCompressor.update_config writes after
    ModelCompressor.from_pretrained_model + compress_model (the save path of a model
    quantized in memory), for a tiny Llama with every Linear but lm_head quantized."""
    from compressed_tensors.compressors import ModelCompressor
    from compressed_tensors.quantization import apply_quantization_config

    model, _ = tiny_llama()
    cfg = QuantizationConfig(config_groups={"group_0": preset_name_to_scheme(preset, ["Linear"])},
                             ignore=["lm_head"])
    apply_quantization_config(model, cfg)
    with torch.no_grad():  # any valid qparams: the config does not depend on their values
        for name, p in model.named_parameters():
            if name.endswith("_scale"):
                p.fill_(1.0)
            elif name.endswith("_zero_point"):
                p.zero_()
    comp = ModelCompressor.from_pretrained_model(model)
    with tempfile.TemporaryDirectory() as d:
        if comp.quantization_config is None:
            return {"written": None, "note": "no quantized module: update_config writes nothing"}
        comp.compress_model(model)
        comp.update_config(d)
        written = json.loads((Path(d) / "config.json").read_text())["quantization_config"]
        names = {k: [str(v.dtype), list(v.shape)]
                 for k, v in model.state_dict().items() if k.startswith("model.layers.0.mlp.down_proj.")}
    return {"written": written, "down_proj_state_dict": names}


def args_serialisation_cases() -> list[dict]:
    """How QuantizationArgs serialise in 0.20.1 depending on how they were made."""
    cases = []

    def case(cid, make, how):
        a = make()
        cases.append({"id": cid, "how": how, "model_dump_json_mode": a.model_dump(mode="json"),
                      "model_dump_python_mode_as_json": json.loads(json.dumps(a.model_dump(), default=str)),
                      **args_fields(a)})

    full_019 = {"num_bits": 8, "type": "int", "symmetric": False, "group_size": None,
                "strategy": "channel", "block_structure": None, "dynamic": False, "actorder": None,
                "scale_dtype": None, "zp_dtype": "torch.int8", "observer": "memoryless_minmax",
                "observer_kwargs": {}}
    case("defaults", lambda: QuantizationArgs(), "QuantizationArgs()")
    case("int4_asym_inferred_zp", lambda: QuantizationArgs(num_bits=4, symmetric=False),
         "QuantizationArgs(num_bits=4, symmetric=False)")
    case("int4_asym_explicit_zp", lambda: QuantizationArgs(num_bits=4, symmetric=False, zp_dtype=torch.int8),
         "QuantizationArgs(num_bits=4, symmetric=False, zp_dtype=torch.int8)")
    case("sym_explicit_zp", lambda: QuantizationArgs(zp_dtype=torch.int8),
         "QuantizationArgs(zp_dtype=torch.int8): symmetric, so the field serializer gives None")
    case("observer_set", lambda: QuantizationArgs(observer="mse"), "QuantizationArgs(observer='mse')")
    case("observer_none_explicit", lambda: QuantizationArgs(observer=None),
         "QuantizationArgs(observer=None)")
    case("observer_assigned_after", lambda: _assign(QuantizationArgs(), "observer", "memoryless_mse"),
         "a = QuantizationArgs(); a.observer = 'memoryless_mse'")
    case("observer_model_copy", lambda: QuantizationArgs().model_copy(update={"observer": "minmax"}),
         "QuantizationArgs().model_copy(update={'observer': 'minmax'})")
    case("observer_kwargs", lambda: QuantizationArgs(observer="memoryless_mse",
                                                     observer_kwargs={"maxshrink": 0.5}),
         "observer_kwargs non-empty")
    case("parsed_full_019_json", lambda: QuantizationArgs.model_validate(full_019),
         "model_validate of a 0.19-style dict with every key (observer and zp_dtype set)")
    case("parsed_full_019_json_nulls", lambda: QuantizationArgs.model_validate(
        {**full_019, "observer": None, "zp_dtype": None, "symmetric": True}),
         "model_validate of a 0.19-style dict with observer and zp_dtype null")
    case("block", lambda: QuantizationArgs(num_bits=8, type="float", strategy="block",
                                           block_structure=[128, 128]), "block [128, 128]")
    case("actorder_weight", lambda: QuantizationArgs(num_bits=4, strategy="group", group_size=128,
                                                     actorder="weight"), "actorder='weight'")
    case("actorder_static_alias", lambda: QuantizationArgs(num_bits=4, strategy="group",
                                                           group_size=128, actorder="static"),
         "actorder='static' (alias)")
    case("fp6_plain", lambda: QuantizationArgs(num_bits=6, type="float"),
         "QuantizationArgs(num_bits=6, type='float'): zp_dtype inferred fp8 (raised in 0.19)")
    case("fp6_group_inferred_strategy", lambda: QuantizationArgs(num_bits=6, type="float",
                                                                 group_size=32),
         "strategy inferred (group) from group_size; strategy is not user-set")
    case("dynamic_local", lambda: QuantizationArgs(num_bits=4, type="float", strategy="tensor_group",
                                                   group_size=16, dynamic="local"),
         "dynamic='local'")
    return cases


def _assign(a, k, v):
    setattr(a, k, v)
    return a


def build_configs() -> dict:
    presets = {}
    for name in PRESET_SCHEMES:
        sch = preset_name_to_scheme(name, ["Linear"])
        entry = {
            "scheme_model_dump_json_mode": sch.model_dump(mode="json"),
            "weights": args_fields(sch.weights),
            "input_activations": args_fields(sch.input_activations),
            "output_activations": args_fields(sch.output_activations),
            "inferred_format": infer_module_format(torch.nn.Linear, sch).value,
        }
        try:
            entry["model_compressor"] = compressor_config(name)
        except Exception as ex:  # noqa: BLE001
            entry["model_compressor"] = {"error": exc_record(ex)}
        presets[name] = entry
        print(f"configs: {name}", file=sys.stderr)
    from compressed_tensors.config import ExpertSparsityConfig

    moe = QuantizationConfig(config_groups={"MXFP6A16": ["Linear"]},
                             moe_sparsity_config=ExpertSparsityConfig(method="prune",
                                                                      num_experts=[None, 128, 96]))
    no_moe = QuantizationConfig(config_groups={"MXFP6A16": ["Linear"]})
    config_cases = [
        {"id": "moe_sparsity_config.set", "model_dump": json.loads(json.dumps(moe.model_dump(), default=str))},
        {"id": "moe_sparsity_config.absent", "model_dump": json.loads(json.dumps(no_moe.model_dump(), default=str))},
    ]
    return {"generator": GENERATOR, "tiny_llama": TINY_LLAMA, "presets": presets,
            "args_cases": args_serialisation_cases(), "config_cases": config_cases}


# ---------------------------------------------------------------------------
# ct020_llmc.json (llm-compressor 0.14.0.1 on compressed-tensors 0.20.1)
# ---------------------------------------------------------------------------


def build_llmc() -> dict:
    import make_golden as mg  # llm-compressor's observer-case runner (observers.json schema)
    from safetensors.torch import save_file

    gen = {**GENERATOR, "llmcompressor": llmcompressor.__version__}
    oc = mg.ObserverCases()
    shapes = [(8, 64), (16, 128), (5, 96), (4, 256)]
    for observer in ("memoryless_minmax", "memoryless_mse", "static_minmax", "mse"):
        for dt in DTYPES:
            for i, dist in enumerate(mg.DISTS):
                shape = shapes[i % len(shapes)]
                w = make_data(dist, shape, dt, seed_of("llmc.w", dist, shape, dt))
                args = MXFP6.model_copy(deep=True)
                cid = oc.uid(f"{observer}.weight.group.mxfp6.{DT_SHORT[dt]}.{dist}."
                             f"{shape[0]}x{shape[1]}")
                oc.run(cid, observer, "weight", args, {}, [w])
    # two observations through the stateful observers
    for observer in ("static_minmax", "mse"):
        w1 = make_data("gauss", (8, 64), F32, seed_of("llmc.two", 1))
        w2 = make_data("outlier", (8, 64), F32, seed_of("llmc.two", 2))
        oc.run(oc.uid(f"{observer}.weight.group.mxfp6.f32.two_observations"), observer,
               "weight", MXFP6.model_copy(deep=True), {}, [w1, w2])
    for kw in ({"maxshrink": 0.5, "grid": 50}, {"norm": 2.0}, {"patience": 2}):
        w = make_data("student_t", (8, 128), BF16, seed_of("llmc.kw", tuple(kw)))
        tag = ",".join(f"{k}={v}" for k, v in kw.items())
        oc.run(oc.uid(f"memoryless_mse.weight.group.mxfp6.bf16.student_t.8x128[{tag}]"),
               "memoryless_mse", "weight", MXFP6.model_copy(deep=True), kw, [w])
    print(f"llmc: {len(oc.cases)} observer cases, {len(oc.garbage)} garbage", file=sys.stderr)

    # model_free_ptq for every preset on the tiny Llama's checkpoint
    from llmcompressor import model_free_ptq

    model, lcfg = tiny_llama()
    model_free = {}
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "src"
        src.mkdir()
        save_file({k: v.contiguous() for k, v in model.state_dict().items()},
                  str(src / "model.safetensors"))
        lcfg.save_pretrained(str(src))
        for name in PRESET_SCHEMES:
            dst = Path(d) / f"out_{name}"
            try:
                model_free_ptq(str(src), str(dst), scheme=name, ignore=["lm_head"], device="cpu")
            except Exception as ex:  # noqa: BLE001
                model_free[name] = {"error": exc_record(ex)}
                continue
            written = json.loads((dst / "config.json").read_text())["quantization_config"]
            from safetensors import safe_open

            with safe_open(str(dst / "model.safetensors"), "pt") as f:
                tensors = {k: [str(f.get_tensor(k).dtype), list(f.get_tensor(k).shape)]
                           for k in f.keys() if k.startswith("model.layers.0.mlp.down_proj.")}
            model_free[name] = {"written": written, "down_proj_tensors": tensors}
            print(f"model_free: {name}", file=sys.stderr)

        # the observer="mse" rewrite (validate.py: mse -> static_mse, which is not registered)
        sch = QuantizationScheme(targets=["Linear"], weights=QuantizationArgs(
            num_bits=4, type="int", symmetric=True, strategy="group", group_size=32, observer="mse"))
        try:
            model_free_ptq(str(src), str(Path(d) / "out_mse"), scheme=sch, ignore=["lm_head"],
                           device="cpu")
            mse_bug = {"raised": False}
        except Exception as ex:  # noqa: BLE001
            mse_bug = {"raised": True, **exc_record(ex),
                       "scheme_observer_after_call": sch.weights.observer}
    return {"generator": gen, "tiny_llama": TINY_LLAMA, "tensors": oc.st.tensors,
            "observer_cases": oc.cases, "reference_garbage": oc.garbage,
            "model_free": model_free, "model_free_observer_mse": mse_bug}


FILES = {"mxfp6.json": lambda: Mxfp6File().write(), "ct020_configs.json": build_configs,
         "ct020_llmc.json": build_llmc}
NEEDS_LLMC = {"ct020_llmc.json"}


def main():
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*", metavar="FILE",
                    help=f"write only these files, of {', '.join(FILES)} (default: every file "
                         "this environment can make)")
    names = ap.parse_args().files
    unknown = sorted(set(names) - set(FILES))
    if unknown:
        ap.error(f"unknown golden file(s) {unknown}; choose from {list(FILES)}")
    if compressed_tensors.__version__ != REF_VERSION:
        sys.exit(f"compressed-tensors {compressed_tensors.__version__} is installed; "
                 f"this generator records {REF_VERSION}")
    want = names or [n for n in FILES if llmcompressor is not None or n not in NEEDS_LLMC]
    for n in want:
        if n in NEEDS_LLMC and llmcompressor is None:
            sys.exit(f"{n} needs llm-compressor installed next to compressed-tensors "
                     f"{REF_VERSION} (see tools/README.md)")
    for n in want:
        path = write_json(n, FILES[n]())
        print(f"{path.relative_to(REPO)}: {path.stat().st_size} bytes", file=sys.stderr)


if __name__ == "__main__":
    main()
