#!/usr/bin/env bash
# Builds, on this machine, everything the GPU machine needs for tools/gpu_check.sh into
# the ignored folder .gpu-carry/ of the repository (name it in the device call's `carry`):
#
#   bin/       the CLI (qobs) and every GoogleTest binary of the build (qobs_tests, and
#              any other executable under the build's tests/), stripped; cli/qobs links
#              to the CLI where the CLI tests look for it
#   python/    the qobs package with its _qobs extension for Python 3.12 (the GPU image's
#              python3 is 3.12 with torch 2.11)
#   lib/       the shared libraries those load that the GPU image lacks (Highway, RE2,
#              yaml-cpp, ... : everything ldd resolves outside glibc / libstdc++ / libgcc);
#              the binaries carry RUNPATH $ORIGIN/../lib (and $ORIGIN/../../lib for the
#              extension), gpu_check.sh sets LD_LIBRARY_PATH as well
#   wheels/    llm-compressor, compressed-tensors and the pure-Python / cp312 packages they
#              import that the image does not have (no torch, no transformers: the image's)
#   MANIFEST   commit, build flags, source folder baked into the tests, sizes, ldd output
#
# The image has no package registry and no Highway / RE2 / yaml-cpp, so the binaries are
# built here; the CUDA backend (QOBS_CUDA=ON) is compiled here by nvcc for sm_90 (the
# H200), which needs no GPU.
#
# Environment:
#   QOBS_GPU_PYTHON      Python 3.12 for the extension (default: pyenv's 3.12.1)
#   QOBS_GPU_BUILD_DIR   build folder (default: build-gpu, ignored by /build*/)
#   QOBS_GPU_CUDA        ON (default) / OFF: the QOBS_CUDA option of the build
#   QOBS_GPU_CMAKE_ARGS  extra arguments for the CMake configure step
#   QOBS_GPU_NO_WHEELS=1 skip the wheel download (reuse what wheels/ holds)
#   QOBS_GPU_JOBS        build parallelism (default 2)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
carry=$root/.gpu-carry
build=${QOBS_GPU_BUILD_DIR:-build-gpu}
py=${QOBS_GPU_PYTHON:-$HOME/.pyenv/versions/3.12.1/bin/python}
jobs=${QOBS_GPU_JOBS:-2}
limit_mib=60

# The wheels that the GPU image lacks (its package list: .library/device/KINDS.md), pinned
# to the versions the reference environment resolved: llm-compressor's and
# compressed-tensors' own imports plus datasets (imported by llm-compressor's entry points).
wheels=(llmcompressor==0.14.0.1 compressed-tensors==0.19.0 loguru==0.7.3 pydantic==2.14.4
        pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 datasets==5.2.0
        dill==0.4.1 multiprocess==0.70.19)

"$py" -c 'import sys; assert sys.version_info[:2] == (3, 12), sys.version' ||
  { echo "gpu_bundle: $py is not Python 3.12 (set QOBS_GPU_PYTHON)" >&2; exit 1; }

echo "== configure and build ($build)"
cuda_args=(-DQOBS_CUDA=OFF)
if [ "${QOBS_GPU_CUDA:-ON}" = ON ]; then
  cuda_args=(-DQOBS_CUDA=ON -DQOBS_CUDA_ARCHITECTURES=90)
  if [ -x /usr/local/cuda/bin/nvcc ]; then
    cuda_args+=(-DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc)
  fi
fi
# A literal $ORIGIN: the loader resolves it to the binary's folder (bin/ and python/qobs/).
# shellcheck disable=SC2016
rpath='$ORIGIN/../lib;$ORIGIN/../../lib'
mkdir -p "$build"
read -r -a extra_args <<<"${QOBS_GPU_CMAKE_ARGS:-}"
CCACHE_BASEDIR=${CCACHE_BASEDIR:-/work} cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DQOBS_BUILD_PYTHON=ON -DPython_EXECUTABLE="$py" \
  -DQOBS_BUILD_TESTS=ON -DQOBS_BUILD_CLI=ON -DQOBS_BUILD_BENCHMARKS=OFF -DQOBS_BUILD_EXAMPLES=OFF \
  -DQOBS_INSTALL=OFF "-DCMAKE_BUILD_RPATH=$rpath" "${cuda_args[@]}" "${extra_args[@]}" \
  >"$build/configure.log" 2>&1 || { tail -30 "$build/configure.log" >&2; exit 1; }
CCACHE_BASEDIR=${CCACHE_BASEDIR:-/work} cmake --build "$build" -j"$jobs"

