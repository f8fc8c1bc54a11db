#!/usr/bin/env python3
"""Generate golden test vectors for qobs from the Python reference.

Run with the interpreter of a virtual environment that has `llmcompressor`
installed (it brings torch and compressed-tensors); see tools/README.md.
This script is never run by CI: its output, tests/golden/*.json, is committed.

Everything is deterministic: fixed seeds, one CPU thread, CPU tensors only.
The JSON schema is described in tools/README.md.
"""

from __future__ import annotations

import math
import os
import sys
import warnings

os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")  # CPU (eager) reference only

import torch  # noqa: E402

torch.set_num_threads(1)
warnings.filterwarnings("ignore")

import compressed_tensors  # noqa: E402
import llmcompressor  # noqa: E402
from compressed_tensors.quantization import QuantizationArgs  # noqa: E402
from compressed_tensors.quantization.lifecycle import fake_quantize  # noqa: E402
from compressed_tensors.quantization.utils import (  # noqa: E402
    calculate_qparams,
    generate_gparam,
)
from compressed_tensors.quantization.utils.fp4_utils import cast_to_fp4  # noqa: E402
from compressed_tensors.quantization.utils.mxfp_utils import (  # noqa: E402
    generate_mx_scales,
    round_to_power_2,
)
from llmcompressor.observers import Observer  # noqa: E402
from llmcompressor.observers.helpers import (  # noqa: E402
    flatten_for_calibration,
    fuse_weight_observers,
)

from golden_common import (  # noqa: E402
    BF16, DT_SHORT, DTYPE_NAME, DTYPES, F16, F32, FP8, OUT_DIR, REPO, Store, dump_args,
    exc_record, json_float, json_kwargs, make_data, seed_of, write_json, zp_dtype_of,
)
from loguru import logger  # noqa: E402

logger.remove()  # the reference logs warnings for every fallback

GENERATOR = {
    "llmcompressor": llmcompressor.__version__,
    "compressed_tensors": compressed_tensors.__version__,
    "torch": torch.__version__,
    "script": "tools/make_golden.py",
    "cpu_capability": torch.backends.cpu.get_cpu_capability(),
}

OBSERVERS = [
    "memoryless_minmax",
    "static_minmax",
    "minmax",
    "memoryless_mse",
    "mse",
    "nvfp4_expanded_mse",
    "imatrix_mse",
]
# Observers whose cases ObserverCases.build_new_observers appends after every other
# case, so that the other cases (and the rotations that pick their shapes and
# distributions) do not depend on them: adding one here leaves those bytes unchanged.
NEW_OBSERVERS = ["nvfp4_expanded_imatrix", "fouroversix"]
IMATRIX = {"imatrix_mse", "nvfp4_expanded_imatrix"}
STATEFUL = {"static_minmax", "minmax", "mse"}
MSE_LIKE = {"memoryless_mse", "mse", "nvfp4_expanded_mse", "imatrix_mse",
            "nvfp4_expanded_imatrix", "fouroversix"}
DISTS = ["gauss", "student_t", "outlier", "const", "zero", "tiny"]


# ---------------------------------------------------------------------------
# formats and data
# ---------------------------------------------------------------------------


def make_args(fmt: str, strategy: str, group_size=None, block=None, **extra):
    """Build QuantizationArgs for a named format and strategy."""
    kw: dict = {}
    if fmt in ("int4_sym", "int4_asym", "int8_sym", "int8_asym"):
        kw["num_bits"] = 4 if fmt.startswith("int4") else 8
        kw["type"] = "int"
        kw["symmetric"] = fmt.endswith("_sym")
    elif fmt in ("fp8", "fp8_asym"):
        kw.update(num_bits=8, type="float", symmetric=(fmt == "fp8"))
    elif fmt == "fp4":  # plain FP4, no scale dtype
        kw.update(num_bits=4, type="float", symmetric=True)
    elif fmt == "nvfp4":
        kw.update(num_bits=4, type="float", symmetric=True, scale_dtype=FP8)
        strategy = strategy or "tensor_group"
        group_size = group_size or 16
    elif fmt == "mxfp4":
        kw.update(num_bits=4, type="float", symmetric=True, scale_dtype=torch.uint8,
                  zp_dtype=torch.uint8)
        strategy = strategy or "group"
        group_size = 32
    elif fmt == "mxfp8":
        kw.update(num_bits=8, type="float", symmetric=True, scale_dtype=torch.uint8,
                  zp_dtype=torch.uint8)
        strategy = strategy or "group"
        group_size = 32
    else:
        raise ValueError(fmt)
    kw["strategy"] = strategy
    if strategy in ("group", "tensor_group"):
        kw["group_size"] = group_size or 16
    if strategy == "block":
        kw["block_structure"] = list(block or [16, 16])
    kw.update(extra)
    return QuantizationArgs(**kw)


# ---------------------------------------------------------------------------
# observer cases
# ---------------------------------------------------------------------------

WEIGHT_SHAPES = [(8, 64), (16, 128), (12, 96), (5, 48)]
ACT_SHAPES = [(2, 4, 64), (1, 5, 96), (3, 2, 128)]
ATTN_SHAPES = [(2, 4, 6, 16), (1, 2, 5, 32)]
INT_FMTS = ["int4_sym", "int4_asym", "int8_sym", "int8_asym", "fp8"]


def effective_kwargs(obs) -> dict:
    out = {}
    for attr, key in [
        ("maxshrink", "maxshrink"),
        ("patience", "patience"),
        ("grid", "grid"),
        ("norm", "norm"),
        ("expand", "expand"),
        ("avg_constant", "averaging_constant"),
        ("triton_error_buffer", "triton_error_buffer"),
        ("strict", "strict"),
    ]:
        if hasattr(obs, attr):
            v = getattr(obs, attr)
            out[key] = json_float(float(v)) if isinstance(v, float) else v
    return out


def imatrix_inputs(cols: int, dtype, seed: int, n: int = 3):
    g = torch.Generator().manual_seed(seed)
    chan = 0.25 + 2.0 * torch.rand(cols, generator=g)  # per-channel magnitude
    return [
        (torch.randn((2, 5, cols), generator=g) * chan).to(dtype) for _ in range(n)
    ]


def attach_and_feed(obs, w: torch.Tensor, seed: int) -> None:
    """Attach an imatrix observer to a Linear holding w and run forward passes."""
    lin = torch.nn.Linear(w.shape[1], w.shape[0], bias=False, dtype=w.dtype)
    with torch.no_grad():
        lin.weight.copy_(w)
        obs.attach(lin)
        for x in imatrix_inputs(w.shape[1], w.dtype, seed):
            lin(x)
    obs.detach(lin)


# --- fragility probe --------------------------------------------------------
# The reference's elementwise pow and its summation order are not correctly
# rounded (vectorised pow, blocked sums).  Each MSE-type case is re-run with a
# correctly-rounded variant of the error (elementwise |r - x|^norm computed in
# f64 and rounded once to the working dtype, sums in f64 rounded once); when
# that variant chooses different statistics the case is marked "fragile": an
# implementation that is exact in these two respects may legitimately differ.

import llmcompressor.observers.imatrix as _imx_mod  # noqa: E402
import llmcompressor.observers.mse as _mse_mod  # noqa: E402


def _pow_exponent(norm: float, dtype) -> float:
    # the reference rounds the pow exponent to the tensor's dtype (bf16/f16)
    if dtype in (BF16, F16):
        return float(torch.tensor(norm, dtype=dtype).item())
    return float(norm)


def _exact_error(observed, args, token_args, smin, smax, norm):
    s, z = calculate_qparams(smin, smax, args, None)
    r = fake_quantize(observed, s.unsqueeze(-1), z.unsqueeze(-1), token_args).to(observed.dtype)
    d = (r - observed).abs()
    elem = d.double().pow(_pow_exponent(norm, d.dtype)).to(d.dtype)
    return elem.double().sum(dim=(0, -1)).to(observed.dtype)


def _exact_grid_search_mse(observed, args, token_args, maxshrink, patience, grid, norm,
                           triton_error_buffer, expand=1.0):
    del triton_error_buffer
    if args.strategy == "tensor_group" and args.scale_dtype is not None:
        args = args.model_copy(update={"scale_dtype": None})
        token_args = token_args.model_copy(update={"scale_dtype": None})
    m0 = torch.amin(observed, dim=(0, -1)) * expand
    M0 = torch.amax(observed, dim=(0, -1)) * expand
    best = torch.full_like(m0, torch.finfo(m0.dtype).max)
    bm, bM = m0.clone(), M0.clone()
    stale = 0
    for i in range(int(maxshrink * grid)):
        p = 1 - i / grid
        cm, cM = m0 * p, M0 * p
        err = _exact_error(observed, args, token_args, cm, cM, norm)
        better = err < best
        if better.any():
            best[better], bm[better], bM[better] = err[better], cm[better], cM[better]
            stale = 0
        else:
            stale += 1
            if stale >= patience:
                break
    return bm, bM


def _exact_imatrix_search(observed, args, maxshrink, patience, grid, norm, expand=1.0,
                          importance_weights=None):
    if args.strategy == "tensor_group" and args.scale_dtype is not None:
        args = args.model_copy(update={"scale_dtype": None})
    token_args = args.model_copy(update={"strategy": "token"})
    m0 = torch.amin(observed, dim=(0, -1)) * expand
    M0 = torch.amax(observed, dim=(0, -1)) * expand
    best = torch.full(m0.shape, torch.finfo(torch.float32).max, dtype=torch.float32)
    bm, bM = m0.clone(), M0.clone()
    xf = observed.float()
    stale = 0
    for i in range(max(1, int(maxshrink * grid)) + 1):
        p = 1 - i / grid
        cm, cM = p * m0, p * M0
        s, z = calculate_qparams(cm, cM, args, None)
        r = fake_quantize(observed, s.unsqueeze(-1), z.unsqueeze(-1), token_args).float()
        elem = (r - xf).abs().double().pow(norm).float()
        if importance_weights is not None:
            elem = elem * importance_weights
        err = elem.double().sum(dim=(0, -1)).float()
        better = err < best
        if better.any():
            best[better], bm[better], bM[better] = err[better], cm[better], cM[better]
            stale = 0
        else:
            stale += 1
            if patience > 0 and stale >= patience:
                break
    return bm, bM


