#!/usr/bin/env bash
# Fails when a C++ file of ours is not formatted as .clang-format says (rewriter/ has its own, in
# LLVM's style like the clang tools it sits beside). Run with --fix to format them in place.
# Migration inputs (examples/, test/rewriter/lit, test/rewriter/e2e) keep their authors' layouts and are left out.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
clang_format=$(command -v clang-format-14 || command -v clang-format || true)
if [ -z "$clang_format" ]; then
  echo "check-format: clang-format-14 is needed (scripts/install-deps.sh installs it)" >&2
  exit 1
fi
mapfile -t files < <(git ls-files --cached --others --exclude-standard -- 'common/*.cpp' 'common/*.h' 'runtime/*.cpp' 'runtime/*.h' \
  'launcher/*.cpp' 'launcher/*.h' 'rewriter/*.cpp' 'rewriter/*.h' 'bench/*.cpp' 'bench/*.h' \
  'test/runtime/*.cpp' 'test/support/*.h' 'test/launcher/*.cpp' 'test/common/*.cpp' \
  'test/rewriter/*_test.cpp' 'test/docs/*.cpp' \
  'test/fuzz/*.cpp')
if [ "${1:-}" = "--fix" ]; then
  "$clang_format" -i "${files[@]}"
  exit 0
fi
if ! "$clang_format" --dry-run -Werror "${files[@]}" 2> /tmp/check-format.$$; then
  grep -E "^[^ ].*error:" /tmp/check-format.$$ | cut -d: -f1 | sort | uniq -c |
    sed 's/^/check-format: lines to reformat in /' >&2
  rm -f /tmp/check-format.$$
  echo "check-format: run scripts/check-format.sh --fix" >&2
  exit 1
fi
rm -f /tmp/check-format.$$
echo "check-format: ${#files[@]} files formatted as .clang-format says"
