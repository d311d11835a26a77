#!/usr/bin/env bash
# Installs accel into a fresh prefix, builds examples/regression out of tree with nothing but
# find_package(accel), and runs it as one plain process and as 2 processes under the installed
# `accel launch`: both see all 101 test samples once and fit about the same line, and the 2
# processes end with identical weights, which holds only when gradients are averaged across them
# (each trains on its own shard).
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

grep -q "processes 1 .* ranks agree yes$" "$work/one.txt"
grep -q "processes 2 .* ranks agree yes$" "$work/two.txt"
grep -q "test samples 101 " "$work/one.txt"
grep -q "test samples 101 " "$work/two.txt"
# Same global batch, same data: the fits agree closely.
field() { sed -n "s/.* $2 \([-0-9.]*\).*/\1/p" "$1"; }
for name in weight bias; do
  a=$(field "$work/one.txt" $name) b=$(field "$work/two.txt" $name)
  awk -v a="$a" -v b="$b" -v n="$name" 'BEGIN {
    if (a == "" || b == "") { print "no " n " in the output"; exit 1 }
    d = a - b; if (d < 0) d = -d
    if (d > 0.05) { print n " differs: one process " a ", two processes " b; exit 1 } }'
done
echo "install test passed"