def alt_statistics(observer, base_name, args, kwargs, observations, imx_seed):
    saved = (_mse_mod._grid_search_mse, _imx_mod._grid_search)
    _mse_mod._grid_search_mse = _exact_grid_search_mse
    _imx_mod._grid_search = _exact_imatrix_search
    try:
        obs = Observer.load_from_registry(observer, base_name=base_name, args=args, **kwargs)
        if imx_seed is not None:
            attach_and_feed(obs, observations[0], imx_seed)
        for o in observations:
            obs(o)
        return obs.min_vals.clone(), obs.max_vals.clone()
    finally:
        _mse_mod._grid_search_mse, _imx_mod._grid_search = saved


class ObserverCases:
    def __init__(self):
        self.st = Store()
        self.cases: list[dict] = []
        self.garbage: list[dict] = []
        self.fused: list[dict] = []
        self.errors: list[dict] = []
        self.ids: set[str] = set()
        self.rot = {}

    def uid(self, base: str) -> str:
        cid, n = base, 2
        while cid in self.ids:
            cid = f"{base}#{n}"
            n += 1
        self.ids.add(cid)
        return cid

    def next_rot(self, key, seq):
        i = self.rot.get(key, 0)
        self.rot[key] = i + 1
        return seq[i % len(seq)]

    # one case ---------------------------------------------------------
    def run(self, cid, observer, base_name, args, kwargs, observations, *,
            imatrix=None, note=None):
        """imatrix: None | 'attach' (Linear + forward passes) | 'none' (no attach)."""
        args.observer = observer
        args_json = dump_args(args)
        alt_args = args.model_copy(deep=True)
        obs = Observer.load_from_registry(observer, base_name=base_name, args=args,
                                          **kwargs)
        eff = effective_kwargs(obs)
        imp_sum = imp_count = None
        if observer in IMATRIX and imatrix == "attach":
            attach_and_feed(obs, observations[0], seed_of(cid, "imx"))
        obs_ids = []
        for i, o in enumerate(observations):
            obs_ids.append(self.st.add(o, f"{cid}.obs{i}"))
            obs(o)
        stats = obs.get_statistics()
        if observer in IMATRIX:
            s = stats["_imatrix_sum"]
            imp_sum = None if s is None else self.st.add(s.clone(), f"{cid}.imp_sum")
            imp_count = int(stats["_imatrix_count"].item())
        mn, mx = stats["min_vals"].clone(), stats["max_vals"].clone()
        q = obs.get_qparams()
        expect = {
            "scale": self.st.add(q["scale"], f"{cid}.scale"),
            "zero_point": self.st.add(q["zero_point"], f"{cid}.zp"),
            "global_scale": self.st.opt(q["global_scale"], f"{cid}.gscale"),
            "min_vals": self.st.add(mn, f"{cid}.min"),
            "max_vals": self.st.add(mx, f"{cid}.max"),
        }
        case = {
            "id": cid,
            "observer": observer,
            "base_name": base_name,
            "args": args_json,
            "args_zp_dtype": zp_dtype_of(args),
            "observer_kwargs": json_kwargs(kwargs),
            "effective_kwargs": eff,
            "observations": obs_ids,
            "importance_sum": imp_sum,
            "importance_count": imp_count,
            "expect": expect,
        }
        if note:
            case["note"] = note
        if observer in MSE_LIKE:
            amn, amx = alt_statistics(observer, base_name, alt_args, kwargs, observations,
                                      seed_of(cid, "imx") if imatrix == "attach" else None)
            case["fragile"] = not (torch.equal(amn, mn) and torch.equal(amx, mx))
        bad = [
            k for k in ("scale", "global_scale")
            if q[k] is not None and not torch.isfinite(q[k].float()).all()
        ]
        if bad:
            case["garbage"] = f"non-finite {bad}"
            self.garbage.append(case)
        else:
            self.cases.append(case)
        return case, q, (mn, mx)

    # matrix -----------------------------------------------------------
    def slots(self):
        """(base_kind, strategy, fmt, group_size, block) slots."""
        s = []
        for f in INT_FMTS:
            s.append(("weight", "tensor", f, None, None))
            s.append(("weight", "channel", f, None, None))
            s.append(("weight", "group", f, 16, None))
            s.append(("weight", "block", f, None, [16, 16]))
        s.append(("weight", "group", "mxfp4", 32, None))
        s.append(("weight", "tensor_group", "nvfp4", 16, None))
        s.append(("weight", "tensor_group", "int8_sym", 16, None))  # Q11
        s.append(("weight", "tensor_group", "fp8", 32, None))
        for f in INT_FMTS:
            s.append(("input", "tensor", f, None, None))
            s.append(("input", "group", f, 16, None))
            s.append(("attn", "tensor", f, None, None))
            s.append(("attn", "attn_head", f, None, None))
        s.append(("input", "group", "mxfp4", 32, None))
        s.append(("input", "tensor_group", "nvfp4", 16, None))
        return s

    def build_matrix(self):
        for observer in OBSERVERS:
            for kind, strategy, fmt, gs, block in self.slots():
                dts = DTYPES if kind == "weight" else [self.next_rot((observer, "dt"), DTYPES)]
                if kind != "weight" and fmt in ("mxfp4", "nvfp4"):
                    dts = DTYPES  # keep every observer x format x dtype
                for dt in dts:
                    dist = self.next_rot((observer, dt), DISTS)
                    self.one(observer, kind, strategy, fmt, gs, block, dt, dist)

    def one(self, observer, kind, strategy, fmt, gs, block, dt, dist, kwargs=None,
            shape=None, tag="", n_obs=None, note=None):
        kwargs = dict(kwargs or {})
        if kind == "weight":
            base = "weight"
            if shape is None:
                if strategy == "block":
                    shape = (20, 40)
                else:
                    cands = [sh for sh in WEIGHT_SHAPES if sh[1] % (gs or 1) == 0]
                    shape = self.next_rot(("wshape", observer, fmt), cands)
            seed = seed_of("w", dist, shape, dt)
            observations = [make_data(dist, shape, dt, seed)]
        elif kind == "input":
            base = "input"
            if shape is None:
                shape = self.next_rot(("ashape", observer), ACT_SHAPES)
            n = n_obs or 3
            observations = [
                make_data(dist, shape, dt, seed_of("a", dist, shape, dt, i))
                for i in range(n)
            ]
        else:
            base = self.next_rot(("qkv",), ["q", "k", "v"])
            if shape is None:
                shape = self.next_rot(("tshape", observer), ATTN_SHAPES)
            n = n_obs or 3
            observations = [
                make_data(dist, shape, dt, seed_of("t", dist, shape, dt, i))
                for i in range(n)
            ]
        args = make_args(fmt, strategy, gs, block)
        shp = "x".join(map(str, shape))
        cid = self.uid(
            f"{observer}.{base}.{strategy}.{fmt}.{DT_SHORT[dt]}.{dist}.{shp}{tag}"
        )
        imx = "attach" if (observer in IMATRIX and base == "weight") else None
        return self.run(cid, observer, base, args, kwargs, observations,
                        imatrix=imx, note=note)

    # extras -------------------------------------------------------------
    def build_kwargs_variants(self):
        variants = {
            "memoryless_mse": [
                {"maxshrink": 0.5, "grid": 20},
                {"patience": 0},
                {"patience": 1},
                {"norm": 2.0},
                {"norm": 3.0},
                {"grid": 0.0},
                {"expand": 1.5},
                {"maxshrink": 0.3, "grid": 50, "patience": 2},
                {"chunk_size": 3},
            ],
            "mse": [
                {"averaging_constant": 0.1},
                {"averaging_constant": 1.0},
                {"norm": 3.0, "patience": 1},
                {"expand": 1.5},
                {"patience": 0, "maxshrink": 0.5},
            ],
            "nvfp4_expanded_mse": [
                {"patience": 3},
                {"expand": 1.5},
                {"grid": 100.0, "maxshrink": 0.3},
                {"norm": 2.0},
                {"patience": 0},
            ],
            "imatrix_mse": [
                {"norm": 2.4},
                {"norm": 2.0},
                {"patience": 0},
                {"patience": 1},
                {"grid": 10, "maxshrink": 0.5},
                {"expand": 1.5},
                {"maxshrink": 0.0},
            ],
            "minmax": [
                {"averaging_constant": 0.1},
                {"averaging_constant": 1.0},
                {"averaging_constant": 0.0},
            ],
        }
        contexts = [
            ("weight", "channel", "int4_asym", None, None, F32),
            ("weight", "group", "int4_sym", 16, None, BF16),
            ("weight", "tensor_group", "nvfp4", 16, None, F16),
            ("input", "tensor", "int8_sym", None, None, BF16),
            ("input", "tensor_group", "nvfp4", 16, None, F32),
            ("attn", "attn_head", "fp8", None, None, F32),
        ]
        for observer, vs in variants.items():
            for vi, kw in enumerate(vs):
                for ci, (kind, strat, fmt, gs, blk, dt) in enumerate(contexts):
                    if observer == "imatrix_mse" and kind != "weight":
                        continue
                    if (vi + ci) % 2 and observer != "imatrix_mse":
                        continue  # sample half of the contexts
                    dist = ["gauss", "student_t", "outlier"][(vi + ci) % 3]
                    tag = ".kw" + "".join(f"_{k}={v}" for k, v in kw.items())
                    self.one(observer, kind, strat, fmt, gs, blk, dt, dist, kwargs=kw,
                             tag=tag)

    def build_early_stop(self):
        """Cases in which patience demonstrably stops the search early."""
        found = 0
        for observer, pat in [("memoryless_mse", 1), ("memoryless_mse", 0),
                              ("mse", 1), ("nvfp4_expanded_mse", 2),
                              ("imatrix_mse", 1)]:
            for trial in range(200):
                dt = [F32, BF16][trial % 2]
                fmt = "nvfp4" if observer == "nvfp4_expanded_mse" else "int4_sym"
                strat = "tensor_group" if fmt == "nvfp4" else "channel"
                gs = 16 if fmt == "nvfp4" else None
                dist = ["student_t", "outlier", "gauss"][trial % 3]
                shape = (4, 32)
                w = make_data(dist, shape, dt, seed_of("es", observer, trial))
                cid = (f"{observer}.weight.{strat}.{fmt}.{DT_SHORT[dt]}."
                       f"{dist}.4x32.early_stop_patience={pat}")
                assert cid not in self.ids

                def stats(p):
                    a = make_args(fmt, strat, gs)
                    o = Observer.load_from_registry(observer, base_name="weight",
                                                    args=a, patience=p)
                    if observer == "imatrix_mse":
                        attach_and_feed(o, w, seed_of(cid, "imx"))
                    o(w)
                    return o.min_vals.clone()

                short, full = stats(pat), stats(10_000)
                if not torch.equal(short, full):
                    args = make_args(fmt, strat, gs)
                    cid = self.uid(cid)
                    self.run(cid, observer, "weight", args, {"patience": pat}, [w],
                             imatrix="attach" if observer == "imatrix_mse" else None,
                             note="early stopping changes the result "
                                  "(differs from patience=10000)")
                    found += 1
                    break
        return found

    def build_special(self):
        # Q27: weight observer called twice; the second observation is ignored
        for observer in ["memoryless_minmax", "static_minmax", "memoryless_mse"]:
            w1 = make_data("gauss", (8, 64), F32, seed_of("q27a"))
            w2 = make_data("outlier", (8, 64), F32, seed_of("q27b"))
            cid = self.uid(f"{observer}.weight.channel.int8_sym.f32.twice_Q27")
            self.run(cid, observer, "weight", make_args("int8_sym", "channel"), {},
                     [w1, w2], note="Q27: second weight observation ignored")
        # memoryless observers on input: last observation wins; 1-D and 2-D inputs
        for observer in OBSERVERS:
            dt = [F32, BF16, F16][len(observer) % 3]
            xs = [make_data("gauss", (64,), dt, seed_of("1d", observer, i)) for i in range(3)]
            cid = self.uid(f"{observer}.input.tensor.int8_asym.{DT_SHORT[dt]}.gauss.64.1d")
            self.run(cid, observer, "input", make_args("int8_asym", "tensor"), {}, xs)
            xs = [make_data("student_t", (6, 32), dt, seed_of("2d", observer, i))
                  for i in range(3)]
            cid = self.uid(f"{observer}.input.group.int4_sym.{DT_SHORT[dt]}.student_t.6x32.2d_Q15")
            self.run(cid, observer, "input", make_args("int4_sym", "group", 16), {}, xs,
                     note="Q15: 2-D activation with group strategy")
        # R6.5.2 example (minmax c = 0.1) and R6.7.4 example (memoryless_mse)
        seq = [torch.tensor([0.0, 0.0]), torch.tensor([-3.0, 1.0]), torch.tensor([-1.0, 3.0])]
        for observer, kw in [("minmax", {"averaging_constant": 0.1}), ("memoryless_mse", {}),
                             ("static_minmax", {}), ("mse", {"averaging_constant": 0.1})]:
            cid = self.uid(f"{observer}.input.tensor.int8_sym.f32.spec_example")
            self.run(cid, observer, "input", make_args("int8_sym", "tensor"), kw,
                     [t.clone() for t in seq], note="SPEC R6.5.2 / R6.7.4 example")
        # R4.4 example 3: NVFP4 bf16 arange(24) reshaped (4, 6), group 3
        w = torch.arange(24, dtype=BF16).reshape(4, 6)
        for observer in ["memoryless_minmax", "memoryless_mse", "nvfp4_expanded_mse"]:
            cid = self.uid(f"{observer}.weight.tensor_group.nvfp4_g3.bf16.arange24_R4.4.3")
            self.run(cid, observer, "weight", make_args("nvfp4", "tensor_group", 3), {},
                     [w.clone()], note="SPEC R4.4 example 3")
        # block [128, 128] with padding on (100, 200)
        for observer in ["memoryless_minmax", "memoryless_mse"]:
            self.one(observer, "weight", "block", "fp8", None, [128, 128], BF16, "gauss",
                     shape=(100, 200))
            self.one(observer, "weight", "block", "int8_asym", None, [16, 32], F32,
                     "outlier", shape=(20, 40))
        # integer min/max path is not reachable through observers (they observe floats)
        # imatrix fallbacks
        w = make_data("gauss", (8, 64), F32, seed_of("imx-fallback"))
        cid = self.uid("imatrix_mse.weight.channel.int4_sym.f32.gauss.no_importance_fallback")
        self.run(cid, "imatrix_mse", "weight", make_args("int4_sym", "channel"), {}, [w],
                 imatrix="none", note="no attach: uniform fallback (Q8), strict false")
        cid = self.uid("imatrix_mse.weight.group.nvfp4_plain.bf16.gauss.no_importance_fallback")
        self.run(cid, "imatrix_mse", "weight", make_args("fp4", "group", 16), {},
                 [w.to(BF16)], imatrix="none", note="no attach: uniform fallback")
        # imatrix with the R6.8.3 example importance (ones with channel 0 = 2)
        lin_x = torch.ones(2, 3, 8)
        lin_x[..., 0] = 2.0
        args = make_args("int4_sym", "group", 4)
        args.observer = "imatrix_mse"
        args_json = dump_args(args)
        o = Observer.load_from_registry("imatrix_mse", base_name="weight", args=args)
        lin = torch.nn.Linear(8, 4, bias=False)
        with torch.no_grad():
            lin.weight.copy_(make_data("gauss", (4, 8), F32, seed_of("r683")))
            o.attach(lin)
            lin(lin_x)
        cid = self.uid("imatrix_mse.weight.group.int4_sym_g4.f32.gauss.R6.8.3_example")
        o(lin.weight.data)
        stats = o.get_statistics()
        q = o.get_qparams()
        self.cases.append({
            "id": cid, "observer": "imatrix_mse", "base_name": "weight", "args": args_json,
            "args_zp_dtype": zp_dtype_of(args),
            "observer_kwargs": {}, "effective_kwargs": effective_kwargs(o),
            "observations": [self.st.add(lin.weight.data.clone(), f"{cid}.obs0")],
            "importance_sum": self.st.add(stats["_imatrix_sum"], f"{cid}.imp_sum"),
            "importance_count": int(stats["_imatrix_count"]),
            "expect": {
                "scale": self.st.add(q["scale"], f"{cid}.scale"),
                "zero_point": self.st.add(q["zero_point"], f"{cid}.zp"),
                "global_scale": None,
                "min_vals": self.st.add(stats["min_vals"], f"{cid}.min"),
                "max_vals": self.st.add(stats["max_vals"], f"{cid}.max"),
            },
            "note": "SPEC R6.8.3 example: x = ones(2,3,8), x[...,0] = 2",
        })

    # fused ----------------------------------------------------------------
    def build_fused(self, configs=None):
        configs = configs or [
            ("memoryless_minmax", ("q_proj", "k_proj", "v_proj"), BF16, [1.0, 3.0, 0.5]),
            ("memoryless_minmax", ("gate_proj", "up_proj"), F32, [0.7, 2.0]),
            ("memoryless_mse", ("q_proj", "k_proj", "v_proj"), F32, [2.0, 1.0, 0.25]),
            ("nvfp4_expanded_mse", ("gate_proj", "up_proj"), F16, [1.0, 0.2]),
            ("static_minmax", ("q_a_proj", "kv_a_proj_with_mqa"), BF16, [0.1, 0.3]),
            ("imatrix_mse", ("w1", "w3"), F32, [1.0, 4.0]),
            ("memoryless_minmax", ("q_proj", "k_proj", "v_proj"), F16, [0.01, 0.02, 0.005]),
        ]
        for observer, names, dt, mags in configs:
            cid = self.uid(f"fused.{observer}.{'+'.join(names)}.nvfp4.{DT_SHORT[dt]}")
            parent = torch.nn.Module()
            args0 = make_args("nvfp4", "tensor_group", 16)
            args0.observer = observer
            args_json = dump_args(args0)
            members = []
            shapes = [(8, 64), (4, 64), (4, 64)]
            for i, (name, mag) in enumerate(zip(names, mags)):
                rows, cols = shapes[i]
                lin = torch.nn.Linear(cols, rows, bias=False, dtype=dt)
                g = torch.Generator().manual_seed(seed_of(cid, name))
                w = (torch.randn(rows, cols, generator=g) * mag).to(dt)
                with torch.no_grad():
                    lin.weight.copy_(w)
                obs = Observer.load_from_registry(observer, base_name="weight",
                                                  args=make_args("nvfp4", "tensor_group", 16))
                obs.args.observer = observer
                if observer in IMATRIX:
                    obs.attach(lin)
                    with torch.no_grad():
                        for x in imatrix_inputs(cols, dt, seed_of(cid, name, "x")):
                            lin(x)
                    obs.detach(lin)
                lin.weight_observer = obs
                setattr(parent, name, lin)
                members.append((name, lin, obs))
            fuse_weight_observers(parent)
            # only the first member is observed explicitly: partners are observed
            # eagerly through the fusion handler
            members[0][2](members[0][1].weight)
            rec = []
            for name, lin, obs in members:
                stats = obs.get_statistics()
                mn, mx = stats["min_vals"].clone(), stats["max_vals"].clone()
                imp = None
                if observer in IMATRIX:
                    imp = (self.st.add(stats["_imatrix_sum"].clone(), f"{cid}.{name}.imp_sum"),
                           int(stats["_imatrix_count"]))
                q = obs.get_qparams()
                m = {
                    "name": name,
                    "weight": self.st.add(lin.weight.data, f"{cid}.{name}.w"),
                    "expect": {
                        "scale": self.st.add(q["scale"], f"{cid}.{name}.scale"),
                        "zero_point": self.st.add(q["zero_point"], f"{cid}.{name}.zp"),
                        "global_scale": self.st.add(q["global_scale"], f"{cid}.{name}.gscale"),
                        "min_vals": self.st.add(mn, f"{cid}.{name}.min"),
                        "max_vals": self.st.add(mx, f"{cid}.{name}.max"),
                    },
                }
                if imp:
                    m["importance_sum"], m["importance_count"] = imp
                rec.append(m)
            left = [obs.has_statistics for _, _, obs in members]
            assert not any(left), "fused statistics should be deleted after the last member"
            self.fused.append({"id": cid, "observer": observer, "args": args_json,
                               "args_zp_dtype": zp_dtype_of(args0),
                               "observer_kwargs": {}, "members": rec})

    # errors ---------------------------------------------------------------
    def err(self, cid, kind, inputs, fn):
        try:
            fn()
        except Exception as e:  # noqa: BLE001
            self.errors.append({"id": cid, "kind": kind, "inputs": inputs, **exc_record(e)})
            return
        raise AssertionError(f"expected an error for {cid}")

    def build_errors(self):
        a8 = make_args("int8_sym", "channel")
        w = make_data("gauss", (8, 64), F32, seed_of("errw"))
        wid = self.st.add(w, "err.w_8x64")

        def mk(name, base="weight", args=None, **kw):
            return lambda: Observer.load_from_registry(
                name, base_name=base, args=args or make_args("int8_sym", "channel"), **kw)

        self.err("observer.unknown_name", "observer",
                 {"observer": "no_such_observer", "base_name": "weight", "args": dump_args(a8)},
                 mk("no_such_observer"))
        for name, e in [("memoryless_mse", 0.5), ("mse", 0.5), ("nvfp4_expanded_mse", 0.9)]:
            self.err(f"observer.{name}.expand_lt_1", "observer",
                     {"observer": name, "base_name": "weight", "args": dump_args(a8),
                      "observer_kwargs": {"expand": e}}, mk(name, expand=e))
        for kw in [{"grid": 0}, {"grid": -5}, {"patience": -1}, {"maxshrink": 1.5},
                   {"maxshrink": -0.1}, {"norm": 0}, {"norm": -1.0}, {"norm": float("inf")},
                   {"norm": float("nan")}]:
            k, v = next(iter(kw.items()))
            self.err(f"observer.imatrix_mse.{k}={json_float(v)}", "observer",
                     {"observer": "imatrix_mse", "base_name": "weight", "args": dump_args(a8),
                      "observer_kwargs": json_kwargs(kw)}, mk("imatrix_mse", **kw))

        def get_qparams_empty():
            Observer.load_from_registry("static_minmax", base_name="input",
                                        args=make_args("int8_sym", "tensor")).get_qparams()
        self.err("observer.get_qparams_without_statistics", "observer",
                 {"observer": "static_minmax", "base_name": "input",
                  "args": dump_args(make_args("int8_sym", "tensor")), "observations": []},
                 get_qparams_empty)

        # imatrix strict failures
        self.imatrix_strict_errors("imatrix_mse", w)
        act = make_data("gauss", (2, 4, 64), F32, seed_of("erract"))
        self.build_q26_and_later_errors(w, wid, act)

    def imatrix_strict_errors(self, observer, w):
        """R6.8.4 failures with strict=True."""
        def imx_strict(args, base="weight", attach_in=None, inject=None, obs_value=w):
            def f():
                o = Observer.load_from_registry(observer, base_name=base, args=args,
                                                strict=True)
                if attach_in is not None:
                    lin = torch.nn.Linear(attach_in, 8, bias=False)
                    o.attach(lin)
                    lin(torch.ones(2, attach_in))
                if inject is not None:
                    o._imatrix_sum = inject[0].clone()
                    o._imatrix_count = torch.tensor(inject[1], dtype=torch.int64)
                o(obs_value)
            return f

        act = make_data("gauss", (2, 4, 64), F32, seed_of("erract"))
        cases = [
            ("input_base", make_args("int4_sym", "group", 16), "input", None, None, act),
            ("tensor_strategy", make_args("int4_sym", "tensor"), "weight", 64, None, w),
            ("no_data", make_args("int4_sym", "channel"), "weight", None, None, w),
            ("size_mismatch", make_args("int4_sym", "channel"), "weight", 32, None, w),
            ("block_unsupported", make_args("int8_sym", "block", block=[4, 16]), "weight", 64,
             None, w),
            ("non_finite", make_args("int4_sym", "group", 16), "weight", None,
             (torch.tensor([1.0] * 63 + [float("inf")]), 4), w),
            ("negative", make_args("int4_sym", "group", 16), "weight", None,
             (torch.tensor([1.0] * 63 + [-1.0]), 4), w),
            ("all_zeros", make_args("int4_sym", "group", 16), "weight", None,
             (torch.zeros(64), 4), w),
        ]
        prefix = "imx" if observer == "imatrix_mse" else observer
        for name, args, base, attach_in, inject, val in cases:
            inputs = {"observer": observer, "base_name": base, "args": dump_args(args),
                      "observer_kwargs": {"strict": True},
                      "observations": [self.st.add(val, f"err.{prefix}.{name}.obs")]}
            if attach_in is not None:
                inputs["attach_linear_in_features"] = attach_in
                inputs["forward_input"] = f"ones(2, {attach_in})"
            if inject is not None:
                inputs["importance_sum"] = self.st.add(inject[0], f"err.{prefix}.{name}.imp_sum")
                inputs["importance_count"] = inject[1]
            self.err(f"observer.{observer}.strict.{name}", "observer", inputs,
                     imx_strict(args, base, attach_in, inject, val))

    def build_q26_and_later_errors(self, w, wid, act):
        """Error cases that follow the strict imatrix ones (kept in their order)."""

        # Q26: observing again after get_qparams
        def q26():
            args = make_args("int4_sym", "channel")
            o = Observer.load_from_registry("imatrix_mse", base_name="weight", args=args)
            lin = torch.nn.Linear(64, 8, bias=False)
            o.attach(lin)
            lin(torch.ones(2, 64))
            o(w)
            o.get_qparams()
            o(w)
        self.err("observer.imatrix_mse.observe_after_get_qparams_Q26", "observer",
                 {"observer": "imatrix_mse", "base_name": "weight",
                  "args": dump_args(make_args("int4_sym", "channel")),
                  "sequence": "attach Linear(64->8); forward ones(2,64); observe w; "
                              "get_qparams; observe w", "observations": [wid]}, q26)

        # flatten failures through observe
        flat_errs = [
            ("weight_attn_head", "weight", make_args("int8_sym", "attn_head"), w),
            ("input_channel", "input", make_args("int8_sym", "channel"), act),
            ("input_block", "input", make_args("int8_sym", "block", block=[4, 4]), act),
            ("q_group", "q", make_args("int8_sym", "group", 16),
             make_data("gauss", (1, 2, 3, 16), F32, 1)),
            ("q_channel", "q", make_args("int8_sym", "channel"),
             make_data("gauss", (1, 2, 3, 16), F32, 1)),
            ("unknown_base", "foo", make_args("int8_sym", "tensor"), w),
            ("weight_group_not_divisible", "weight", make_args("int8_sym", "group", 24), w),
            ("weight_block_1d", "weight", make_args("int8_sym", "block", block=[4, 4]),
             make_data("gauss", (64,), F32, 2)),
            ("weight_token", "weight",
             make_args("int8_sym", "token", dynamic=True), w),
        ]
        for name, base, args, val in flat_errs:
            self.err(f"observer.memoryless_minmax.observe.{name}", "observer",
                     {"observer": "memoryless_minmax", "base_name": base,
                      "args": dump_args(args),
                      "observations": [self.st.add(val, f"err.flat.{name}.obs")]},
                     lambda b=base, a=args, v=val: Observer.load_from_registry(
                         "memoryless_minmax", base_name=b, args=a)(v))

        # fusion preconditions
        def fuse_mixed():
            p = torch.nn.Module()
            for n, strat in [("gate_proj", "tensor_group"), ("up_proj", "group")]:
                lin = torch.nn.Linear(64, 8, bias=False)
                lin.weight_observer = Observer.load_from_registry(
                    "memoryless_minmax", base_name="weight",
                    args=make_args("nvfp4" if strat == "tensor_group" else "fp4", strat, 16))
                setattr(p, n, lin)
            fuse_weight_observers(p)

        def fuse_missing():
            p = torch.nn.Module()
            p.gate_proj = torch.nn.Linear(64, 8, bias=False)
            p.gate_proj.weight_observer = Observer.load_from_registry(
                "memoryless_minmax", base_name="weight",
                args=make_args("nvfp4", "tensor_group", 16))
            p.up_proj = torch.nn.Linear(64, 8, bias=False)
            fuse_weight_observers(p)

        self.err("fusion.non_tensor_group_member", "fusion",
                 {"members": {"gate_proj": "nvfp4 tensor_group", "up_proj": "fp4 group 16"}},
                 fuse_mixed)
        self.err("fusion.member_without_observer", "fusion",
                 {"members": {"gate_proj": "nvfp4 tensor_group", "up_proj": None}},
                 fuse_missing)

    # NEW_OBSERVERS, appended after every other case --------------------------------
    def build_new_observers(self):
        """nvfp4_expanded_imatrix (R6.12) and fouroversix (R6.13): matrix, kwargs
        variants, fallbacks, fused groups and errors. Runs after every other builder."""
        imx, fos = NEW_OBSERVERS
        weight_slots = {
            imx: [("channel", "int4_sym", None), ("group", "int4_sym", 16),
                  ("group", "fp4", 16), ("tensor_group", "nvfp4", 16),
                  ("group", "mxfp4", 32), ("channel", "fp8", None),
                  ("tensor", "int8_sym", None)],  # tensor: uniform fallback (R6.8.4-2)
            fos: [("tensor_group", "nvfp4", 16), ("group", "fp4", 16),
                  ("channel", "int4_sym", None), ("group", "mxfp4", 32)],
        }
        for observer, slots in weight_slots.items():
            for strat, fmt, gs in slots:
                for dt in DTYPES:
                    dist = self.next_rot((observer, dt), DISTS)
                    self.one(observer, "weight", strat, fmt, gs, None, dt, dist)
        # activations: fouroversix is a plain MSE observer there; the imatrix variant
        # falls back to the uniform search (R6.8.4-1)
        for observer in NEW_OBSERVERS:
            for dt in DTYPES:
                self.one(observer, "input", "tensor_group", "nvfp4", 16, None, dt,
                         self.next_rot((observer, "act", dt), DISTS[:3]))
        # kwargs variants
        variants = {
            imx: [{"patience": 3}, {"patience": 0}, {"expand": 1.5}, {"norm": 3.0},
                  {"grid": 100, "maxshrink": 0.3}, {"maxshrink": 0.0}, {"strict": True}],
            fos: [{"patience": 3}, {"expand": 1.5}, {"grid": 100.0, "maxshrink": 0.3},
                  {"norm": 2.0}],
        }
        contexts = [("group", "int4_sym", 16, BF16), ("tensor_group", "nvfp4", 16, F32),
                    ("tensor_group", "nvfp4", 16, F16)]
        for observer, vs in variants.items():
            for vi, kw in enumerate(vs):
                for ci, (strat, fmt, gs, dt) in enumerate(contexts):
                    dist = ["gauss", "student_t", "outlier"][(vi + ci) % 3]
                    tag = ".kw" + "".join(f"_{k}={v}" for k, v in kw.items())
                    self.one(observer, "weight", strat, fmt, gs, None, dt, dist, kwargs=kw,
                             tag=tag)
        # no attach: the uniform fallback with this observer's own defaults (R6.8.7)
        for dt, shape in [(F32, (8, 64)), (BF16, (16, 128))]:
            w = make_data("gauss", shape, dt, seed_of("new-fallback", shape, dt))
            cid = self.uid(f"{imx}.weight.tensor_group.nvfp4.{DT_SHORT[dt]}.gauss."
                           f"{shape[0]}x{shape[1]}.no_importance_fallback")
            self.run(cid, imx, "weight", make_args("nvfp4", "tensor_group", 16), {}, [w],
                     imatrix="none", note="no attach: uniform fallback, expanded defaults (R6.12.2)")
        # fused groups share one global scale (R6.10)
        self.build_fused([
            (imx, ("q_proj", "k_proj", "v_proj"), BF16, [1.0, 3.0, 0.5]),
            (imx, ("gate_proj", "up_proj"), F32, [0.7, 2.0]),
            (fos, ("q_proj", "k_proj", "v_proj"), F16, [2.0, 1.0, 0.25]),
            (fos, ("w1", "w3"), BF16, [1.0, 4.0]),
        ])
        # errors
        a8 = make_args("int8_sym", "channel")
        w = make_data("gauss", (8, 64), F32, seed_of("errw"))
        for kw in [{"grid": 0}, {"patience": -1}, {"maxshrink": 1.5}, {"norm": -1.0},
                   {"norm": float("nan")}]:
            k, v = next(iter(kw.items()))
            self.err(f"observer.{imx}.{k}={json_float(v)}", "observer",
                     {"observer": imx, "base_name": "weight", "args": dump_args(a8),
                      "observer_kwargs": json_kwargs(kw)},
                     lambda kw=kw: Observer.load_from_registry(imx, base_name="weight",
                                                               args=make_args("int8_sym", "channel"), **kw))
        self.err(f"observer.{fos}.expand_lt_1", "observer",
                 {"observer": fos, "base_name": "weight", "args": dump_args(a8),
                  "observer_kwargs": {"expand": 0.9}},
                 lambda: Observer.load_from_registry(fos, base_name="weight",
                                                     args=make_args("int8_sym", "channel"),
                                                     expand=0.9))
        self.imatrix_strict_errors(imx, w)

    def write(self):
        return {
            "generator": GENERATOR,
            "tensors": self.st.tensors,
            "observer_cases": self.cases,
            "fused_cases": self.fused,
            "error_cases": self.errors,
            "reference_garbage": self.garbage,
        }


