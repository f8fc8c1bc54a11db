#!/usr/bin/env python3
"""Time qobs against the Python reference (llm-compressor) on the same tensor.

Run with the reference's interpreter (it needs torch and llmcompressor):

    /work/refenv/bin/python bench/compare_reference.py --threads 2 \
        --driver build-speed/bench/qobs_bench_driver

For each observer the same random weight (N(0, 0.02), fixed seed) is written once as raw
bytes; the qobs driver (bench/bench_driver.cc) and a reference worker (this script with
--worker, torch.set_num_threads(T)) each run observe + get_qparams in their own process,
so each side's peak RSS is its own. Both write scale / zero point / global scale bytes,
which are compared bit for bit. Times are wall clock, the best of --repeat qobs runs and
of --ref-repeat reference runs (default 1: a reference run takes up to minutes).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

SCHEMES = {  # must agree with bench/bench_schemes.h
    "int4_g128": dict(num_bits=4, type="int", strategy="group", group_size=128, symmetric=True),
    "int4_g128_asym": dict(num_bits=4, type="int", strategy="group", group_size=128, symmetric=False),
    "nvfp4": dict(num_bits=4, type="float", strategy="tensor_group", group_size=16, symmetric=True,
                  scale_dtype="float8_e4m3fn"),
    "int8_channel": dict(num_bits=8, type="int", strategy="channel", symmetric=True),
    "fp8_channel": dict(num_bits=8, type="float", strategy="channel", symmetric=True),
}
DEFAULT_CASES = [
    ("memoryless_minmax", "int4_g128"),
    ("memoryless_mse", "int4_g128"),
    ("nvfp4_expanded_mse", "nvfp4"),
    ("imatrix_mse", "int4_g128"),
]


def peak_rss_mb():
    """VmHWM of this process image (ru_maxrss would include the forking parent's)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return float(line.split()[1]) / 1024.0
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def reference_worker(a):
    """Child process: run the reference observer and report time and peak RSS."""
    import torch
    from compressed_tensors.quantization import QuantizationArgs
    from llmcompressor.observers.base import Observer

    torch.set_num_threads(a.threads)
    dtype = getattr(torch, a.dtype)
    raw = np.fromfile(a.input, dtype=np.uint8)
    w = torch.frombuffer(bytearray(raw.tobytes()), dtype=dtype).reshape(a.rows, a.cols)
    spec = dict(SCHEMES[a.scheme])
    if "scale_dtype" in spec:
        spec["scale_dtype"] = getattr(torch, spec["scale_dtype"])
    args = QuantizationArgs(observer=a.observer, **spec)
    times = []
    qp = None
    for _ in range(a.repeat):
        obs = Observer.load_from_registry(a.observer, base_name="weight", args=args)
        if a.importance:
            x = torch.from_numpy(np.fromfile(a.importance, dtype=np.float32))
            obs._imatrix_sum = x * x  # exact: x has 12 significant bits
            obs._imatrix_count = torch.tensor(1, dtype=torch.int64)
        t0 = time.perf_counter()
        obs(w)
        qp = obs.get_qparams()
        times.append(time.perf_counter() - t0)
    for key, suffix in (("scale", "scale"), ("zero_point", "zp"), ("global_scale", "gscale")):
        t = qp.get(key)
        if t is not None:
            t.contiguous().view(torch.uint8).numpy().tofile(a.out + "." + suffix)
    print(json.dumps({"seconds": min(times), "seconds_all": times, "peak_rss_mb": peak_rss_mb()}))


def same_bytes(prefix_a, prefix_b, suffix):
    pa, pb = prefix_a + "." + suffix, prefix_b + "." + suffix
    if not os.path.exists(pa) and not os.path.exists(pb):
        return True
    if not (os.path.exists(pa) and os.path.exists(pb)):
        return False
    with open(pa, "rb") as fa, open(pb, "rb") as fb:
        return fa.read() == fb.read()


def differing_bytes(prefix_a, prefix_b, suffix):
    """(bytes that differ, total) of one output, for the report when they are not equal."""
    pa, pb = prefix_a + "." + suffix, prefix_b + "." + suffix
    if not (os.path.exists(pa) and os.path.exists(pb)):
        return None
    a, b = np.fromfile(pa, dtype=np.uint8), np.fromfile(pb, dtype=np.uint8)
    if a.size != b.size:
        return None
    return int(np.count_nonzero(a != b)), int(a.size)


def run_json(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--driver", default="build-speed/bench/qobs_bench_driver")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeat", type=int, default=3, help="qobs runs (best is reported)")
    p.add_argument("--ref-repeat", type=int, default=1, help="reference runs (best is reported)")
    p.add_argument("--rows", type=int, default=4096)
    p.add_argument("--cols", type=int, default=4096)
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    p.add_argument("--cases", nargs="*", default=None,
                   help="observer:scheme pairs (default: %s)" % " ".join(o + ":" + s for o, s in DEFAULT_CASES))
    # worker mode
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--observer")
    p.add_argument("--scheme")
    p.add_argument("--input")
    p.add_argument("--importance")
    p.add_argument("--out")
    a = p.parse_args()
    if a.worker:
        return reference_worker(a)

    import torch

    cases = [tuple(c.split(":")) for c in a.cases] if a.cases else DEFAULT_CASES
    tmp = tempfile.mkdtemp(prefix="qobs_cmp_")
    torch.manual_seed(0)
    w = (torch.randn(a.rows, a.cols) * 0.02).to(getattr(torch, a.dtype))
    wpath = os.path.join(tmp, "w.bin")
    w.contiguous().view(torch.uint8).numpy().tofile(wpath)
    # importance input row with 12 significant bits so that x*x is exact in f32
    x = torch.rand(a.cols) * 2 + 0.1
    x = (x * 2048).round() / 2048
    ipath = os.path.join(tmp, "imp.bin")
    x.numpy().astype(np.float32).tofile(ipath)

    print(f"shape {a.rows}x{a.cols} {a.dtype}, threads {a.threads} both sides, "
          f"best of {a.repeat} (qobs) / {a.ref_repeat} (reference) runs")
    header = f"{'observer':<20} {'scheme':<10} {'qobs s':>9} {'ref s':>9} {'ratio':>8} {'qobs MB':>8} {'ref MB':>8}  same qparams"
    print(header)
    print("-" * len(header))
    for observer, scheme in cases:
        imp = ["--importance", ipath] if observer == "imatrix_mse" else []
        qout, rout = os.path.join(tmp, "q_" + observer), os.path.join(tmp, "r_" + observer)
        env = dict(os.environ, QOBS_NUM_THREADS=str(a.threads))
        q = json.loads(subprocess.run(
            [a.driver, "--observer", observer, "--scheme", scheme, "--shape", str(a.rows), str(a.cols),
             "--dtype", a.dtype, "--input", wpath, "--threads", str(a.threads), "--repeat", str(a.repeat),
             "--out", qout] + imp, check=True, capture_output=True, text=True, env=env).stdout.strip().splitlines()[-1])
        r = run_json([sys.executable, os.path.abspath(__file__), "--worker", "--observer", observer, "--scheme", scheme,
                      "--rows", str(a.rows), "--cols", str(a.cols), "--dtype", a.dtype, "--input", wpath,
                      "--threads", str(a.threads), "--repeat", str(a.ref_repeat), "--out", rout] + imp)
        same = all(same_bytes(qout, rout, s) for s in ("scale", "zp", "gscale"))
        verdict = "yes"
        if not same:
            parts = []
            for s in ("scale", "zp", "gscale"):
                d = differing_bytes(qout, rout, s)
                if d is None and not same_bytes(qout, rout, s):
                    parts.append(f"{s}: missing or resized")
                elif d and d[0]:
                    parts.append(f"{s}: {d[0]} of {d[1]} bytes differ")
            verdict = "NO (" + "; ".join(parts) + ")"
        ratio = r["seconds"] / q["seconds"] if q["seconds"] > 0 else float("inf")
        print(f"{observer:<20} {scheme:<10} {q['seconds']:>9.3f} {r['seconds']:>9.3f} {ratio:>7.1f}x "
              f"{q['peak_rss_mb']:>8.0f} {r['peak_rss_mb']:>8.0f}  {verdict}", flush=True)


if __name__ == "__main__":
    main()
