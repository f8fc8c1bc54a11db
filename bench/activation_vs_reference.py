#!/usr/bin/env python3
"""Activation observers per calibration batch: qobs against the reference's torch code.

llm-compressor calls an activation observer (and the imatrix forward-pre hook) once per
calibration batch per Linear, so the per-batch time on a [tokens, hidden] tensor and the
fixed per-call overhead are what users feel. This driver runs two workers, one with the
reference's interpreter (llmcompressor) and one with an interpreter where qobs is
installed, on the same tensor (N(0, 1), fixed seed) with the same thread count
(torch.set_num_threads and QOBS_NUM_THREADS), interleaved --rounds times (A, B, A, B,
...) so that a busy machine slows both alike; each worker reports the median of its
calls and the driver the median over rounds.

    python3 bench/activation_vs_reference.py --ref-python /work/refenv/bin/python \\
        --qobs-python /work/venv-speed/bin/python --threads 2

Cases: memoryless_minmax / static_minmax / minmax (EMA) with an int8 tensor-strategy
input scale, and the imatrix hook (importance E[x^2] per input feature), each on f32
and bf16; plus the per-call time on a 1x16 tensor (the glue's overhead). Optional
columns: an older qobs build (--before-pythonpath) and the llm-compressor plugin
(qobs.llmcompressor's qobs_* observers in the reference's interpreter,
--plugin-pythonpath).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

OBSERVERS = ("memoryless_minmax", "static_minmax", "minmax")


def worker(a):
    import torch

    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    prefix = "qobs_" if a.side == "plugin" else ""
    if a.side in ("ref", "plugin"):
        from compressed_tensors.quantization import QuantizationArgs
        from llmcompressor.observers.base import Observer

        if a.side == "plugin":
            import qobs.llmcompressor  # noqa: F401  registers the qobs_* observers

        def make(name):
            args = QuantizationArgs(num_bits=8, type="int", strategy="tensor", symmetric=True, observer=prefix + name)
            return Observer.load_from_registry(prefix + name, base_name="input", args=args)
    else:
        from qobs import QuantizationArgs
        from qobs.observer import Observer

        def make(name):
            args = QuantizationArgs(num_bits=8, type="int", strategy="tensor", symmetric=True, observer=name)
            return Observer.load_from_registry(name, base_name="input", args=args)

    def imatrix_hook(hidden):
        # the observer's own forward-pre hook on a Linear, called the way torch calls it
        mod = torch.nn.Linear(hidden, 8, bias=False)
        args = QuantizationArgs(num_bits=4, type="int", strategy="group", group_size=128, symmetric=True,
                                observer=prefix + "imatrix_mse")
        obs = Observer.load_from_registry(prefix + "imatrix_mse", base_name="weight", args=args)
        obs.attach(mod)
        (hook,) = mod._forward_pre_hooks.values()
        return lambda x: hook(mod, (x,)), obs

    def timed(fn, x, reps):
        fn(x)  # warm-up (allocations, first-touch of the statistics)
        ts = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn(x)
            ts.append(time.perf_counter() - t0)
        return statistics.median(ts)

    out = {}
    for dt in ("float32", "bfloat16"):
        x = torch.randn(a.tokens, a.hidden).to(getattr(torch, dt))
        tiny = torch.randn(1, 16).to(getattr(torch, dt))
        for name in OBSERVERS:
            obs = make(name)
            out[f"{name}/{dt}"] = timed(obs, x, a.reps)
            out[f"{name}/{dt}/1x16"] = timed(make(name), tiny, 2000)
            if name == "static_minmax" and a.side != "plugin":  # the statistics themselves, to compare
                out[f"stats/{name}/{dt}"] = [float(v) for v in (obs.min_vals, obs.max_vals)]
        hook, obs = imatrix_hook(a.hidden)
        out[f"imatrix_accumulate/{dt}"] = timed(hook, x, a.reps)
        hook16, _ = imatrix_hook(16)
        out[f"imatrix_accumulate/{dt}/1x16"] = timed(hook16, tiny, 2000)
        if a.side != "plugin":
            fresh_hook, fresh = imatrix_hook(a.hidden)
            fresh_hook(x)
            s = fresh._imatrix_sum
            out[f"stats/imatrix/{dt}"] = [float(v) for v in s.float()[:64]]
    json.dump(out, sys.stdout)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ref-python", default="/work/refenv/bin/python")
    p.add_argument("--qobs-python", default=sys.executable)
    p.add_argument("--before-pythonpath", help="also time a qobs build installed in this folder (PYTHONPATH), "
                   "e.g. `pip install --target DIR` of an older commit, as a third column")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--no-threads-env", action="store_true",
                   help="leave QOBS_NUM_THREADS unset (qobs then asks for the core count, as most users run it); "
                        "--threads should then equal the core count")
    p.add_argument("--tokens", type=int, default=2048)
    p.add_argument("--hidden", type=int, default=4096)
    p.add_argument("--reps", type=int, default=15)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--plugin-pythonpath", help="also time qobs.llmcompressor's registered observers (qobs_*) in the "
                   "reference's interpreter, with the qobs package found in this folder (PYTHONPATH)")
    p.add_argument("--side", choices=("ref", "qobs", "plugin"), help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.side:
        return worker(a)
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
    env.pop("QOBS_NUM_THREADS", None)
    if not a.no_threads_env:
        env["QOBS_NUM_THREADS"] = str(a.threads)
    sides = [("ref", a.ref_python, env), ("qobs", a.qobs_python, env)]
    if a.before_pythonpath:
        sides.append(("before", a.qobs_python, dict(env, PYTHONPATH=a.before_pythonpath)))
    if a.plugin_pythonpath:
        sides.append(("plugin", a.ref_python, dict(env, PYTHONPATH=a.plugin_pythonpath)))
    runs = {name: [] for name, _, _ in sides}
    for _ in range(a.rounds):
        for side, py, side_env in sides:
            cmd = [py, os.path.abspath(__file__), "--side", {"before": "qobs"}.get(side, side), "--threads",
                   str(a.threads), "--tokens", str(a.tokens), "--hidden", str(a.hidden), "--reps", str(a.reps)]
            r = subprocess.run(cmd, env=side_env, capture_output=True, text=True)
            if r.returncode != 0:
                sys.exit(f"{side} worker failed:\n{r.stderr[-3000:]}")
            runs[side].append(json.loads(r.stdout.strip().splitlines()[-1]))
    print(f"# {a.tokens}x{a.hidden}, {a.threads} threads, {a.rounds} interleaved rounds x {a.reps} calls; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    extra = [k for k in ("before", "plugin") if k in runs]
    print(f"{'case':42s} {'reference':>12s} {'qobs':>12s} {'ref/qobs':>9s}" +
          "".join(f" {'qobs ' + k:>12s} {'ref/' + k:>10s}" for k in extra))
    for key in runs["ref"][0]:
        if key.startswith("stats/"):
            same = runs["ref"][0][key] == runs["qobs"][0][key]
            if not same and key.startswith("stats/imatrix"):
                # the reference sums in f32 in torch's order, qobs in f64 rounded once
                # (RULES A2): equal up to f32 rounding of the sum
                ref, q = runs["ref"][0][key], runs["qobs"][0][key]
                worst = max(abs(r_ - q_) / max(abs(r_), 1e-30) for r_, q_ in zip(ref, q))
                print(f"{key:42s} differ by at most {worst:.2e} relative (f32 sum order)")
            else:
                print(f"{key:42s} {'identical' if same else 'DIFFERENT'}")
            continue
        r = statistics.median(run[key] for run in runs["ref"])
        q = statistics.median(run[key] for run in runs["qobs"])
        unit, f = ("us", 1e6) if key.endswith("1x16") else ("ms", 1e3)
        line = f"{key:42s} {r * f:9.2f} {unit} {q * f:9.2f} {unit} {r / q:8.1f}x"
        for k in extra:
            b = statistics.median(run[key] for run in runs[k])
            line += f" {b * f:9.2f} {unit} {r / b:9.2f}x"
        print(line)


if __name__ == "__main__":
    main()
