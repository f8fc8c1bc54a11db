#!/usr/bin/env bash
# MPI mode (docs/CLI.md "MPI mode"): a second, small build with -DQOBS_MPI=ON (only the
# CLI and the MPI tests), then its ctest label `mpi`: mpirun'd conversions compared byte
# for byte with the single process, a failing and a killed rank, statistics reduced over
# MPI. Needs openmpi-bin and libopenmpi-dev (tools/install_deps.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
# CI runs as root; OpenMPI refuses that unless told.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
echo "== MPI: configure, build (qobs_cli, qobs_mpi_tests), ctest -L mpi"
cmake -S . -B build-mpi -DCMAKE_BUILD_TYPE=Release -DQOBS_MPI=ON -DQOBS_WERROR="${QOBS_WERROR:-OFF}" \
  -DQOBS_BUILD_BENCHMARKS=OFF -DQOBS_BUILD_EXAMPLES=OFF -DQOBS_INSTALL=OFF >/dev/null
cmake --build build-mpi -j"$jobs" --target qobs_cli qobs_mpi_tests
# One test at a time: each already runs up to 7 ranks on the machine's cores.
ctest --test-dir build-mpi -L mpi --output-on-failure
# The Python helper (qobs.mpi.reduce_statistics over mpi4py), on three ranks, in the
# environment tools/test.sh installed the package into.
venv="${QOBS_TEST_VENV:-.venv-test}"
if [ -x "$venv/bin/python" ]; then
  echo "== MPI: mpi4py, mpirun -n 3 pytest python/tests/test_mpi.py"
  "$venv/bin/python" -m pip install -q mpi4py
  mpirun --oversubscribe -n 3 "$venv/bin/python" -m pytest -q -p no:cacheprovider python/tests/test_mpi.py
fi
