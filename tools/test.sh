#!/usr/bin/env bash
# The whole test suite: C++ (GoogleTest through ctest) and Python (pytest on the
# installed package). Needs the build dependencies of README.md ("Set-up").
#   QOBS_TEST_VENV   virtual environment for the Python tests (default: .venv-test)
#   QOBS_TEST_TORCH  1 (default) installs torch from PyPI so the torch tests run; 0 skips them
#   QOBS_TEST_LLMCOMPRESSOR  1 installs llmcompressor (it brings its pinned torch) so the
#                    llm-compressor integration tests run too; 0 (default) skips them
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)

echo "== C++: configure, build, ctest"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DQOBS_WERROR="${QOBS_WERROR:-OFF}" >/dev/null
cmake --build build -j"$jobs"
ctest --test-dir build --output-on-failure -j"$jobs"

echo "== Python: build and install the package into ${QOBS_TEST_VENV:-.venv-test}, pytest"
venv="${QOBS_TEST_VENV:-.venv-test}"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade pip
"$venv/bin/python" -m pip install -q numpy pytest
if [ "${QOBS_TEST_LLMCOMPRESSOR:-0}" = 1 ]; then
  "$venv/bin/python" -m pip install -q llmcompressor
elif [ "${QOBS_TEST_TORCH:-1}" = 1 ]; then
  "$venv/bin/python" -m pip install -q torch
fi
"$venv/bin/python" -m pip install -q .
# pytest exits 5 when it collects nothing; that must fail here too.
"$venv/bin/python" -m pytest -q python/tests