echo "== collect into .gpu-carry/"
keep_wheels=
if [ "${QOBS_GPU_NO_WHEELS:-0}" = 1 ] && [ -d "$carry/wheels" ]; then
  keep_wheels=$(mktemp -d)
  mv "$carry/wheels" "$keep_wheels/"
fi
rm -rf "$carry"
mkdir -p "$carry/bin" "$carry/lib" "$carry/python"
[ -n "$keep_wheels" ] && mv "$keep_wheels/wheels" "$carry/" && rmdir "$keep_wheels"

cp "$build/cli/qobs" "$carry/bin/"
# the CLI tests look for the CLI beside their own folder, as in the build tree
mkdir -p "$carry/cli"
ln -s ../bin/qobs "$carry/cli/qobs"
# every test executable of the build (qobs_tests, and CUDA test binaries when the build
# has them)
find "$build/tests" -maxdepth 2 -type f -perm -u+x -name '*test*' ! -name '*.so' ! -name '*.cmake' \
  -exec cp {} "$carry/bin/" \;
cp -r python/qobs "$carry/python/"
find "$carry/python" -name '__pycache__' -prune -exec rm -rf {} +
# only the 3.12 extension travels (the source tree may hold others)
find "$carry/python/qobs" -name '_qobs*.so' ! -name '_qobs.cpython-312-*' -delete
ls "$carry/python/qobs"/_qobs.cpython-312-*.so >/dev/null
strip --strip-unneeded "$carry"/bin/* "$carry/python/qobs"/_qobs.cpython-312-*.so

# Shared libraries outside the base system: what ldd resolves, minus the C runtime and
# the C++ runtime (the image's libstdc++ is newer; carrying ours would shadow it for
# torch in the same process).
base='^(linux-vdso|ld-linux|libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s|libcuda|libcudart)\.'
for f in "$carry"/bin/* "$carry/python/qobs"/_qobs.cpython-312-*.so; do
  ldd "$f" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r name path; do
  if ! [[ $name =~ $base ]]; then
    cp -L "$path" "$carry/lib/$name"
  fi
done

if [ ! -d "$carry/wheels" ]; then
  echo "== wheels (py3.12, manylinux x86_64, no dependencies resolved: the image has torch)"
  mkdir -p "$carry/wheels"
  "$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$carry/wheels" "${wheels[@]}"
fi

echo "== manifest"
{
  echo "commit: $(git rev-parse HEAD)$(git diff --quiet HEAD -- src include python cli tests || echo ' (dirty)')"
  echo "built: $(date -u +%FT%TZ) on $(uname -m), $(ldd --version | head -1)"
  echo "python: $("$py" -c 'import sys; print(sys.version.split()[0])')"
  echo "cuda: ${QOBS_GPU_CUDA:-ON} $( [ -x /usr/local/cuda/bin/nvcc ] && /usr/local/cuda/bin/nvcc --version | tail -1)"
  echo "cmake_args: ${QOBS_GPU_CMAKE_ARGS:-}"
  # The tests read their golden files from this absolute path (QOBS_GOLDEN_DIR);
  # gpu_check.sh links it to the repository there when it does not exist.
  echo "source_dir: $root"
  echo "max_glibc: $(for f in "$carry"/bin/* "$carry"/lib/*; do objdump -T "$f"; done 2>/dev/null |
    grep -o 'GLIBC_[0-9.]*' | sort -Vu | tail -1)"
  echo "files:"
  (cd "$carry" && find . -type f ! -name MANIFEST -printf '%s %p\n' | sort -k2 |
    awk '{printf "  %8.1f KiB  %s\n", $1 / 1024, $2}')
  echo "ldd:"
  for f in "$carry"/bin/* "$carry/python/qobs"/_qobs.cpython-312-*.so; do
    echo "  ${f#"$carry"/}: $(LD_LIBRARY_PATH="$carry/lib" ldd "$f" | awk '{print $1}' | tr '\n' ' ')"
  done
} >"$carry/MANIFEST"
size_kib=$(du -sk "$carry" | cut -f1)
echo "total: $((size_kib / 1024)) MiB" | tee -a "$carry/MANIFEST"
cat "$carry/MANIFEST"
if [ "$size_kib" -gt $((limit_mib * 1024)) ]; then
  echo "gpu_bundle: .gpu-carry is ${size_kib} KiB, over ${limit_mib} MiB (the device call carries 64 MiB with the tree)" >&2
  exit 1
fi
