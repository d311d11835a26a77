#!/usr/bin/env bash
# The cached preamble changes nothing but time: accel-migrate's diff, warnings and statistics on
# the examples and the corpus are byte-identical with --no-cache and with the cache (the first
# group's run builds it, the others read it). The lit inputs are left out: lit itself runs them
# with the cache against CHECK lines written before the cache existed, and a parse without it
# costs about 12 s a file, five minutes of CI for those 25 files.
#   cache_equivalence.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build_dir=$(cd "$1" && pwd) source_dir=$(cd "$2" && pwd)
migrate="$build_dir/rewriter/accel-migrate"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Each group: a directory to run in, then accel-migrate's arguments (files, and flags after --).
groups=(
  "$source_dir/test/rewriter/lit/Inputs/multi|a.cpp b.cpp"
  "$source_dir/examples|classifier/train.cpp curve_fit/train.cpp regression/train.cpp spirals/train.cpp gpt/big_model.cpp"
  "$source_dir/test/rewriter/e2e/corpus|gan/main.cpp lstm/main.cpp mnist/main.cpp patches/main.cpp regression/main.cpp siamese/main.cpp trainer/main.cpp vae/main.cpp"
  "$source_dir/test/rewriter/e2e/corpus/convnet|src/main.cpp src/convnet.cpp src/digits.cpp -- -Iinclude"
  "$source_dir/test/rewriter/e2e/corpus/sentiment|src/main.cpp src/reviews.cpp src/trainer.cpp -- -Iinclude"
)

run() { # NAME DIR ARGS... : diff on stdout, warnings and summary on stderr (notes left out)
  local name=$1 dir=$2
  shift 2
  local status=0
  (cd "$dir" && "$migrate" --diff -j 2 --stats-json="$work/$name.json" "$@" \
    > "$work/$name.out" 2> "$work/$name.raw") || status=$?
  grep -v '^accel-migrate: note: ' "$work/$name.raw" > "$work/$name.err" || true
  # The statistics name files by absolute path, the same in every run.
  echo "exit $status" >> "$work/$name.err"
}

failed=0
for i in "${!groups[@]}"; do
  dir=${groups[$i]%%|*}
  read -r -a args <<< "${groups[$i]#*|}"
  run "plain$i" "$dir" --no-cache "${args[@]}"
  run "cached$i" "$dir" --cache-dir="$work/cache" "${args[@]}"
  if ! grep -q 'building a cached preamble' "$work/cached$i.raw" && [ "$i" -eq 0 ]; then
    echo "group $i: the first cached run did not build a preamble"; cat "$work/cached$i.raw"; failed=1
  fi
  if grep -q 'could not be used\|is damaged\|out of date' "$work/cached$i.raw"; then
    echo "group $i: a preamble was refused:"; cat "$work/cached$i.raw"; failed=1
  fi
  files=$(grep -c '"file"' "$work/plain$i.json" || true)
  lines=$(wc -l < "$work/plain$i.out")
  for mode in cached; do
    for part in out err json; do
      if ! cmp -s "$work/plain$i.$part" "$work/$mode$i.$part"; then
        echo "group $i ($dir): $mode cache differs from --no-cache in $part:"
        diff -u "$work/plain$i.$part" "$work/$mode$i.$part" | head -40 || true
        failed=1
      fi
    done
  done
  echo "group $i ($dir): $files files, $lines diff lines, identical with and without the cache"
done
pch_count=$(find "$work/cache" -name '*.pch' | wc -l)
echo "preambles built: $pch_count"
exit $failed