# ---------------------------------------------------------------------------
# qparams / gparam cases
# ---------------------------------------------------------------------------


def minmax_pairs(dtype, seed, shape=(4, 8), scale=1.0, all_zero=True):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(shape, generator=g) * scale
    b = torch.randn(shape, generator=g) * scale
    mn, mx = torch.minimum(a, b), torch.maximum(a, b)
    flat_mn, flat_mx = mn.view(-1), mx.view(-1)
    if all_zero:  # all-zero element (asymmetric FP8 turns it into a NaN zero point)
        flat_mn[0], flat_mx[0] = 0.0, 0.0
    flat_mn[1] = abs(flat_mn[1]) + 0.1  # positive-only (min clamps to 0)
    flat_mx[1] = flat_mn[1] + 1.0
    flat_mx[2] = -abs(flat_mx[2]) - 0.1  # negative-only
    flat_mn[2] = flat_mx[2] - 1.0
    flat_mn[3], flat_mx[3] = -1e-3, 2e-3  # tiny
    flat_mn[4], flat_mx[4] = -3.0, 1.0
    flat_mn[5], flat_mx[5] = -0.5, 1.0
    flat_mn[6], flat_mx[6] = 1.0, 1.0
    return mn.to(dtype), mx.to(dtype)


def build_qparams():
    st = Store()
    cases, gcases, errors, garbage = [], [], [], []
    ids = set()

    def qcase(cid, args, mn, mx, gs=None, note=None):
        assert cid not in ids, cid
        ids.add(cid)
        s, z = calculate_qparams(mn, mx, args, gs)
        c = {"id": cid, "args": dump_args(args), "args_zp_dtype": zp_dtype_of(args),
             "min": st.add(mn, f"{cid}.min"),
             "max": st.add(mx, f"{cid}.max"), "global_scale": st.opt(gs, f"{cid}.g"),
             "expect": {"scale": st.add(s, f"{cid}.scale"),
                        "zero_point": st.add(z, f"{cid}.zp")}}
        if note:
            c["note"] = note
        if torch.isnan(s.float()).any() or torch.isnan(z.float()).any():
            c["garbage"] = "NaN in the reference output"
            garbage.append(c)
        else:
            cases.append(c)

    formats = [
        ("int4_sym", "channel", None), ("int4_asym", "channel", None),
        ("int8_sym", "channel", None), ("int8_asym", "channel", None),
        ("fp8", "channel", None), ("fp8_asym", "channel", None),
        ("fp4", "group", 16), ("nvfp4", "tensor_group", 16),
        ("mxfp4", "group", 32), ("mxfp8", "group", 32),
        ("int8_sym", "tensor_group", 16), ("int4_asym", "group", 16),
    ]
    for fmt, strat, gsz in formats:
        for dt in DTYPES:
            for scale_tag, mult in [("unit", 1.0), ("wide", 40.0)]:
                mn, mx = minmax_pairs(dt, seed_of("qp", fmt, strat, dt, scale_tag), scale=mult,
                                      all_zero=(fmt != "fp8_asym"))
                args = make_args(fmt, strat, gsz)
                base = f"qparams.{fmt}.{strat}.{DT_SHORT[dt]}.{scale_tag}"
                qcase(base, args, mn, mx)
                if strat == "tensor_group":
                    g = generate_gparam(mn.min().reshape(1), mx.max().reshape(1))
                    qcase(base + ".with_gparam", args, mn, mx, g)
                    for gv in [117.0, 1e5, 0.001]:
                        qcase(base + f".gscale={gv}", args, mn, mx, torch.tensor([gv]),
                              note="fixed global scale: fp8 clamp / eps replacement")
    # scale_dtype on int args
    for sd in [BF16, F16, FP8]:
        for dt in DTYPES:
            mn, mx = minmax_pairs(dt, seed_of("sd", sd, dt))
            args = make_args("int8_asym", "channel", scale_dtype=sd)
            cid = f"qparams.int8_asym.scale_dtype={DTYPE_NAME[sd]}.{DT_SHORT[dt]}"
            try:
                calculate_qparams(mn, mx, args)
            except RuntimeError as ex:  # bf16 limits do not fit into f16
                errors.append({"id": cid, "kind": "qparams",
                               "inputs": {"args": dump_args(args), "min": st.add(mn, f"{cid}.min"),
                                          "max": st.add(mx, f"{cid}.max"),
                                          "global_scale": None},
                               **exc_record(ex)})
                continue
            qcase(cid, args, mn, mx)
    # worked examples (R4.4)
    qcase("qparams.R4.4.1.int8_sym.f32", make_args("int8_sym", "tensor"),
          torch.tensor([-3.0]), torch.tensor([1.0]))
    for fmt in ["int8_sym", "int8_asym"]:
        qcase(f"qparams.R4.4.2.{fmt}.f32.ones", make_args(fmt, "tensor"),
              torch.tensor([1.0]), torch.tensor([1.0]))
    qcase("qparams.R4.4.4.int8_asym.bf16", make_args("int8_asym", "tensor"),
          torch.tensor([-0.3], dtype=BF16), torch.tensor([5.0], dtype=BF16))
    qcase("qparams.R4.4.5.int4_asym.f32", make_args("int4_asym", "tensor"),
          torch.tensor([-0.5]), torch.tensor([1.0]))
    # R4.4.3 local scales: bf16 group absmax of arange(24).reshape(4,6), group 3
    w = torch.arange(24, dtype=BF16).reshape(4, 6).unflatten(-1, (2, 3))
    mn3, mx3 = w.amin(-1), w.amax(-1)
    g3 = generate_gparam(mn3.min().reshape(1), mx3.max().reshape(1))
    qcase("qparams.R4.4.3.nvfp4_g3.bf16", make_args("nvfp4", "tensor_group", 3), mn3, mx3, g3)
    # Q23: all-zero asymmetric
    for dt in DTYPES:
        for fmt in ["int8_asym", "int4_asym", "fp8_asym"]:
            qcase(f"qparams.Q23.all_zero.{fmt}.{DT_SHORT[dt]}", make_args(fmt, "channel"),
                  torch.zeros(3, 1, dtype=dt), torch.zeros(3, 1, dtype=dt),
                  note="Q23: zero scale -> NaN zero point before the cast")
    # Q12: MX f16 scale underflow
    for dt in DTYPES:
        a = torch.tensor([[2.0 ** -24, 2.0 ** -20, 2.0 ** -14, 1e-3, 0.0, 6.0, 448.0, 1e4]],
                         dtype=dt)
        for fmt in ["mxfp4", "mxfp8"]:
            qcase(f"qparams.Q12.{fmt}.small.{DT_SHORT[dt]}", make_args(fmt, "group"), -a, a)
    # 0-dim and integer statistics
    qcase("qparams.0dim.int8_asym.f32", make_args("int8_asym", "tensor"),
          torch.tensor(-2.0), torch.tensor(3.0))
    qcase("qparams.0dim.nvfp4.bf16", make_args("nvfp4", "tensor_group"),
          torch.tensor(-2.0, dtype=BF16), torch.tensor(3.0, dtype=BF16),
          torch.tensor([100.0]))
    for fmt in ["int8_sym", "int8_asym", "fp8"]:
        qcase(f"qparams.int32_stats.{fmt}", make_args(fmt, "channel"),
              torch.tensor([[-7], [0], [3], [-300]], dtype=torch.int32),
              torch.tensor([[5], [0], [9], [1]], dtype=torch.int32))

    # gparam
    def gcase(cid, mn, mx, note=None):
        c = {"id": cid, "min": st.add(mn, f"{cid}.min"), "max": st.add(mx, f"{cid}.max"),
             "expect": st.add(generate_gparam(mn, mx), f"{cid}.g")}
        if note is None and "inf" in cid:
            note = "an infinite absmax gives 2688/inf = 0, which is kept (only NaN/inf map to 1)"
        if note:
            c["note"] = note
        gcases.append(c)

    vals = [23.0, 11.0, 0.5, 1.0, 6.0, 448.0, 2688.0, 5000.0, 0.05, 0.041, 0.04, 1e-3,
            1e-5, 0.0, 1e-30, 1e-36, 3.3e38]
    for dt in DTYPES:
        for v in vals:
            mn = torch.tensor([-v], dtype=dt)
            mx = torch.tensor([v * 0.5], dtype=dt)
            gcase(f"gparam.{DT_SHORT[dt]}.absmin={v:g}", mn, mx)
            gcase(f"gparam.{DT_SHORT[dt]}.absmax={v:g}", torch.tensor([-v * 0.25], dtype=dt),
                  torch.tensor([v], dtype=dt))
        gcase(f"gparam.{DT_SHORT[dt]}.positive_min", torch.tensor([2.0], dtype=dt),
              torch.tensor([5.0], dtype=dt))
        gcase(f"gparam.{DT_SHORT[dt]}.negative_max", torch.tensor([-5.0], dtype=dt),
              torch.tensor([-2.0], dtype=dt))
        gcase(f"gparam.{DT_SHORT[dt]}.nan", torch.tensor([float("nan")], dtype=dt),
              torch.tensor([1.0], dtype=dt))
        gcase(f"gparam.{DT_SHORT[dt]}.inf", torch.tensor([-1.0], dtype=dt),
              torch.tensor([float("inf")], dtype=dt))
        gcase(f"gparam.{DT_SHORT[dt]}.0dim", torch.tensor(-3.0, dtype=dt),
              torch.tensor(2.0, dtype=dt))
    g = torch.Generator().manual_seed(7)
    for i in range(24):
        v = float(torch.exp(torch.randn(1, generator=g) * 3).item())
        for dt in DTYPES:
            gcase(f"gparam.{DT_SHORT[dt]}.rand{i}", torch.tensor([-v * 0.3], dtype=dt),
                  torch.tensor([v], dtype=dt))

    def e(cid, kind, inputs, fn):
        try:
            fn()
        except Exception as ex:  # noqa: BLE001
            errors.append({"id": cid, "kind": kind, "inputs": inputs, **exc_record(ex)})
            return
        raise AssertionError(cid)

    a_fp4_asym = make_args("fp4", "group", 16, symmetric=False)
    mn, mx = torch.tensor([[-1.0]]), torch.tensor([[2.0]])
    e("qparams.fp4_asymmetric", "qparams",
      {"args": dump_args(a_fp4_asym), "min": st.add(mn, "err.min"), "max": st.add(mx, "err.max")},
      lambda: calculate_qparams(mn, mx, a_fp4_asym))
    a6 = QuantizationArgs(num_bits=6, type="float", zp_dtype=FP8)
    e("qparams.float6_range", "qparams",
      {"args": dump_args(a6), "min": st.add(mn, "err.min"), "max": st.add(mx, "err.max")},
      lambda: calculate_qparams(mn, mx, a6))
    e("gparam.multi_element", "gparam",
      {"min": st.add(torch.tensor([-1.0, -2.0]), "err.gmin"),
       "max": st.add(torch.tensor([1.0, 2.0]), "err.gmax")},
      lambda: generate_gparam(torch.tensor([-1.0, -2.0]), torch.tensor([1.0, 2.0])))

    # args construction errors
    bad_args = [
        ("token_static", {"strategy": "token"}),
        ("group_without_size", {"strategy": "group"}),
        ("tensor_group_size_0", {"strategy": "tensor_group", "group_size": 0}),
        ("group_size_with_tensor", {"strategy": "tensor", "group_size": 16}),
        ("group_size_0_inferred", {"group_size": 0}),
        ("group_size_lt_minus1", {"group_size": -2}),
        ("block_without_structure", {"strategy": "block"}),
        ("structure_without_block", {"strategy": "channel", "block_structure": [2, 2]}),
        ("block_structure_zero", {"strategy": "block", "block_structure": [0, 4]}),
        ("block_structure_negative_str", {"strategy": "block", "block_structure": "4x-1"}),
        ("block_structure_three", {"strategy": "block", "block_structure": "2x4x8"}),
        ("block_structure_one", {"strategy": "block", "block_structure": [16]}),
        ("block_structure_parse", {"strategy": "block", "block_structure": "axb"}),
        ("block_structure_type", {"strategy": "block", "block_structure": 16}),
        ("dynamic_channel", {"strategy": "channel", "dynamic": True}),
        ("dynamic_block", {"strategy": "block", "block_structure": [2, 2], "dynamic": True}),
        ("dynamic_local_group", {"strategy": "group", "group_size": 16, "dynamic": "local"}),
        ("dynamic_bad_string", {"dynamic": "global"}),
        ("actorder_true_removed", {"strategy": "group", "group_size": 16, "actorder": True}),
        ("actorder_group_removed", {"strategy": "group", "group_size": 16, "actorder": "group"}),
        ("actorder_dynamic_removed", {"strategy": "group", "group_size": 16,
                                      "actorder": "dynamic"}),
        ("actorder_unknown", {"actorder": "foo"}),
        ("float6_no_zp_dtype", {"num_bits": 6, "type": "float"}),
        ("bad_type", {"type": "fixed"}),
        ("bad_strategy", {"strategy": "row"}),
        ("unknown_field", {"num_bits": 8, "foo": 1}),
        ("bad_scale_dtype", {"scale_dtype": "float7"}),
    ]
    for name, kw in bad_args:
        e(f"args.{name}", "args", {"args_kwargs": kw}, lambda kw=kw: QuantizationArgs(**kw))
    return st, cases, gcases, errors, garbage


