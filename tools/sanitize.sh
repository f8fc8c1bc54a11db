#!/usr/bin/env bash
# The C++ suite (ctest: qobs_tests, with the qobs CLI the CLI tests run) built with
# AddressSanitizer + UndefinedBehaviorSanitizer in its own build folder. Any report
# fails: UBSan does not recover, and both runtimes abort (SIGABRT), so a report inside
# the CLI, which the CLI tests run as a child process, cannot pass as an ordinary
# non-zero exit code. Needs the build dependencies of README.md ("Set-up").
#   QOBS_SANITIZE_BUILD   build folder (default: build-asan)
#   QOBS_SANITIZE         sanitizers (default: address,undefined)
#   CMAKE_CXX_COMPILER_LAUNCHER  e.g. ccache, passed to CMake when set
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
build="${QOBS_SANITIZE_BUILD:-build-asan}"

launcher=()
[ -n "${CMAKE_CXX_COMPILER_LAUNCHER:-}" ] && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER="$CMAKE_CXX_COMPILER_LAUNCHER")

start=$(date +%s)
echo "== sanitizers (${QOBS_SANITIZE:-address,undefined}): configure, build, ctest in $build"
# -O1 keeps the stacks of reports readable and the build short; the benchmarks and
# examples are not part of the suite. The two powf variant entries (tests/CMakeLists.txt)
# rerun the search tests for their numerics, which the plain build checks in full; here
# they leave out the five searches that take minutes under ASan. Every test still runs
# under the sanitizers with the default powf, and each variant still runs the LibmPowf
# and golden tests and the other searches.
powf_variant_filter="LibmPowf.*:GridSearchKernels.*:GoldenObservers.*"
powf_variant_filter+="-GridSearchKernels.ExactBatchKernelMatchesReferenceOn16BitData"
powf_variant_filter+=":GridSearchKernels.EveryFormatStrategyDtypeAndSize"
powf_variant_filter+=":GridSearchKernels.SplitNarrowingEqualsIntegerRneOnEveryNormalFloat"
powf_variant_filter+=":GridSearchKernels.ModesVariantsAndNorms"
powf_variant_filter+=":GridSearchKernels.BatchKernelMatchesReferenceOnManyGroups"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" \
  -DQOBS_SANITIZE="${QOBS_SANITIZE:-address,undefined}" -DQOBS_WERROR="${QOBS_WERROR:-OFF}" \
  -DQOBS_POWF_VARIANT_FILTER="$powf_variant_filter" \
  -DQOBS_BUILD_BENCHMARKS=OFF -DQOBS_BUILD_EXAMPLES=OFF "${launcher[@]}" >/dev/null
cmake --build "$build" -j"$jobs" --target qobs_tests qobs_cli
built=$(date +%s)

export ASAN_OPTIONS="abort_on_error=1:detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="abort_on_error=1:halt_on_error=1:print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
ctest --test-dir "$build" --output-on-failure -j"$jobs"
done_at=$(date +%s)
echo "== sanitizers: build $((built - start)) s, ctest $((done_at - built)) s"
