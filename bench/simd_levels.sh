#!/usr/bin/env bash
# The Google Benchmark cases of docs/PERFORMANCE.md ("AVX2 and AVX-512 side by side") at
# QOBS_SIMD=avx2 and avx512, interleaved REPS times, then a table of medians.
#   bench/simd_levels.sh [BENCH_BINARY] [REPS]   (default build/bench/qobs_bench, 3)
set -euo pipefail
bin="${1:-build/bench/qobs_bench}"
reps="${2:-3}"
out="$(mktemp -d)"
filter='^(stream_read|minmax_kernel/int4_g128|memoryless_minmax/(int4_g128|nvfp4)|memoryless_mse/int4_g128|nvfp4_expanded_mse/nvfp4|imatrix_mse/int4_g128|fake_quantize/(int4_g128|nvfp4)/[a-z0-9]+/fast|lsq_mse/int4_g128)/'
for rep in $(seq "$reps"); do
  for lvl in avx2 avx512; do
    QOBS_SIMD=$lvl QOBS_NUM_THREADS="${QOBS_NUM_THREADS:-2}" "$bin" --benchmark_filter="$filter" \
      --benchmark_format=json >"$out/$lvl-$rep.json" 2>/dev/null
  done
done
python3 - "$out" <<'PY'
import collections, glob, json, os, statistics, sys
times = collections.defaultdict(lambda: collections.defaultdict(list))
scale = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}
for path in glob.glob(os.path.join(sys.argv[1], "*.json")):
    level = os.path.basename(path).split("-")[0]
    for b in json.load(open(path))["benchmarks"]:
        name = b["name"].split("/min_time")[0].split("/iterations")[0].replace("/real_time", "")
        times[name][level].append(b["real_time"] * scale[b["time_unit"]])
print("| benchmark | AVX2 ms | AVX-512 ms | AVX2 / AVX-512 |\n|---|---|---|---|")
for name, t in times.items():
    a, b = statistics.median(t["avx2"]), statistics.median(t["avx512"])
    print(f"| {name} | {a:.2f} | {b:.2f} | {a / b:.2f}x |")
PY
rm -rf "$out"
