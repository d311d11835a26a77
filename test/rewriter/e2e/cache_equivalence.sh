#!/usr/bin/env bash
# The cached preamble changes nothing but time: accel-migrate's diff, warnings and statistics are
# byte-identical with --no-cache and with the cache, on a sample that covers
#  - every transformation the examples and the corpus get (checked below: a kind of change seen
#    outside the sample and not in it fails the test, naming the file to add),
#  - a program in several files sharing headers, in a project with its own include directory
#    and headers that accel-migrate edits (the sentiment corpus program; lit's multi-file.test
#    covers two files and a shared header with the cache),
#  - a conditional block after LibTorch, which ends the preamble early (test/rewriter/e2e/preamble).
# Where the preamble scan finds none (a macro before the first include, a project header that is
# not found, a forced include on the command line), the cached run parses the file whole, as
# --no-cache does: those files are checked to build no preamble (the scan's cases are unit tests,
# PreambleScanTest), not migrated twice.
# A parse without the cache costs about 24 s a file (torch 2.11's headers), so the rest of the
# examples and the corpus run with the cache only (their own tests build and run what it gives,
# and lit checks its output against CHECK lines written before the cache existed).
#   cache_equivalence.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build_dir=$(cd "$1" && pwd) source_dir=$(cd "$2" && pwd)
migrate="$build_dir/rewriter/accel-migrate"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
corpus=$source_dir/test/rewriter/e2e/corpus

# Each group: a directory to run in, then accel-migrate's arguments (files, and flags after --).
sample=(
  "$source_dir/examples|spirals/train.cpp"
  "$corpus/sentiment|src/main.cpp src/reviews.cpp src/trainer.cpp -- -Iinclude"
  "$source_dir/test/rewriter/e2e/preamble|conditional_after.cpp"
)
# Each: a file, and what accel-migrate must exit with (arguments after --).
no_preamble=(
  "defines_first.cpp|0"
  "missing_header.cpp|2"
  "conditional_after.cpp|0|-include cstddef"
)
rest=(
  "$source_dir/examples|classifier/train.cpp curve_fit/train.cpp regression/train.cpp gpt/big_model.cpp"
  "$corpus|gan/main.cpp lstm/main.cpp mnist/main.cpp patches/main.cpp regression/main.cpp siamese/main.cpp trainer/main.cpp vae/main.cpp"
  "$corpus/convnet|src/main.cpp src/convnet.cpp src/digits.cpp -- -Iinclude"
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

refused() { # NAME: a preamble the cache could not use is a failure of the cache
  if grep -q 'could not be used\|is damaged\|out of date' "$work/$1.raw"; then
    echo "$1: a preamble was refused:"; cat "$work/$1.raw"; return 0
  fi
  return 1
}

change_kinds() { # JSON...: "kind file" per line
  python3 - "$@" <<'PY'
import json, sys
for path in sys.argv[1:]:
    for f in json.load(open(path))["files"]:
        for kind in f.get("changes", {}):
            print(kind, f["file"])
PY
}

# The files without a preamble parse beside the sample (once: their verification would be a
# second whole parse, and has nothing of the cache's to check).
preamble_dir=$source_dir/test/rewriter/e2e/preamble
none_runs=()
for i in "${!no_preamble[@]}"; do
  IFS='|' read -r file expected flags <<< "${no_preamble[$i]}"
  read -r -a extra <<< "$flags"
  run "none$i" "$preamble_dir" --cache-dir="$work/none-cache$i" --testing-no-verify "$file" \
    ${flags:+--} "${extra[@]}" &
  none_runs+=($!)
done

failed=0
for i in "${!sample[@]}"; do
  dir=${sample[$i]%%|*}
  read -r -a args <<< "${sample[$i]#*|}"
  # Without the cache the migrated program is not parsed again (--testing-no-verify: a second
  # whole parse, 24 s a file); the run with the cache verifies the same text. The two at once.
  run "plain$i" "$dir" --no-cache --testing-no-verify "${args[@]}" &
  plain=$!
  run "cached$i" "$dir" --cache-dir="$work/cache" "${args[@]}"
  wait "$plain"
  if ! grep -q 'building a cached preamble' "$work/cached$i.raw" && [ "$i" -eq 0 ]; then
    echo "group $i: the first cached run did not build a preamble"; cat "$work/cached$i.raw"; failed=1
  fi
  refused "cached$i" && failed=1
  files=$(grep -c '"file"' "$work/plain$i.json" || true)
  lines=$(wc -l < "$work/plain$i.out")
  for part in out err json; do
    if ! cmp -s "$work/plain$i.$part" "$work/cached$i.$part"; then
      echo "group $i ($dir): the cache differs from --no-cache in $part:"
      diff -u "$work/plain$i.$part" "$work/cached$i.$part" | head -40 || true
      failed=1
    fi
  done
  echo "group $i ($dir ${args[*]}): $files files, $lines diff lines, identical with and without the cache"
done

wait "${none_runs[@]}"
for i in "${!no_preamble[@]}"; do
  IFS='|' read -r file expected flags <<< "${no_preamble[$i]}"
  built=$(find "$work/none-cache$i" -name '*.pch' 2> /dev/null | wc -l || true)
  if [ "$built" -ne 0 ] || [ "$(tail -1 "$work/none$i.err")" != "exit $expected" ]; then
    echo "$file $flags: expected no preamble and exit $expected; $built built:"
    cat "$work/none$i.raw"; failed=1
  else
    echo "$file $flags: no preamble, parsed whole, exit $expected"
  fi
done

for i in "${!rest[@]}"; do
  dir=${rest[$i]%%|*}
  read -r -a args <<< "${rest[$i]#*|}"
  run "rest$i" "$dir" --cache-dir="$work/cache" "${args[@]}"
  refused "rest$i" && failed=1
  if [ "$(tail -1 "$work/rest$i.err")" != "exit 0" ]; then
    echo "rest group $i ($dir): accel-migrate failed:"; cat "$work/rest$i.raw"; failed=1
  fi
done

# Every kind of change outside the sample is also made inside it.
sampled=$(change_kinds "$work"/plain*.json | cut -d' ' -f1 | sort -u)
missing=$(change_kinds "$work"/rest*.json | sort -u -k1,1 | while read -r kind file; do
  grep -qx "$kind" <<< "$sampled" || echo "$kind (made in $file)"
done)
if [ -n "$missing" ]; then
  echo "kinds of change the sample does not cover; add a file that makes them to the sample:"
  echo "$missing"
  failed=1
fi
echo "kinds of change covered by the sample: $(echo "$sampled" | tr '\n' ' ')"
pch_count=$(find "$work/cache" -name '*.pch' | wc -l)
echo "preambles built: $pch_count"
exit $failed
