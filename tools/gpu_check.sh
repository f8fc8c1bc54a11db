#!/usr/bin/env bash
# The one prepared device check: run on the GPU machine from the repository root, with
# .gpu-carry/ (tools/gpu_bundle.sh) carried along, in a single call:
#
#   bash tools/gpu_check.sh            # device call: carry [".gpu-carry"], timeout_s ~540
#
# Stages, each time-boxed (a failing or hanging stage does not stop the others; the
# whole run stays inside QOBS_GPU_CHECK_BUDGET_S, default 470 s):
#   nvidia-smi        card, driver, clocks, memory
#   install           the carried wheels into a --target folder on PYTHONPATH (the image's
#                     python3 is itself a venv, so a --system-site-packages venv of it
#                     would not see its torch), no index, no dependency resolution; then
#                     the imports and the version / requirement report
#   cpp-tests         every carried GoogleTest binary with QOBS_GPU_TEST_FILTER
#                     (default *Cuda*:*CUDA*:*Device*-*Emulation*: the device tests, not their
#                     host-emulation twins, which CI runs), and the CLI's --version
#   py-cuda           python/tests/test_cuda.py (but its oneshot cases) on the installed
#                     package: qobs.cuda and the llm-compressor plugin on CUDA weights and
#                     activation batches against the host observers (skipped when the
#                     interpreter has no pytest)
#   memcheck, racecheck  compute-sanitizer on QOBS_GPU_SANITIZE_FILTER (default: the test filter)
#   bench             bench/gpu_vs_reference.py (reference Triton / eager / qobs plugin / qobs CUDA)
#   cli-device        bench/cli_device.py: `qobs quantize --device cuda` against --device cpu on a
#                     generated Llama-shaped bf16 checkpoint (QOBS_GPU_CLI_LAYERS layers of
#                     hidden 2048, intermediate 8192, vocab 32000; default 28: 2.0B parameters,
#                     4 GB), NVFP4A16 nvfp4_expanded_mse: the folders compared byte for byte,
#                     each run's GB/s against a plain read of the same files, s per 8B parameters
#   oneshot-*         tools/gpu_oneshot.py: llm-compressor oneshot on a random Llama with the
#                     reference's and qobs' W4A16 / NVFP4A16 weight observers, then the table
# Everything printed goes to $OUT/gpu_check.log too (OUT: the device tool's folder; else
# /tmp/qobs-gpu-check), with the tables in $OUT (7 files at most, the tool returns 8).
# Exit status: 0 when every stage passed or was skipped, 1 otherwise (the summary lists them).
# The stages run in the order above, most wanted first: when the budget runs out, the later
# ones print NOT RUN (budget). QOBS_GPU_STAGES="bench oneshot" (name prefixes) runs only
# those after nvidia-smi and install, for a second call that covers what the first left.
#
# QOBS_GPU_CHECK_DRYRUN=1 runs the same stages where no GPU is needed, on this machine:
# nvidia-smi and the sanitizers are skipped when absent, the bench runs --device cpu --small,
# cli-device a tiny checkpoint (skipped once --device cuda is refused), the oneshot a tiny
# model on the CPU. QOBS_GPU_PYTHON picks the interpreter (default
# python3), e.g. a Python 3.12 venv with torch and transformers that stands in for the image.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
export QOBS_ROOT=$PWD
export QOBS_CARRY=$QOBS_ROOT/.gpu-carry
export QOBS_OUT=${OUT:-/tmp/qobs-gpu-check}
export QOBS_DRY=${QOBS_GPU_CHECK_DRYRUN:-0}
export QOBS_PY=${QOBS_GPU_PYTHON:-python3}
export QOBS_SITE=/tmp/qobs-gpu-site
export QOBS_TEST_FILTER=${QOBS_GPU_TEST_FILTER:-*Cuda*:*CUDA*:*Device*-*Emulation*}
export QOBS_SANITIZE_FILTER=${QOBS_GPU_SANITIZE_FILTER:-$QOBS_TEST_FILTER}
export QOBS_ONESHOT_DIR=/tmp/qobs-gpu-oneshot
budget=${QOBS_GPU_CHECK_BUDGET_S:-470}
mkdir -p "$QOBS_OUT"
exec > >(tee -a "$QOBS_OUT/gpu_check.log") 2>&1
echo "gpu_check: $(date -u +%FT%TZ), root $QOBS_ROOT, dry run $QOBS_DRY, budget ${budget}s, python $QOBS_PY"

if [ ! -f "$QOBS_CARRY/MANIFEST" ]; then
  echo "gpu_check: $QOBS_CARRY/MANIFEST missing: run tools/gpu_bundle.sh here and carry .gpu-carry"
  exit 1