# ---------------------------------------------------------------------------
# fake quantization
# ---------------------------------------------------------------------------


def build_fake_quant():
    st = Store()
    cases, errors = [], []
    ids = set()

    def fcase(cid, args, x, s, z, g=None, note=None):
        assert cid not in ids, cid
        ids.add(cid)
        y = fake_quantize(x, s, z, args, global_scale=g)
        c = {"id": cid, "args": dump_args(args), "args_zp_dtype": zp_dtype_of(args),
             "x": st.add(x, f"{cid}.x"),
             "scale": st.add(s, f"{cid}.scale"), "zero_point": st.opt(z, f"{cid}.zp"),
             "global_scale": st.opt(g, f"{cid}.g"), "g_idx": None,
             "expect": st.add(y, f"{cid}.y")}
        if note:
            c["note"] = note
        cases.append(c)

    def qp_for(x, args, strategy, shrink=0.9):
        """Scale/zp from x's own statistics (shrunk so that clipping happens)."""
        if strategy in ("tensor",):
            mn, mx = x.amin().reshape(1), x.amax().reshape(1)
        elif strategy == "channel":
            mn, mx = x.amin(-1, keepdim=True), x.amax(-1, keepdim=True)
        elif strategy in ("group", "tensor_group"):
            xx = x.unflatten(-1, (-1, args.group_size))
            mn, mx = xx.amin(-1), xx.amax(-1)
        elif strategy == "block":
            bh, bw = args.block_structure
            flat = flatten_for_calibration(x, "weight", args)
            mn, mx = flat.amin((0, -1)), flat.amax((0, -1))
        elif strategy == "token":
            mn, mx = x.amin(-1, keepdim=True), x.amax(-1, keepdim=True)
        elif strategy == "attn_head":
            flat = flatten_for_calibration(x, "q", args)
            mn, mx = flat.amin((0, -1)), flat.amax((0, -1))
        else:
            raise ValueError(strategy)
        g = None
        if strategy == "tensor_group":
            g = generate_gparam(mn.min().reshape(1), mx.max().reshape(1))
        s, z = calculate_qparams(mn * shrink, mx * shrink, args, g)
        return s, z, g

    shapes = {"tensor": (8, 64), "channel": (8, 64), "group": (8, 64),
              "tensor_group": (8, 64), "block": (20, 40), "token": (2, 4, 64),
              "attn_head": (2, 4, 6, 16)}
    fmts_for = {
        "tensor": INT_FMTS + ["fp8_asym", "fp4"],
        "channel": INT_FMTS + ["fp4"],
        "group": INT_FMTS + ["fp4", "mxfp4", "mxfp8"],
        "tensor_group": ["nvfp4", "int4_sym", "fp8"],
        "block": INT_FMTS,
        "token": ["int8_sym", "int8_asym", "fp8", "int4_sym"],
        "attn_head": INT_FMTS,
    }
    for strat, fmts in fmts_for.items():
        for fmt in fmts:
            for dt in DTYPES:
                dist = ["gauss", "student_t", "outlier"][seed_of(strat, fmt, dt) % 3]
                x = make_data(dist, shapes[strat], dt, seed_of("fq", strat, fmt, dt))
                extra = {"dynamic": True} if strat == "token" else {}
                gsz = 16 if strat in ("group", "tensor_group") else None
                args = make_args(fmt, strat, gsz, [16, 16] if strat == "block" else None,
                                 **extra)
                s, z, g = qp_for(x, args, strat)
                base = f"fq.{strat}.{fmt}.{DT_SHORT[dt]}.{dist}"
                fcase(base, args, x, s, z, g)
                if args.symmetric and strat in ("tensor", "group", "channel"):
                    fcase(base + ".zp_none", args, x, s, None, g)
                if strat == "tensor_group":
                    # module parameters hold the scale in the model dtype
                    fcase(base + ".scale_in_x_dtype", args, x, s.to(dt), z, g)
                    fcase(base + ".no_global_scale", args, x,
                          calculate_qparams(x.unflatten(-1, (-1, 16)).amin(-1),
                                            x.unflatten(-1, (-1, 16)).amax(-1), args)[0],
                          z, None)
    # mixed dtypes (Q18): x and scale of different float dtypes
    for strat in ["tensor", "channel", "group", "block", "tensor_group"]:
        for xdt, sdt in [(F32, BF16), (BF16, F32), (F16, BF16), (BF16, F16), (F32, F16)]:
            fmt = "nvfp4" if strat == "tensor_group" else "int8_asym"
            gsz = 16 if strat in ("group", "tensor_group") else None
            x = make_data("gauss", shapes[strat], xdt, seed_of("mixed", strat, xdt, sdt))
            args = make_args(fmt, strat, gsz, [16, 16] if strat == "block" else None)
            s, z, g = qp_for(x, args, strat)
            fcase(f"fq.mixed.{strat}.{fmt}.x={DT_SHORT[xdt]}.scale={DT_SHORT[sdt]}", args, x,
                  s.to(sdt), z, g, note="Q18: output dtype")
    # R5.4.1 example: ones(100, 200), block [128, 128], scale ones(1, 2), fp8
    for v in [1.0, 0.5]:
        x = torch.full((100, 200), v, dtype=BF16)
        args = make_args("fp8", "block", block=[128, 128])
        fcase(f"fq.R5.4.1.block128.fp8.bf16.value={v}", args, x, torch.ones(1, 2, dtype=BF16),
              torch.zeros(1, 2, dtype=FP8))
    x = make_data("outlier", (40, 72), F32, seed_of("blk32"))
    args = make_args("int8_sym", "block", block=[32, 32])
    s, z, _ = qp_for(x, args, "block")
    fcase("fq.block32.int8_sym.f32.outlier.40x72_padded", args, x, s, z)
    # R4.4 example 3: fake-quantized NVFP4 weight, arange(24) bf16
    w = torch.arange(24, dtype=BF16).reshape(4, 6)
    args = make_args("nvfp4", "tensor_group", 3)
    ww = w.unflatten(-1, (2, 3))
    g3 = generate_gparam(ww.amin().reshape(1), ww.amax().reshape(1))
    s3, z3 = calculate_qparams(ww.amin(-1), ww.amax(-1), args, g3)
    fcase("fq.R4.4.3.nvfp4_g3.bf16", args, w, s3, z3, g3)
    fcase("fq.R4.4.3.nvfp4_g3.bf16.scale_bf16", args, w, s3.to(BF16), z3, g3)
    # FP4 -0.0 handling through fake quantization (Q17)
    x = torch.tensor([[-0.0, -0.1, 0.1, 0.0, -0.3, 0.3, -2.6, 2.5] * 2], dtype=F32)
    args = make_args("fp4", "group", 16)
    fcase("fq.fp4.signed_zero.f32", args, x, torch.ones(1, 1), torch.zeros(1, 1, dtype=FP8))
    fcase("fq.fp4.signed_zero.f32.zp_none", args, x, torch.ones(1, 1), None)
    # Q19: 1-D per-group scale on the group path
    x = make_data("gauss", (4, 32), F32, seed_of("q19"))
    args = make_args("int8_sym", "group", 16)
    fcase("fq.Q19.group_1d_scale", args, x, torch.tensor([0.01, 0.02, 0.03, 0.04]),
          torch.zeros(4, dtype=torch.int8), note="Q19: 1-D scale becomes one scale per row")
    # 3-D activation with group scales (dynamic-style shapes)
    x = make_data("gauss", (1, 4, 8), F32, seed_of("grp3d"))
    args = make_args("int8_asym", "group", 4, dynamic=True)
    xx = x.unflatten(-1, (2, 4))
    s, z = calculate_qparams(xx.amin(-1), xx.amax(-1), args)
    fcase("fq.group.int8_asym.3d.1x4x8", args, x, s, z)

    def e(cid, inputs, fn):
        try:
            fn()
        except Exception as ex:  # noqa: BLE001
            errors.append({"id": cid, "kind": "fake_quant", "inputs": inputs, **exc_record(ex)})
            return
        raise AssertionError(cid)

    x = make_data("gauss", (4, 40), F32, 3)
    args = make_args("int8_sym", "group", 16)
    s = torch.ones(4, 3)
    e("fake_quant.group_not_divisible", {"args": dump_args(args), "x": st.add(x, "err.x40"),
                                         "scale": st.add(s, "err.s43")},
      lambda: fake_quantize(x, s, None, args))
    x2 = make_data("gauss", (4, 8), F32, 4)
    s2 = torch.ones(4, 1)
    e("fake_quant.cols_lt_group_size_Q20", {"args": dump_args(args), "x": st.add(x2, "err.x8"),
                                            "scale": st.add(s2, "err.s41")},
      lambda: fake_quantize(x2, s2, None, args))
    return st, cases, errors


