#!/usr/bin/env bash
# Installs accel into a fresh prefix, builds examples/regression out of tree with nothing but
# find_package(accel), and runs it as one plain process and as 2 processes under the installed
# `accel launch`: both see all 101 test samples once and fit about the same line, and the 2
# processes end with identical weights, which holds only when gradients are averaged across them
# (each trains on its own shard). The example's logger, progress bar and tracker are checked too:
# an installed libaccel's users get fmt (header-only), spdlog and the trackers with it.
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

"$work/example/train" 3 16 "$work/runs1" 2> "$work/one.err" | tee "$work/one.txt"
"$work/prefix/bin/accel" launch --num_processes 2 "$work/example/train" 3 16 "$work/runs2" \
  2> "$work/two.err" | tee "$work/two.txt"
cat "$work/two.err"

# The logger wrote each line once (main process only), the progress bar (stderr is a file here,
# not a terminal) wrote plain lines, and the tracker recorded every epoch and the test error.
for err in "$work/one.err" "$work/two.err"; do
  [ "$(grep -c "\[rank 0\] \[info\] regression: epoch 3: train loss" "$err")" -eq 1 ]
  if grep -q "\[rank 1\]" "$err"; then echo "rank 1 logged a main-process line: $err"; exit 1; fi
  grep -Eq "^epoch 3: ([0-9]+)/\1 \(100%\) \[" "$err"
done
for runs in "$work/runs1" "$work/runs2"; do
  [ "$(grep -c '"train_loss"' "$runs/regression/metrics.jsonl")" -eq 3 ]
  grep -q '"test_mse"' "$runs/regression/metrics.jsonl"
done

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