fi
cat "$QOBS_CARRY/MANIFEST"
export LD_LIBRARY_PATH=$QOBS_CARRY/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PYTHONPATH=$QOBS_SITE:$QOBS_CARRY/python${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1
# The tests read their golden files from the folder they were built in; give that path
# to this checkout when it does not exist here (the device's copy lives elsewhere).
src_dir=$(sed -n 's/^source_dir: //p' "$QOBS_CARRY/MANIFEST")
if [ -n "$src_dir" ] && [ ! -e "$src_dir" ]; then
  mkdir -p "$(dirname "$src_dir")" && ln -s "$QOBS_ROOT" "$src_dir" && echo "linked $src_dir -> $QOBS_ROOT"
fi

sanitizer() {
  command -v compute-sanitizer 2>/dev/null ||
    find /usr/local/cuda/bin /usr/local/cuda*/compute-sanitizer /opt/nvidia -maxdepth 2 -type f \
      -name compute-sanitizer 2>/dev/null | head -1
}
test_binaries() {
  find "$QOBS_CARRY/bin" -maxdepth 1 -type f -name '*test*' | sort
}
matching_tests() {  # BINARY FILTER: how many tests the filter selects
  "$1" --gtest_filter="$2" --gtest_list_tests | grep -c '^  '
}
run_on_tests() {  # FILTER [WRAPPER...]: every carried test binary with tests the filter selects
  local filter=$1 rc=0 ran=0 bin
  shift
  for bin in $(test_binaries); do
    if [ "$(matching_tests "$bin" "$filter")" = 0 ]; then
      echo "-- $(basename "$bin"): no test matches $filter"
      continue
    fi
    ran=1
    echo "-- ${*:+$* }$(basename "$bin") --gtest_filter=$filter"
    "$@" "$bin" --gtest_filter="$filter" --gtest_color=no || rc=1
  done
  [ $ran = 1 ] || { echo "no carried test matches: skipped"; return 77; }
  return $rc
}
export -f sanitizer test_binaries matching_tests run_on_tests

stage_nvidia_smi() {
  if ! command -v nvidia-smi >/dev/null; then
    [ "$QOBS_DRY" = 1 ] && { echo "no nvidia-smi (dry run): skipped"; exit 77; }
    echo "nvidia-smi not found"; exit 1
  fi
  { nvidia-smi
    nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,pstate,clocks.sm,clocks.max.sm,clocks.mem,clocks.max.mem,power.draw,power.limit,temperature.gpu --format=csv
  } | tee "$QOBS_OUT/nvidia-smi.txt"
}

stage_install() {
  rm -rf "$QOBS_SITE"
  "$QOBS_PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$QOBS_SITE" \
    "$QOBS_CARRY"/wheels/*.whl || exit 1
  "$QOBS_PY" - <<'EOF'
import importlib, importlib.metadata as md, sys
from packaging.requirements import Requirement
print("python", sys.version.split()[0], sys.executable)
for mod in ("torch", "transformers", "triton", "llmcompressor", "compressed_tensors", "datasets", "pydantic",
            "qobs", "qobs.llmcompressor"):
    m = importlib.import_module(mod)
    print(f"  {mod:20s} {getattr(m, '__version__', '')} {getattr(m, '__file__', '')}")
import torch, qobs
print("cuda", torch.cuda.is_available(), torch.version.cuda,
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")
f = getattr(qobs, "cuda_available", None)
print("qobs.cuda_available:", f() if f else "absent")
# requirements of the carried packages that this environment does not meet (information:
# nothing is resolved offline; what the runs import is what counts)
for dist in ("llmcompressor", "compressed-tensors", "datasets"):
    for r in md.requires(dist) or []:
        req = Requirement(r)
        if req.marker and not req.marker.evaluate({"extra": ""}):
            continue
        try:
            have = md.version(req.name)
        except md.PackageNotFoundError:
            print(f"  unmet: {dist} needs {req} -- not installed")
            continue
        if req.specifier and not req.specifier.contains(have, prereleases=True):
            print(f"  unmet: {dist} needs {req} -- have {have}")
EOF
}

stage_cpp_tests() {
  "$QOBS_CARRY/bin/qobs" --version || exit 1
  run_on_tests "$QOBS_TEST_FILTER"
}

stage_py_cuda() {
  "$QOBS_PY" -c 'import pytest' 2>/dev/null || { echo "no pytest for $QOBS_PY: skipped"; exit 77; }
  # the carried package (PYTHONPATH), not the checkout's python/qobs, which has no extension
  # here; oneshot has stages of its own below
  "$QOBS_PY" -m pytest -q -p no:cacheprovider -rs -k "not oneshot" python/tests/test_cuda.py
}

run_sanitizer() {  # TOOL
  local cs
  cs=$(sanitizer)
  if [ -z "$cs" ]; then
    [ "$QOBS_DRY" = 1 ] && { echo "no compute-sanitizer (dry run): skipped"; exit 77; }
    echo "compute-sanitizer not found"; exit 1
  fi
  run_on_tests "$QOBS_SANITIZE_FILTER" "$cs" --tool "$1" --error-exitcode 9 --print-limit 20
}
stage_memcheck() { run_sanitizer memcheck; }
stage_racecheck() { run_sanitizer racecheck; }

stage_cli_device() {
  local work=/tmp/qobs-cli-device rc
  local args=(--qobs "$QOBS_CARRY/bin/qobs" --workdir "$work")
  if [ "$QOBS_DRY" = 1 ]; then
    args+=(--layers 2 --hidden 256 --intermediate 512 --vocab 1024 --allow-no-device)
  else
    args+=(--layers "${QOBS_GPU_CLI_LAYERS:-28}")
  fi
  rm -rf "$work"
  "$QOBS_PY" bench/cli_device.py "${args[@]}"
  rc=$?
  rm -rf "$work"
  exit $rc
}

stage_bench() {
  # the bench's own deadline ends its workers in time to print the tables
  local args=(--out "$QOBS_OUT" --budget-s "${QOBS_GPU_BENCH_BUDGET_S:-4}" --deadline-s "${QOBS_STAGE_LIMIT:-200}")
  [ "$QOBS_DRY" = 1 ] && args+=(--device cpu --small)
  "$QOBS_PY" bench/gpu_vs_reference.py "${args[@]}"
}

stage_oneshot() {  # OBSERVERS SCHEME
  local size=${QOBS_GPU_ONESHOT_SIZE:-small}
  [ "$QOBS_DRY" = 1 ] && size=tiny
  "$QOBS_PY" tools/gpu_oneshot.py --observers "$1" --scheme "$2" --size "$size" --dir "$QOBS_ONESHOT_DIR"
}
stage_oneshot_table() {
  "$QOBS_PY" tools/gpu_oneshot.py --compare --dir "$QOBS_ONESHOT_DIR" | tee "$QOBS_OUT/oneshot.md"
  cp "$QOBS_ONESHOT_DIR/runs.jsonl" "$QOBS_OUT/oneshot_runs.jsonl" 2>/dev/null || true
}
export -f stage_nvidia_smi stage_install stage_cpp_tests stage_py_cuda run_sanitizer stage_memcheck stage_racecheck \
  stage_cli_device stage_bench stage_oneshot stage_oneshot_table

start=$SECONDS
summary=()
failed=0
stage() {  # NAME LIMIT_S FUNCTION [ARGS...]: runs FUNCTION in its own bash under timeout
  local name=$1 limit=$2
  shift 2
  if [ -n "${QOBS_GPU_STAGES:-}" ] && [ "$name" != nvidia-smi ] && [ "$name" != install ]; then
    local p chosen=0
    for p in $QOBS_GPU_STAGES; do
      case $name in "$p"*) chosen=1 ;; esac
    done
    if [ "$chosen" = 0 ]; then
      summary+=("$(printf '%-22s %-22s %5s' "$name" "not selected" "-")")
      return
    fi
  fi
  local left=$((budget - (SECONDS - start) - 5))
  [ "$limit" -gt "$left" ] && limit=$left
  if [ "$limit" -lt 15 ]; then
    summary+=("$(printf '%-22s %-22s %5s' "$name" "NOT RUN (budget)" "-")")
    failed=$((failed + 1))
    return
  fi
  echo
  echo "===== $name (limit ${limit}s, $((SECONDS - start))s elapsed) ====="
  local t0=$SECONDS rc status
  QOBS_STAGE_LIMIT=$((limit - 10)) timeout --kill-after=10 "$limit" bash -c '"$@"' _ "$@"
  rc=$?
  case $rc in
    0) status=ok ;;
    77) status=skipped ;;
    124 | 137) status="TIMEOUT after ${limit}s" ;;
    *) status="FAILED (exit $rc)" ;;
  esac
  case $status in ok | skipped) ;; *) failed=$((failed + 1)) ;; esac
  summary+=("$(printf '%-22s %-22s %4ds' "$name" "$status" $((SECONDS - t0)))")
}

stage nvidia-smi 20 stage_nvidia_smi
stage install 90 stage_install
stage cpp-tests 60 stage_cpp_tests
stage py-cuda 60 stage_py_cuda
stage memcheck 60 stage_memcheck
stage racecheck 60 stage_racecheck
stage bench 210 stage_bench
stage cli-device 180 stage_cli_device
rm -rf "$QOBS_ONESHOT_DIR"
for scheme in W4A16 NVFP4A16; do
  for obs in ref qobs; do
    stage "oneshot-$obs-$scheme" 75 stage_oneshot "$obs" "$scheme"
  done
done
stage oneshot-table 20 stage_oneshot_table

{
  echo
  echo "===== summary ($((SECONDS - start))s of ${budget}s; dry run $QOBS_DRY) ====="
  printf '%s\n' "${summary[@]}"
  echo "failed stages: $failed"
} | tee "$QOBS_OUT/summary.txt"
[ "$failed" = 0 ]