# ---------------------------------------------------------------------------
# flatten
# ---------------------------------------------------------------------------


def build_flatten():
    st = Store()
    cases, errors = [], []

    def fl(cid, base, args, x):
        y = flatten_for_calibration(x, base, args)
        cases.append({"id": cid, "base_name": base, "args": dump_args(args),
                      "args_zp_dtype": zp_dtype_of(args),
                      "x": st.add(x, f"{cid}.x"), "expect": st.add(y.contiguous(), f"{cid}.y")})

    def ar(shape, dt=F32):
        n = math.prod(shape)
        return (torch.arange(n, dtype=torch.float32) % 251 - 125).reshape(shape).to(dt)

    fl("flatten.weight.tensor.8x64", "weight", make_args("int8_sym", "tensor"), ar((8, 64)))
    fl("flatten.weight.tensor.1d", "weight", make_args("int8_sym", "tensor"), ar((64,)))
    fl("flatten.weight.tensor.3d", "weight", make_args("int8_sym", "tensor"), ar((2, 4, 16)))
    fl("flatten.weight.channel.8x64", "weight", make_args("int8_sym", "channel"), ar((8, 64)))
    fl("flatten.weight.channel.3d", "weight", make_args("int8_sym", "channel"), ar((2, 4, 16)))
    fl("flatten.weight.group16.8x64", "weight", make_args("int4_sym", "group", 16), ar((8, 64)))
    fl("flatten.weight.group16.3d", "weight", make_args("int4_sym", "group", 16),
       ar((2, 3, 32), BF16))
    fl("flatten.weight.tensor_group16.8x64", "weight", make_args("nvfp4", "tensor_group"),
       ar((8, 64), F16))
    fl("flatten.weight.mxfp4.8x64", "weight", make_args("mxfp4", "group"), ar((8, 64)))
    for shape, blk in [((20, 40), [16, 16]), ((32, 48), [16, 16]), ((10, 10), [4, 4]),
                       ((7, 33), [4, 8]), ((100, 200), [128, 128])]:
        dt = BF16 if shape == (100, 200) else F32
        fl(f"flatten.weight.block{blk[0]}x{blk[1]}.{shape[0]}x{shape[1]}", "weight",
           make_args("fp8", "block", block=blk), ar(shape, dt))
    for shape in [(2, 4, 64), (64,), (5, 64), (2, 3, 4, 16)]:
        s = "x".join(map(str, shape))
        fl(f"flatten.input.tensor.{s}", "input", make_args("int8_sym", "tensor"), ar(shape))
    fl("flatten.output.tensor.2x4x64", "output", make_args("int8_sym", "tensor"),
       ar((2, 4, 64)))
    fl("flatten.input.group16.2x4x64", "input", make_args("int8_sym", "group", 16),
       ar((2, 4, 64)))
    fl("flatten.input.tensor_group16.2x4x64", "input", make_args("nvfp4", "tensor_group"),
       ar((2, 4, 64), BF16))
    fl("flatten.input.group16.5x64_Q15", "input", make_args("int8_sym", "group", 16),
       ar((5, 64)))
    fl("flatten.input.token.2x4x64", "input", make_args("int8_sym", "token", dynamic=True),
       ar((2, 4, 64)))
    for base in ["q", "k", "v"]:
        fl(f"flatten.{base}.tensor.2x4x6x16", base, make_args("fp8", "tensor"),
           ar((2, 4, 6, 16)))
        fl(f"flatten.{base}.attn_head.2x4x6x16", base, make_args("fp8", "attn_head"),
           ar((2, 4, 6, 16)))

    def e(cid, base, args, x):
        try:
            flatten_for_calibration(x, base, args)
        except Exception as ex:  # noqa: BLE001
            errors.append({"id": cid, "kind": "flatten",
                           "inputs": {"base_name": base, "args": dump_args(args),
                                      "x": st.add(x, f"{cid}.x")}, **exc_record(ex)})
            return
        raise AssertionError(cid)

    e("flatten.weight.token", "weight", make_args("int8_sym", "token", dynamic=True), ar((4, 8)))
    e("flatten.weight.attn_head", "weight", make_args("int8_sym", "attn_head"), ar((4, 8)))
    e("flatten.weight.group_not_divisible", "weight", make_args("int8_sym", "group", 16),
      ar((4, 24)))
    e("flatten.weight.block_1d", "weight", make_args("int8_sym", "block", block=[4, 4]),
      ar((16,)))
    e("flatten.input.channel", "input", make_args("int8_sym", "channel"), ar((2, 3, 8)))
    e("flatten.input.block", "input", make_args("int8_sym", "block", block=[2, 2]),
      ar((2, 3, 8)))
    e("flatten.input.attn_head", "input", make_args("int8_sym", "attn_head"), ar((2, 3, 8)))
    e("flatten.input.group_not_divisible", "input", make_args("int8_sym", "group", 16),
      ar((2, 3, 24)))
    e("flatten.q.token", "q", make_args("int8_sym", "token", dynamic=True), ar((1, 2, 3, 8)))
    e("flatten.q.channel", "q", make_args("int8_sym", "channel"), ar((1, 2, 3, 8)))
    e("flatten.q.group", "q", make_args("int8_sym", "group", 4), ar((1, 2, 3, 8)))
    e("flatten.q.tensor_group", "q", make_args("nvfp4", "tensor_group", 4), ar((1, 2, 3, 8)))
    e("flatten.q.block", "q", make_args("int8_sym", "block", block=[2, 2]), ar((1, 2, 3, 8)))
    e("flatten.unknown_base", "bias", make_args("int8_sym", "tensor"), ar((8,)))
    return st, cases, errors


