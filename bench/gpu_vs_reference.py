#!/usr/bin/env python3
"""Calibration on a CUDA device: the reference's paths against qobs, timed side by side.

    python3 bench/gpu_vs_reference.py                      # CUDA, full shapes
    python3 bench/gpu_vs_reference.py --device cpu --small # smoke test of every code path

Columns (each its own worker process, run one after another on the same device):

  (a) triton  the reference as users run it: llm-compressor's observers; on CUDA its MSE
              search takes the Triton backend (docs/RULES.md R6.6.9, R6.6.10)
  (b) eager   the same with CT_ENFORCE_EAGER=1 in the worker's environment (read when
              compressed-tensors is imported, so it needs a process of its own)
  (c) plugin  qobs.llmcompressor's qobs_* observers in llm-compressor, today's path: the
              tensor is copied to the host and qobs computes there; run with QOBS_CUDA=0,
              the switch that keeps qobs on the host once it has a CUDA backend
  (d) qobs_cuda  the same plugin with QOBS_CUDA unset, when `qobs.cuda_available()`
              exists and returns True; otherwise the column prints n/a

Cases, all bf16: weights (4096x4096, 8192x28672) observed once and then get_qparams:
memoryless_mse INT4 g128 symmetric, nvfp4_expanded_mse NVFP4, imatrix_mse INT4 g128 with
a random importance (the observer attached to a Linear that saw one random batch),
memoryless_minmax INT4 g128; activation batches 8x2048x4096 observed per batch
(memoryless_minmax, static_minmax, minmax with its moving average, int8 per tensor) and
the imatrix forward-pre hook's accumulation. Times are medians of calls bracketed by
torch.cuda.synchronize(); the first call of each cell is a warm-up (Triton compiles
there), then calls repeat until --reps or --budget-s, whichever comes first (at least
one; a cell whose warm-up alone exceeds the budget reports that cold call, marked *).

Agreement: scale / zero_point / global_scale (and min / max) of every side are compared
byte for byte. qobs against eager must be identical, or every differing group a proven
tie (tools/check_ties.py's tie_report: both candidates' errors recomputed from the
reference's own fake-quantized values, on the device, within the bound of an f32 sum in
any order). Against Triton only the number of differing groups is reported: its
per-group early stopping is another selection rule by design (R6.6.9). Exit status 1
when a qobs side is neither identical to eager nor a proven tie, or a side failed.
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tools"))

SIDES = ("triton", "eager", "plugin", "qobs_cuda")
# the order the workers run in: under --deadline-s the last ones may be cut short
RUN_ORDER = ("triton", "qobs_cuda", "eager", "plugin")
COLUMN = {"triton": "(a) ref Triton", "eager": "(b) ref eager", "plugin": "(c) qobs plugin",
          "qobs_cuda": "(d) qobs CUDA"}
QOBS_SIDES = ("plugin", "qobs_cuda")

W4 = dict(num_bits=4, type="int", strategy="group", group_size=128, symmetric=True)
NVFP4 = dict(num_bits=4, type="float", strategy="tensor_group", group_size=16, symmetric=True,
             scale_dtype="float8_e4m3fn")
ACT_INT8 = dict(num_bits=8, type="int", strategy="tensor", symmetric=True)
WEIGHT_CASES = (("memoryless_mse", "W4A16 g128", W4), ("nvfp4_expanded_mse", "NVFP4", NVFP4),
                ("imatrix_mse", "W4A16 g128", W4), ("memoryless_minmax", "W4A16 g128", W4))
MSE_OBSERVERS = ("memoryless_mse", "nvfp4_expanded_mse", "imatrix_mse")
ACT_OBSERVERS = ("memoryless_minmax", "static_minmax", "minmax")


def shapes(a):
    if a.small:
        return [(64, 256), (32, 512)], (2, 16, 256)
    return [(4096, 4096), (8192, 28672)], (8, 2048, 4096)


def make_weight(torch, rows, cols, seed):
    """N(0, 0.02) with three outliers per row, as tools/check_ties.py draws it; drawn on
    the CPU so that every side sees the same bytes."""
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(rows, cols, generator=g) * 0.02
    idx = torch.randint(0, cols, (rows, 3), generator=g)
    w.scatter_(1, idx, torch.randn(rows, 3, generator=g) * 0.3)
    return w.to(torch.bfloat16)


def make_batch(torch, shape, seed, spread=False):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=g)
    if spread:  # per-feature scales, so that the importance E[x^2] is far from uniform
        x = x * torch.exp(torch.randn(shape[-1], generator=g))
    return x.to(torch.bfloat16)


# -- worker --------------------------------------------------------------------------------
def worker(a):
    import torch

    dev = torch.device(a.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        sys.exit("--device cuda, but torch sees no CUDA device")
    torch.manual_seed(0)
    from compressed_tensors.quantization import QuantizationArgs
    from compressed_tensors.utils import impl_backend
    from llmcompressor.observers.base import Observer
    from llmcompressor.observers.helpers import flatten_for_calibration
    from llmcompressor.observers.mse_quant import _mse_triton_req

    prefix = ""
    info = {"side": a.side, "torch": torch.__version__, "enforce_eager": bool(impl_backend.ENFORCE_EAGER)}
    if a.side in QOBS_SIDES:
        import qobs
        import qobs.llmcompressor  # noqa: F401  registers the qobs_* observers

        prefix = "qobs_"
        probe = getattr(qobs, "cuda_available", None)
        info["qobs_cuda_available"] = bool(probe()) if probe else None
    if dev.type == "cuda":
        info["device_name"] = torch.cuda.get_device_name(dev)
    with open(os.path.join(a.tmp, f"{a.side}.info.json"), "w") as f:
        json.dump(info, f)

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    def new_observer(name, base, spec, **kw):
        args = QuantizationArgs(**spec, observer=prefix + name)
        return Observer.load_from_registry(prefix + name, base_name=base, args=args, **kw), args

    def stats_of(obs):
        if a.side in QOBS_SIDES:
            st = obs.get_statistics()
            return st["min_vals"], st["max_vals"]
        return obs.min_vals, obs.max_vals

    def plugin_core(obs):
        # the importance the plugin accumulates on the device reaches its core when asked
        store = getattr(obs, "store_device_statistics", None)
        if store:
            store()
        return obs._qobs

    def importance_sum(obs):
        # the plugin's core hands numpy arrays back until it has seen a torch tensor
        return torch.as_tensor((plugin_core(obs) if a.side in QOBS_SIDES else obs)._imatrix_sum)

    def importance_of(obs):
        count = (plugin_core(obs) if a.side in QOBS_SIDES else obs)._imatrix_count
        return importance_sum(obs).float() / float(torch.as_tensor(count))

    def cpu(t):
        return None if t is None else t.detach().to("cpu").clone()

    out_path = os.path.join(a.tmp, f"{a.side}.jsonl")

    def record(key, times, cold, saved, extra=None):
        torch.save(saved, os.path.join(a.tmp, f"{a.side}.{key.replace('/', '_')}.pt"))
        row = {"key": key, "times": times, "cold": cold}
        row.update(extra or {})
        with open(out_path, "a") as f:
            f.write(json.dumps(row) + "\n")

    def timed(call, before=None, fixed=False):
        """Warm-up, then calls until --reps or --budget-s (fixed: exactly --reps, for
        statistics that accumulate over calls); returns (times, cold)."""
        start = time.perf_counter()
        times = []
        n = 0
        while True:
            if before:
                before()
            sync()
            t0 = time.perf_counter()
            call()
            sync()
            dt = time.perf_counter() - t0
            n += 1
            if n == 1:
                cold = dt
            else:
                times.append(dt)
            if len(times) >= a.reps or (not fixed and time.perf_counter() - start > a.budget_s):
                break
        return times, cold

    weight_shapes, act_shape = shapes(a)
    for rows, cols in weight_shapes:
        w = make_weight(torch, rows, cols, seed=rows * 7 + cols).to(dev)
        lin = torch.nn.Linear(cols, rows, bias=False, device=dev, dtype=torch.bfloat16)
        with torch.no_grad():
            lin.weight.copy_(w)
        x_imp = make_batch(torch, (256, cols), seed=cols, spread=True).to(dev)
        for name, scheme, spec in WEIGHT_CASES:
            key = f"{name}/{scheme}/{rows}x{cols}"
            obs, args = new_observer(name, "weight", spec)
            flat = flatten_for_calibration(w, "weight", args)
            path = "triton" if name != "imatrix_mse" and name.endswith("mse") and _mse_triton_req(flat, args) \
                and not impl_backend.ENFORCE_EAGER and a.side not in QOBS_SIDES else "torch"
            captured = {}

            def before():
                if name == "imatrix_mse":  # get_qparams consumed the importance: attach again, one batch
                    obs.attach(lin)
                    with torch.no_grad():
                        lin(x_imp)
                    captured["importance"] = importance_of(obs)

            def call(obs=obs):
                obs(w)
                captured["stats"] = stats_of(obs)
                captured["qparams"] = obs.get_qparams()

            try:
                times, cold = timed(call, before)
            except Exception as e:  # noqa: BLE001  (a failed cell must not hide the others)
                record(key, [], None, {}, {"error": f"{type(e).__name__}: {e}"[:300]})
                continue
            mn, mx = captured["stats"]
            qp = captured["qparams"]
            saved = {"min": cpu(mn), "max": cpu(mx), "scale": cpu(qp["scale"]), "zero_point": cpu(qp["zero_point"]),
                     "global_scale": cpu(qp.get("global_scale"))}
            if name == "imatrix_mse":
                saved["importance"] = cpu(captured["importance"])
                obs.detach(lin)
            record(key, times, cold, saved, {"mse_path": path})

    x = make_batch(torch, act_shape, seed=1).to(dev)
    for name in ACT_OBSERVERS:
        key = f"{name}/INT8 tensor/{'x'.join(map(str, act_shape))}"
        obs, args = new_observer(name, "input", ACT_INT8)
        try:
            times, cold = timed(lambda obs=obs: obs(x), fixed=True)
            mn, mx = stats_of(obs)
            saved = {"min": cpu(mn), "max": cpu(mx)}
            qp = obs.get_qparams()
            saved.update(scale=cpu(qp["scale"]), zero_point=cpu(qp["zero_point"]))
            # every side makes the same number of calls (the statistics accumulate)
            record(key, times, cold, saved, {"calls": len(times) + 1})
        except Exception as e:  # noqa: BLE001
            record(key, [], None, {}, {"error": f"{type(e).__name__}: {e}"[:300]})
    key = f"imatrix_accumulate/hook/{'x'.join(map(str, act_shape))}"
    mod = torch.nn.Linear(act_shape[-1], 8, bias=False, device=dev, dtype=torch.bfloat16)
    obs, _ = new_observer("imatrix_mse", "weight", W4)
    obs.attach(mod)
    (hook,) = mod._forward_pre_hooks.values()
    try:
        times, cold = timed(lambda: hook(mod, (x,)), fixed=True)
        record(key, times, cold, {"importance_sum": cpu(importance_sum(obs))},
               {"calls": len(times) + 1})
    except Exception as e:  # noqa: BLE001
        record(key, [], None, {}, {"error": f"{type(e).__name__}: {e}"[:300]})


# -- tie worker: runs in the reference's eager environment on the device ------------------
def tie_worker(a):
    import torch
    from check_ties import tie_report
    from compressed_tensors.quantization import QuantizationArgs
    from llmcompressor.observers.base import Observer

    dev = torch.device(a.device)
    report = {}
    weight_shapes, _ = shapes(a)
    for rows, cols in weight_shapes:
        w = make_weight(torch, rows, cols, seed=rows * 7 + cols).to(dev)
        for name, scheme, spec in WEIGHT_CASES:
            if name not in MSE_OBSERVERS:
                continue
            key = f"{name}/{scheme}/{rows}x{cols}"
            eager = load_saved(a.tmp, "eager", key)
            if not eager:
                continue
            args = QuantizationArgs(**spec, observer=name)
            obs = Observer.load_from_registry(name, base_name="weight", args=args)
            for side in QOBS_SIDES:
                other = load_saved(a.tmp, side, key)
                if not other:
                    continue
                imp = eager.get("importance") if name == "imatrix_mse" else None
                r = tie_report(w, args, obs, eager["min"].reshape(-1).to(dev), eager["max"].reshape(-1).to(dev),
                               other["min"].reshape(-1), other["max"].reshape(-1), importance=imp)
                entry = {k: r[k] for k in ("groups", "disagreements", "ties")}
                entry.update(non_ties=len(r["non_ties"]), non_tie_examples=r["non_ties"][:3])
                if r["non_ties"] and dev.type != "cpu":
                    # qobs follows the CPU reference: the errors formed with the CPU's
                    # arithmetic (torch's CPU pow, R6.6.10) may tie where CUDA's do not
                    rc = tie_report(w.cpu(), args, obs, eager["min"].reshape(-1), eager["max"].reshape(-1),
                                    other["min"].reshape(-1), other["max"].reshape(-1), importance=imp)
                    entry["non_ties_with_cpu_terms"] = len(rc["non_ties"])
                report[f"{side}|{key}"] = entry
    json.dump(report, sys.stdout)


def load_saved(tmp, side, key):
    import torch

    p = os.path.join(tmp, f"{side}.{key.replace('/', '_')}.pt")
    return torch.load(p) if os.path.exists(p) else None


# -- driver --------------------------------------------------------------------------------
def fmt_ms(row):
    if row is None:
        return "n/a"
    if row.get("error"):
        return "error"
    if row["times"]:
        return f"{statistics.median(row['times']) * 1e3:.2f}"
    return f"{row['cold'] * 1e3:.2f}*"


def median_s(row):
    if not row or row.get("error"):
        return None
    return statistics.median(row["times"]) if row["times"] else row["cold"]


def ratio(num, den):
    return f"{num / den:.2f}" if num and den else "n/a"


def differing(a_saved, b_saved):
    """(identical bytes?, differing qparam elements) over scale / zero_point / global_scale."""
    import torch

    if not a_saved or not b_saved:
        return None, None
    same, count = True, 0
    for field in ("scale", "zero_point", "global_scale", "importance_sum"):
        x, y = a_saved.get(field), b_saved.get(field)
        if x is None and y is None:
            continue
        if x is None or y is None or x.dtype != y.dtype or x.shape != y.shape:
            return False, -1
        eq = x.contiguous().view(torch.uint8).reshape(x.numel(), -1) == y.contiguous().view(torch.uint8).reshape(
            y.numel(), -1)
        diff = int((~eq.all(dim=1)).sum())
        same &= diff == 0
        count = max(count, diff)
    return same, count


def sum_within_bound(a_saved, b_saved, terms):
    """The imatrix hook's f32 sums of x^2 (R6.8.3) over `terms` values per element: the
    reference's order is torch's, qobs' its own canonical one (A2). Both are within
    (terms - 1) * 2^-24 of the exact sum relative (non-negative terms, exact in f32), so
    two results more than twice that apart cannot both be such sums. Returns
    (within?, max relative difference, bound)."""
    import torch

    x, y = a_saved["importance_sum"].double(), b_saved["importance_sum"].double()
    rel = float(((x - y).abs() / torch.maximum(x.abs(), y.abs()).clamp_min(1e-300)).max())
    bound = 2 * terms * 2.0 ** -24
    return rel <= bound, rel, bound


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--small", action="store_true", help="tiny shapes (smoke test)")
    p.add_argument("--python", default=sys.executable,
                   help="interpreter with llmcompressor, compressed-tensors and qobs (for every side)")
    p.add_argument("--reps", type=int, default=10, help="timed calls per cell after the warm-up (at most)")
    p.add_argument("--budget-s", type=float, default=5.0, help="stop repeating a cell after this many seconds")
    p.add_argument("--side-timeout", type=float, default=600.0, help="seconds per worker process")
    p.add_argument("--deadline-s", type=float, default=3600.0,
                   help="seconds for all workers together; the tables are printed in any case")
    p.add_argument("--sides", default=",".join(SIDES), help="comma-separated subset of " + ",".join(SIDES))
    p.add_argument("--out", help="also write the tables and the raw JSON into this folder")
    p.add_argument("--side", choices=SIDES + ("ties",), help=argparse.SUPPRESS)
    p.add_argument("--tmp", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.side == "ties":
        return tie_worker(a)
    if a.side:
        return worker(a)

    t_start = time.perf_counter()
    sides = [s for s in RUN_ORDER if s in a.sides.split(",")]
    base_env = dict(os.environ, PYTHONUNBUFFERED="1")
    base_env.pop("CT_ENFORCE_EAGER", None)
    envs = {"triton": base_env, "eager": dict(base_env, CT_ENFORCE_EAGER="1"),
            "plugin": dict(base_env, QOBS_CUDA="0"), "qobs_cuda": dict(base_env)}
    envs["qobs_cuda"].pop("QOBS_CUDA", None)
    failures = []
    notes = []
    with tempfile.TemporaryDirectory() as tmp:
        common = ["--device", a.device, "--reps", str(a.reps), "--budget-s", str(a.budget_s), "--tmp", tmp] + (
            ["--small"] if a.small else [])
        if "qobs_cuda" in sides:
            probe = subprocess.run([a.python, "-c", "import qobs; f = getattr(qobs, 'cuda_available', None); "
                                    "print(bool(f and f()))"], capture_output=True, text=True, env=base_env)
            if probe.stdout.strip() != "True":
                sides.remove("qobs_cuda")
                notes.append("(d): qobs.cuda_available() is absent or False: column n/a")
        wall = {}
        def time_left(reserve=0.0):
            return a.deadline_s - (time.perf_counter() - t_start) - reserve

        for side in sides:
            t0 = time.perf_counter()
            # keep some time for the tie check once eager and a qobs side have run
            limit = min(a.side_timeout, time_left(reserve=20.0))
            if limit < 10:
                failures.append(f"{side} worker not run: --deadline-s reached")
                continue
            try:
                r = subprocess.run([a.python, os.path.abspath(__file__), "--side", side] + common, env=envs[side],
                                   capture_output=True, text=True, timeout=limit)
                if r.returncode != 0:
                    failures.append(f"{side} worker exited {r.returncode}: {r.stderr[-1500:]}")
            except subprocess.TimeoutExpired:
                failures.append(f"{side} worker timed out after {limit:.0f} s (partial results kept)")
            wall[side] = time.perf_counter() - t0
        rows = {}
        infos = {}
        for side in sides:
            path = os.path.join(tmp, f"{side}.jsonl")
            if os.path.exists(path):
                for line in open(path):
                    row = json.loads(line)
                    rows[(side, row["key"])] = row
                    if row.get("error"):
                        failures.append(f"{side} {row['key']}: {row['error']}")
            ip = os.path.join(tmp, f"{side}.info.json")
            if os.path.exists(ip):
                infos[side] = json.load(open(ip))
        ties = {}
        if "eager" in sides and any(s in sides for s in QOBS_SIDES) and time_left() > 5:
            try:
                r = subprocess.run([a.python, os.path.abspath(__file__), "--side", "ties"] + common,
                                   env=envs["eager"], capture_output=True, text=True,
                                   timeout=min(a.side_timeout, time_left()))
                if r.returncode == 0:
                    ties = json.loads(r.stdout.strip().splitlines()[-1])
                else:
                    failures.append(f"tie check exited {r.returncode}: {r.stderr[-1500:]}")
            except subprocess.TimeoutExpired:
                failures.append("tie check timed out")

        keys = list(dict.fromkeys(k for (_, k) in rows))
        lines = [f"# gpu_vs_reference: device {a.device}" + (" (small)" if a.small else "") +
                 "".join(f"; {s}: {infos[s].get('device_name', a.device)}, torch {infos[s]['torch']}, "
                         f"CT_ENFORCE_EAGER {'on' if infos[s]['enforce_eager'] else 'off'}"
                         + (f", qobs.cuda_available {infos[s]['qobs_cuda_available']}"
                            if 'qobs_cuda_available' in infos[s] else "")
                         for s in SIDES if s in infos), ""]
        for s in ("plugin",):
            if infos.get(s, {}).get("qobs_cuda_available"):
                notes.append("(c) ran where qobs reports a CUDA backend: QOBS_CUDA=0 must keep it on the host")
        lines.append("| case | shape | " + " | ".join(f"{COLUMN[s]} ms" for s in SIDES) +
                     " | b/a | c/a | c/b | d/a | d/b | search path a / b |")
        lines.append("|---" * (2 + len(SIDES) + 6) + "|")
        for k in keys:
            name, scheme, shape = k.split("/")
            r = {s: rows.get((s, k)) for s in SIDES}
            t = {s: median_s(r[s]) for s in SIDES}
            path = " / ".join((r[s] or {}).get("mse_path", "-") for s in ("triton", "eager"))
            lines.append(f"| {name} {scheme} | {shape} | " + " | ".join(fmt_ms(r[s]) for s in SIDES) +
                         f" | {ratio(t['eager'], t['triton'])} | {ratio(t['plugin'], t['triton'])}"
                         f" | {ratio(t['plugin'], t['eager'])} | {ratio(t['qobs_cuda'], t['triton'])}"
                         f" | {ratio(t['qobs_cuda'], t['eager'])} | {path} |")
        lines += ["", "ratios are time / time (> 1: the first is slower); * = one cold call only", ""]

        lines.append("| case | shape | side | vs eager | vs Triton |")
        lines.append("|---|---|---|---|---|")
        triton_vs_eager = {}
        for k in keys:
            name, scheme, shape = k.split("/")
            saved = {s: load_saved(tmp, s, k) for s in sides}
            same, n = differing(saved.get("triton"), saved.get("eager"))
            triton_vs_eager[k] = "identical" if same else (f"{n} elements differ" if same is not None else "n/a")
            lines.append(f"| {name} {scheme} | {shape} | (a) Triton | {triton_vs_eager[k]} | - |")
            for s in QOBS_SIDES:
                if s not in sides:
                    continue
                same_e, n_e = differing(saved.get(s), saved.get("eager"))
                same_t, n_t = differing(saved.get(s), saved.get("triton"))
                vs_t = "identical" if same_t else (f"{n_t} elements differ" if same_t is not None else "n/a")
                if same_e:
                    vs_e = "identical"
                elif same_e is None:
                    vs_e = "n/a"
                elif name == "imatrix_accumulate" and n_e > 0:
                    dims = [int(v) for v in shape.split("x")]
                    tokens = rows[(s, k)]["calls"] * math.prod(dims[:-1])
                    ok, rel, bound = sum_within_bound(saved[s], saved["eager"], tokens)
                    vs_e = (f"{n_e} sums differ, max relative {rel:.2e}: "
                            f"{'within' if ok else 'OUTSIDE'} the f32 summation bound {bound:.2e}")
                    if not ok:
                        failures.append(f"{COLUMN[s]} {k}: importance sums {vs_e}")
                else:
                    tr = ties.get(f"{s}|{k}")
                    if tr is not None:
                        vs_e = (f"{tr['disagreements']} of {tr['groups']} groups differ: {tr['ties']} proven ties, "
                                f"{tr['non_ties']} non-ties")
                        if "non_ties_with_cpu_terms" in tr:
                            vs_e += f" ({tr['non_ties_with_cpu_terms']} with the CPU's error terms)"
                        if tr["non_ties"] and tr.get("non_ties_with_cpu_terms", 1):
                            failures.append(f"{COLUMN[s]} {k}: {tr['non_ties']} non-ties against eager, e.g. "
                                            f"{tr['non_tie_examples']}")
                    else:
                        vs_e = f"{n_e} elements differ (no tie check for this observer)"
                        failures.append(f"{COLUMN[s]} {k}: differs from eager ({n_e} elements)")
                lines.append(f"| {name} {scheme} | {shape} | {COLUMN[s]} | {vs_e} | {vs_t} |")
        lines.append("")
        lines.append("worker wall times (s, process start to exit): " +
                     ", ".join(f"{s} {wall[s]:.1f}" for s in sides if s in wall))
        lines += [f"note: {n}" for n in notes]
        lines += [f"FAILED: {f}" for f in failures]
        text = "\n".join(lines)
        print(text)
        if a.out:
            os.makedirs(a.out, exist_ok=True)
            with open(os.path.join(a.out, "gpu_vs_reference.md"), "w") as f:
                f.write(text + "\n")
            with open(os.path.join(a.out, "gpu_vs_reference.json"), "w") as f:
                json.dump({"rows": [dict(side=s, **r) for (s, _), r in rows.items()], "ties": ties, "infos": infos,
                           "failures": failures}, f, indent=1)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
