#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ (clang, ASan + UBSan, the whole library
# instrumented) and runs each for a bounded time from its seed corpus in fuzz/corpus/.
# Fails on the first crash, sanitizer report, leak, escaped exception or timeout; the
# input that caused it is left in $build/artifacts/<target>/. Needs clang and libFuzzer
# (Debian 12: clang libclang-rt-14-dev; llvm-14 for symbolized stacks).
#   QOBS_FUZZ_SECONDS  seconds per target (default 60)
#   QOBS_FUZZ_SEED     libFuzzer -seed (default 1: CI explores the same inputs on every run)
#   QOBS_FUZZ_BUILD    build folder (default build-fuzz)
#   QOBS_FUZZ_TARGETS  targets to run (default: safetensors checkpoint args)
#   CMAKE_CXX_COMPILER_LAUNCHER  e.g. ccache, passed to CMake when set
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
build="${QOBS_FUZZ_BUILD:-build-fuzz}"
seconds="${QOBS_FUZZ_SECONDS:-60}"
read -r -a targets <<<"${QOBS_FUZZ_TARGETS:-safetensors checkpoint args}"
cxx="${QOBS_FUZZ_CXX:-$(command -v clang++ || command -v clang++-14)}"

launcher=()
[ -n "${CMAKE_CXX_COMPILER_LAUNCHER:-}" ] && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER="$CMAKE_CXX_COMPILER_LAUNCHER")

start=$(date +%s)
echo "== fuzz: configure and build ${targets[*]} in $build with $cxx"
cmake -S . -B "$build" -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DQOBS_FUZZ=ON \
  -DQOBS_BUILD_TESTS=OFF -DQOBS_BUILD_BENCHMARKS=OFF -DQOBS_BUILD_CLI=OFF -DQOBS_BUILD_EXAMPLES=OFF \
  -DQOBS_WERROR="${QOBS_WERROR:-OFF}" "${launcher[@]}" >/dev/null
cmake --build "$build" -j"$jobs" --target $(printf 'qobs_%s_fuzz ' "${targets[@]}")
built=$(date +%s)

symbolizer=$(command -v llvm-symbolizer || ls /usr/lib/llvm-*/bin/llvm-symbolizer 2>/dev/null | tail -n1 || true)
[ -n "$symbolizer" ] && export ASAN_SYMBOLIZER_PATH="$symbolizer"
export ASAN_OPTIONS="abort_on_error=1:detect_leaks=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="abort_on_error=1:halt_on_error=1:print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"

for t in "${targets[@]}"; do
  # Seeds are copied, so the corpus the run grows stays out of the source tree.
  corpus="$build/corpus/$t"
  artifacts="$build/artifacts/$t/"
  mkdir -p "$corpus" "$artifacts"
  cp -r fuzz/corpus/"$t"/. "$corpus"/
  dict=()
  [ -f "fuzz/$t.dict" ] && dict=(-dict="fuzz/$t.dict")
  echo "== fuzz: $t for ${seconds} s"
  log="$build/$t.log"
  # -timeout: one input taking longer than that is a hang, reported as a crash.
  if ! "$build/fuzz/qobs_${t}_fuzz" -max_total_time="$seconds" -seed="${QOBS_FUZZ_SEED:-1}" -timeout=25 -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="$artifacts" "${dict[@]}" "$corpus" >"$log" 2>&1; then
    tail -n 80 "$log"
    echo "== fuzz: $t FAILED; reproducer in $artifacts (rerun: $build/fuzz/qobs_${t}_fuzz <file>)" >&2
    exit 1
  fi
  # The last status line (executions, cov, ft, corpus) and the final stats.
  grep -E "^#[0-9]+" "$log" | tail -n1
  grep -E "^stat::(number_of_executed_units|average_exec_per_sec|peak_rss_mb)" "$log"
done
echo "== fuzz: build $((built - start)) s, runs $(($(date +%s) - built)) s"