# ---------------------------------------------------------------------------
# rounding primitives
# ---------------------------------------------------------------------------


def build_round():
    st = Store()
    cases = []

    def rc(cid, op, x, y, num_bits=None):
        cases.append({"id": cid, "op": op, "num_bits": num_bits, "x": st.add(x, f"{cid}.x"),
                      "expect": st.add(y, f"{cid}.y")})

    g = torch.Generator().manual_seed(1234)
    # FP8 cast
    special = [449.0, 464.0, 232.0, 17.0, 19.0, 0.001, 2.0 ** -10, -0.0, 0.0, 448.0, 465.0,
               480.0, 500.0, -449.0, -464.0, -465.0, 2.0 ** -9, 2.0 ** -6, 1.5 * 2.0 ** -10,
               3.0 * 2.0 ** -11, 0.015625, 0.0146484375, 240.0, 272.0, 1e-7, 1e6,
               float("inf"), float("-inf"), float("nan"), 0.3, -0.7, 13.0, 14.5, 15.0, 30.0]
    grid = []
    for e in range(-11, 10):
        for m in range(16):
            grid.append((1 + m / 16) * 2.0 ** e)  # midpoints between fp8 codes and codes
    rnd = (torch.randn(300, generator=g) * torch.exp(torch.randn(300, generator=g) * 3)).tolist()
    base = torch.tensor(special + grid + [-v for v in grid] + rnd, dtype=torch.float64)
    for dt in DTYPES:
        x = base.to(dt)
        rc(f"round.fp8_cast.{DT_SHORT[dt]}", "fp8_cast", x, x.to(FP8))
    # FP4 rounding
    thr = [0.0, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0]
    vals = [-0.0, 0.0, 0.1, -0.1, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 7.0, 100.0, -100.0,
            float("inf"), float("-inf"), float("nan"), 1e-30]
    for dt in DTYPES:
        fin = torch.finfo(dt)
        xs = list(vals)
        for t in thr:
            tt = torch.tensor(t, dtype=dt)
            up = torch.nextafter(tt, torch.tensor(float("inf"), dtype=dt)).item()
            dn = torch.nextafter(tt, torch.tensor(float("-inf"), dtype=dt)).item()
            xs += [t, up, dn, -t, -up, -dn]
        xs += (torch.rand(200, generator=g) * 14 - 7).tolist()
        x = torch.tensor(xs, dtype=torch.float64).to(dt)
        del fin
        rc(f"round.fp4.{DT_SHORT[dt]}", "fp4_round", x, cast_to_fp4(x.clone()))
    # round_to_power_2 and MX scales
    p2 = [5.687891, 0.965272, -6.944130, 0.224199, 7.290238, 0.073246, 0.0, -0.0, 1.0, 1.5,
          1.74, 1.75, 1.76, 2.0, 3.0, 6.0, 448.0, 1e-3, 1e-6, 2.0 ** -24, 2.0 ** -130, 65000.0,
          1e30, float("inf"), 0.75, 0.875, -1.75]
    p2 += (torch.exp(torch.randn(150, generator=g) * 4)).tolist()
    for dt in DTYPES:
        x = torch.tensor(p2, dtype=torch.float64).to(dt)
        rc(f"round.round_to_power_2.{DT_SHORT[dt]}", "round_to_power_2", x, round_to_power_2(x))
        xa = x.abs()
        for nb in (4, 8):
            rc(f"round.mx_scales.b{nb}.{DT_SHORT[dt]}", "mx_scales", xa,
               generate_mx_scales(xa, nb), num_bits=nb)
    return st, cases


