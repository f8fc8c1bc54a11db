#!/usr/bin/env python3
"""Two builds' qobs_bench_driver compared by instructions executed (callgrind).

    python bench/ab_instructions.py --a OLD/build/bench/qobs_bench_driver \\
        --b build/bench/qobs_bench_driver

An instruction count does not depend on the machine's load, so this answers "did a
change make a kernel do more work" on a shared or noisy machine where wall-clock
medians (bench/ab_compare.py) move by tens of percent. It is no substitute for timing
(cache misses and port pressure do not show), and both builds must be compiled the same
way. Each case runs the driver once, single-threaded, under
`valgrind --tool=callgrind` on the same synthetic bf16 / f32 weight (fixed seed), checks
that the two builds wrote the same qparam bytes, and prints both counts and B / A.
"""
import argparse
import os
import random
import re
import struct
import subprocess
import sys
import tempfile

CASES = [
    ("memoryless_minmax", "int4_g128", "bfloat16"),
    ("memoryless_minmax", "nvfp4", "bfloat16"),
    ("memoryless_mse", "int4_g128", "bfloat16"),
    ("memoryless_mse", "int4_g128", "float32"),
    ("memoryless_mse", "int8_channel", "bfloat16"),
    ("nvfp4_expanded_mse", "nvfp4", "bfloat16"),
    ("nvfp4_expanded_mse", "nvfp4", "float32"),
    ("imatrix_mse", "int4_g128", "bfloat16"),
    ("lsq_mse", "int4_g128", "bfloat16"),
    ("lsq_mse", "nvfp4", "bfloat16"),
]


def write_weight(path, rows, cols, dtype, seed):
    rng = random.Random(seed)
    with open(path, "wb") as f:
        for _ in range(rows * cols):
            v = rng.gauss(0.0, 0.02) * (15.0 if rng.random() < 0.01 else 1.0)
            b = struct.pack("<f", v)
            f.write(b if dtype == "float32" else b[2:])  # bf16: the high half (truncation is fine for test data)


def run(driver, observer, scheme, dtype, shape, weight, importance, out):
    cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", driver, "--observer", observer,
           "--scheme", scheme, "--shape", str(shape[0]), str(shape[1]), "--dtype", dtype, "--input", weight,
           "--threads", "1", "--repeat", "1", "--out", out]
    if observer == "imatrix_mse":
        cmd += ["--importance", importance]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{r.stderr[-2000:]}")
    m = re.search(r"Collected : (\d+)", r.stderr)
    return int(m.group(1))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--a", required=True)
    p.add_argument("--b", required=True)
    p.add_argument("--rows", type=int, default=512)
    p.add_argument("--cols", type=int, default=1024)
    a = p.parse_args()
    work = tempfile.mkdtemp(prefix="qobs-ab-instr-")
    weights = {}
    for dt in ("float32", "bfloat16"):
        weights[dt] = os.path.join(work, f"w.{dt}.bin")
        write_weight(weights[dt], a.rows, a.cols, dt, 1)
    importance = os.path.join(work, "imp.bin")
    with open(importance, "wb") as f:
        rng = random.Random(2)
        for _ in range(a.cols):
            f.write(struct.pack("<f", rng.uniform(0.1, 50.0)))
    print("| observer | scheme | dtype | A instructions | B instructions | B / A | same qparams |")
    print("|---|---|---|---:|---:|---:|---|")
    for observer, scheme, dtype in CASES:
        outs = []
        counts = []
        for side, driver in (("a", a.a), ("b", a.b)):
            out = os.path.join(work, f"{side}-{observer}-{scheme}-{dtype}")
            counts.append(run(driver, observer, scheme, dtype, (a.rows, a.cols), weights[dtype], importance, out))
            outs.append(out)
        same = all(
            open(outs[0] + ext, "rb").read() == open(outs[1] + ext, "rb").read()
            for ext in (".scale", ".zp", ".gscale") if os.path.exists(outs[0] + ext))
        print(f"| {observer} | {scheme} | {dtype} | {counts[0]:,} | {counts[1]:,} | {counts[1] / counts[0]:.4f} | "
              f"{'yes' if same else 'NO'} |", flush=True)


if __name__ == "__main__":
    sys.exit(main())
