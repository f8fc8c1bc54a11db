#!/usr/bin/env bash
# Every tracked C++ / CUDA source is laid out as .clang-format says, by clang-format 14
# (Debian 12's, which tools/install_deps.sh installs): another major version lays some
# constructs out differently, so a missing clang-format-14 is a skip (exit 77, with the
# reason), never a pass by another version. `--fix` rewrites the files instead.
# Run from anywhere; exits 1 listing the files that differ.
set -euo pipefail
cd "$(dirname "$0")/.."
fmt=${QOBS_CLANG_FORMAT:-clang-format-14}
if ! command -v "$fmt" >/dev/null 2>&1; then
  echo "check_format: SKIPPED: $fmt not found (tools/install_deps.sh installs it)"
  exit 77
fi
if ! git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  echo "check_format: SKIPPED: not a git checkout, so the tracked sources are unknown"
  exit 77
fi
mapfile -t files < <(git ls-files '*.cc' '*.h' '*.cu' '*.cuh' '*.cpp' '*.hpp')
if [ "${1:-}" = "--fix" ]; then
  "$fmt" -i "${files[@]}"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  if ! "$fmt" --dry-run --Werror "$f" >/dev/null 2>&1; then bad+=("$f"); fi
done
if [ "${#bad[@]}" -gt 0 ]; then
  echo "check_format: ${#bad[@]} of ${#files[@]} files are not laid out as .clang-format says:"
  printf '  %s\n' "${bad[@]}"
  echo "fix with: bash tools/check_format.sh --fix"
  exit 1
fi
echo "check_format: ${#files[@]} files laid out as .clang-format says ($("$fmt" --version))"
