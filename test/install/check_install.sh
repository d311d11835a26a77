#!/usr/bin/env bash
# Installs accel into a fresh prefix, builds examples/regression out of tree with nothing but
# find_package(accel), and runs it as one plain process and as 2 processes under the installed
# `accel launch`: both see all 101 test samples once and fit the same line.
set -euo pipefail
build_dir=$1
source_dir=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cmake --install "$build_dir" --prefix "$work/prefix" > /dev/null
test -x "$work/prefix/bin/accel"
test -f "$work/prefix/include/accel/accel.h"
test -f "$work/prefix/lib/cmake/accel/accelConfig.cmake"

cmake -S "$source_dir/examples/regression" -B "$work/example" -G Ninja \
  -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build "$work/example" > /dev/null

"$work/example/train" 3 | tee "$work/one.txt"
"$work/prefix/bin/accel" launch --num_processes 2 "$work/example/train" 3 | tee "$work/two.txt"

grep -q "processes 1 " "$work/one.txt"
grep -q "processes 2 " "$work/two.txt"
grep -q "test samples 101 " "$work/one.txt"
grep -q "test samples 101 " "$work/two.txt"
# Same global batch, same data: the fits agree closely.
weight() { sed -n 's/.* weight \([^ ]*\) .*/\1/p' "$1"; }
awk -v a="$(weight "$work/one.txt")" -v b="$(weight "$work/two.txt")" \
  'BEGIN { d = a - b; if (d < 0) d = -d; if (d > 0.05) { print "weights differ: " a " vs " b; exit 1 } }'
echo "install test passed"
