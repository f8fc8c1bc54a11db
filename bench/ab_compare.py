#!/usr/bin/env python3
"""Two builds' Google Benchmark suites timed alternately, medians and ratios.

    python bench/ab_compare.py --a OLD/build/bench/qobs_bench --b build/bench/qobs_bench \\
        --filter 'grid_search/.*/bf16|memoryless_minmax' --rounds 3

Runs A, then B, then A, ... (`--rounds` times each, so that drift of the machine's load
falls on both alike), each run with `--benchmark_repetitions` repetitions, and prints
per benchmark the median of all A times, of all B times, and B / A (below 1: B is
faster). Times are the benchmarks' own real_time. A noise line gives, per side, the
median relative spread (max / min - 1) across the runs, as a measure of how far a ratio
can move by chance on this machine.
"""
import argparse
import json
import statistics
import subprocess
import sys


def run(binary, flt, reps):
    out = subprocess.run([binary, f"--benchmark_filter={flt}", f"--benchmark_repetitions={reps}",
                          "--benchmark_format=json"], capture_output=True, text=True, check=True)
    times = {}
    for b in json.loads(out.stdout)["benchmarks"]:
        if b.get("run_type") != "iteration":
            continue
        times.setdefault(b["run_name"], []).append(b["real_time"] * {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}[b["time_unit"]])
    return times


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--a", required=True)
    p.add_argument("--b", required=True)
    p.add_argument("--filter", default=".")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--reps", type=int, default=3)
    a = p.parse_args()
    ta, tb = {}, {}
    spread_a, spread_b = [], []
    for r in range(a.rounds):
        for side, binary, acc, spread in (("A", a.a, ta, spread_a), ("B", a.b, tb, spread_b)):
            print(f"round {r + 1}/{a.rounds}: {side}", file=sys.stderr)
            for name, v in run(binary, a.filter, a.reps).items():
                acc.setdefault(name, []).append(statistics.median(v))
    for acc, spread in ((ta, spread_a), (tb, spread_b)):
        for v in acc.values():
            if len(v) > 1 and min(v) > 0:
                spread.append(max(v) / min(v) - 1)
    print(f"| benchmark | A median (ms) | B median (ms) | B / A |")
    print("|---|---:|---:|---:|")
    ratios = []
    for name in ta:
        if name not in tb:
            continue
        ma, mb = statistics.median(ta[name]), statistics.median(tb[name])
        ratios.append(mb / ma)
        print(f"| {name.split('/min_time')[0].split('/iterations')[0]} | {ma * 1e3:.3f} | {mb * 1e3:.3f} | {mb / ma:.3f} |")
    if ratios:
        print(f"\ngeometric mean of B / A over {len(ratios)} benchmarks: "
              f"{statistics.geometric_mean(ratios):.3f}")
    if spread_a and spread_b:
        print(f"noise: median spread of a benchmark's {a.rounds} round medians: "
              f"A {statistics.median(spread_a) * 100:.1f}%, B {statistics.median(spread_b) * 100:.1f}%")


if __name__ == "__main__":
    main()
