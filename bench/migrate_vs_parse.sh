#!/usr/bin/env bash
# accel-migrate's cost against clang's own parse of the same file with the same flags:
# `accel-migrate --no-cache --diff FILE` vs `clang-check FILE -- <same flags>`, interleaved, median of
# N: the rewriter's own cost over a parse (bench/migrate_cache.sh measures the preamble cache).
# Then the parallel mode: `accel-migrate --diff -j 2` on four files against -j 1, same run.
# Usage: bench/migrate_vs_parse.sh [build-dir] [file] [repetitions]
set -euo pipefail
build=${1:-build}
file=${2:-examples/classifier/train.cpp}
reps=${3:-5}
migrate="$build/rewriter/accel-migrate"
check=$(command -v clang-check-14 || command -v clang-check)
torch_api=$(dirname "$(dirname "$(find /usr/include /usr/local/include -path '*csrc/api/include/torch/torch.h' -print -quit)")")
flags=(-std=c++17 -isystem "$torch_api" -resource-dir="$(clang++-14 -print-resource-dir)" -w)

now() { date +%s.%N; }
t_migrate=() t_parse=()
for _ in $(seq "$reps"); do
  start=$(now); "$migrate" --quiet --no-cache --diff "$file" -- "${flags[@]}" > /dev/null; end=$(now)
  t_migrate+=("$(awk -v a="$end" -v b="$start" 'BEGIN { print a - b }')")
  start=$(now); "$check" "$file" -- "${flags[@]}" > /dev/null; end=$(now)
  t_parse+=("$(awk -v a="$end" -v b="$start" 'BEGIN { print a - b }')")
done
median() { printf '%s\n' "$@" | sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
m=$(median "${t_migrate[@]}") p=$(median "${t_parse[@]}")
echo "accel-migrate --diff: median ${m}s; clang-check: median ${p}s (${reps} runs each, interleaved)"
echo "ratio migrate/parse: $(awk -v a="$m" -v b="$p" 'BEGIN { printf "%.3f", a / b }')  (target <= 1.25)"

# Several files: -j 2 against -j 1 on the example programs (four files, interleaved).
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp examples/classifier/train.cpp "$work/a.cpp"
cp examples/curve_fit/train.cpp "$work/b.cpp"
cp examples/spirals/train.cpp "$work/c.cpp"
cp examples/classifier/train.cpp "$work/d.cpp"
t_serial=() t_parallel=()
for _ in $(seq "$reps"); do
  start=$(now); "$migrate" --quiet --no-cache --diff -j 1 "$work"/*.cpp -- "${flags[@]}" > /dev/null 2>&1; end=$(now)
  t_serial+=("$(awk -v a="$end" -v b="$start" 'BEGIN { print a - b }')")
  start=$(now); "$migrate" --quiet --no-cache --diff -j 2 "$work"/*.cpp -- "${flags[@]}" > /dev/null 2>&1; end=$(now)
  t_parallel+=("$(awk -v a="$end" -v b="$start" 'BEGIN { print a - b }')")
done
s1=$(median "${t_serial[@]}") s2=$(median "${t_parallel[@]}")
echo "4 files: -j 1 median ${s1}s; -j 2 median ${s2}s ($(nproc) cores)"
echo "ratio -j 2 / -j 1: $(awk -v a="$s2" -v b="$s1" 'BEGIN { printf "%.3f", a / b }')  (ideal 0.5)"
