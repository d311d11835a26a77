#!/usr/bin/env bash
# Builds a libFuzzer target with clang-14 (fuzzer + ASan + UBSan) and runs it for a bounded time
# on a scratch copy of its seed corpus, so the checked-in corpus never changes under the test.
#   run_fuzzer.sh SOURCE_DIR WORK_DIR NAME SECONDS
set -euo pipefail
source_dir=$1 work_dir=$2 name=$3 seconds=$4
clang=$(command -v clang++-14 || command -v clang++ || true)
if [ -z "$clang" ]; then
  echo "run_fuzzer: clang++-14 is needed (scripts/install-deps.sh installs it)" >&2
  exit 1
fi
mkdir -p "$work_dir"
binary="$work_dir/${name}_fuzzer"
"$clang" -std=c++17 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I "$source_dir/common/include" "$source_dir/test/fuzz/${name}_fuzzer.cpp" \
  "$source_dir/common/src/${name}.cpp" -o "$binary"
corpus="$work_dir/${name}_corpus"
rm -rf "$corpus" && mkdir -p "$corpus"
cp "$source_dir/test/fuzz/corpus/$name/"* "$corpus/"
# A crash leaves its input in $work_dir as crash-<hash>: replay it with "$binary" FILE.
cd "$work_dir"
"$binary" -max_total_time="$seconds" -timeout=5 -rss_limit_mb=2048 -print_final_stats=1 "$corpus"
