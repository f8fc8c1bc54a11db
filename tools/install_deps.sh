#!/usr/bin/env bash
# Debian packages qobs builds with (compiler, CMake, GoogleTest, Google Benchmark,
# Highway, RE2, nlohmann-json, pybind11, Python headers and venv, OpenMPI for MPI mode,
# clang-format 14 for tools/check_format.sh).
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
sudo_cmd=""
[ "$(id -u)" = 0 ] || sudo_cmd="sudo"
$sudo_cmd apt-get update -qq
$sudo_cmd apt-get install -y -qq --no-install-recommends \
  build-essential cmake git libgtest-dev libgmock-dev libbenchmark-dev libhwy-dev \
  libre2-dev libyaml-cpp-dev nlohmann-json3-dev pkg-config pybind11-dev python3 python3-dev python3-venv \
  openmpi-bin libopenmpi-dev clang-format-14 >/dev/null