# ---------------------------------------------------------------------------


FILES = ["observers.json", "qparams.json", "fake_quant.json", "flatten.json", "round.json"]


def main():
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*", metavar="FILE",
                    help=f"write only these files, of {', '.join(FILES)} (default: all)")
    names = ap.parse_args().files
    unknown = sorted(set(names) - set(FILES))
    if unknown:
        ap.error(f"unknown golden file(s) {unknown}; choose from {FILES}")
    want = set(names or FILES)
    if "observers.json" in want:
        oc = ObserverCases()
        oc.build_matrix()
        oc.build_kwargs_variants()
        n_es = oc.build_early_stop()
        oc.build_special()
        oc.build_fused()
        oc.build_errors()
        oc.build_new_observers()
        print(f"observers: {len(oc.cases)} cases, {len(oc.fused)} fused, {len(oc.errors)} errors, "
              f"{len(oc.garbage)} garbage, {n_es} early-stop", file=sys.stderr)
        write_json("observers.json", oc.write())
    if "qparams.json" in want:
        st, qc, gc, qe, qg = build_qparams()
        write_json("qparams.json", {"generator": GENERATOR, "tensors": st.tensors,
                                    "qparams_cases": qc, "gparam_cases": gc, "error_cases": qe,
                                    "reference_garbage": qg})
    if "fake_quant.json" in want:
        st, fc, fe = build_fake_quant()
        write_json("fake_quant.json", {"generator": GENERATOR, "tensors": st.tensors,
                                       "fake_quant_cases": fc, "error_cases": fe})
    if "flatten.json" in want:
        st, flc, fle = build_flatten()
        write_json("flatten.json", {"generator": GENERATOR, "tensors": st.tensors,
                                    "flatten_cases": flc, "error_cases": fle})
    if "round.json" in want:
        st, rcs = build_round()
        write_json("round.json", {"generator": GENERATOR, "tensors": st.tensors,
                                  "round_cases": rcs})
    for name in sorted(want):
        p = OUT_DIR / name
        print(f"{p.relative_to(REPO)}: {p.stat().st_size} bytes", file=sys.stderr)


if __name__ == "__main__":
    main()
