#!/usr/bin/env bash
# accel-migrate with its preamble cache against itself without it (--no-cache, every header
# parsed again: what each file cost before the cache), on the ten-program corpus
# (test/rewriter/e2e/corpus, 14 files). Medians; every ratio is taken in this run.
#  - first file: a cold cache (the preamble is built) against --no-cache, interleaved;
#  - every file after: a warm cache, per file, against --no-cache;
#  - --check on the migrated corpus, one invocation per program as a CI job would run it: the
#    first run (it builds the preamble of migrated files, which include <accel/accel.h>) and the
#    next one;
#  - lit's own run, with the cache and with ACCEL_LIT_NO_CACHE=1.
# Usage: bench/migrate_cache.sh [build-dir] [repetitions] [--no-lit]
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
reps=${2:-3}
run_lit=1
[ "${3:-}" = "--no-lit" ] && run_lit=0
migrate="$build/rewriter/accel-migrate"
source_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r "$source_dir/test/rewriter/e2e/corpus" "$work/corpus"

now() { date +%s.%N; }
elapsed() { awk -v a="$2" -v b="$1" 'BEGIN { printf "%.3f", a - b }'; }
median() { printf '%s\n' "$@" | sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a / b }'; }

# Each program: the directory to run in, and its files (with flags after --).
programs=()
for dir in "$work"/corpus/*/; do
  name=$(basename "$dir")
  case "$name" in
    convnet | sentiment) programs+=("$name|src/*.cpp -- -Iinclude") ;;
    *) programs+=("$name|main.cpp") ;;
  esac
done
# time_migrate DIR ARGS...: seconds one accel-migrate run takes.
time_migrate() {
  local dir=$1
  shift
  local start end
  start=$(now)
  (cd "$dir" && eval "\"$migrate\" --quiet $*" > /dev/null 2>&1) || true
  end=$(now)
  elapsed "$start" "$end"
}

# 1. The first file: the cache built from nothing, against the same file parsed whole.
first=mnist
cold=() plain=()
for i in $(seq "$reps"); do
  cold+=("$(time_migrate "$work/corpus/$first" --diff --cache-dir="$work/cold$i" main.cpp)")
  plain+=("$(time_migrate "$work/corpus/$first" --diff --no-cache main.cpp)")
done
c=$(median "${cold[@]}") p=$(median "${plain[@]}")
echo "first file ($first): cold cache median ${c}s, --no-cache median ${p}s; ratio $(ratio "$c" "$p") (goal <= 1.3)"

# 2. Every file after the first: a warm cache, file by file.
cache="$work/cache"
time_migrate "$work/corpus/$first" --diff --cache-dir="$cache" main.cpp > /dev/null
warm=() whole=()
for entry in "${programs[@]}"; do
  name=${entry%%|*} args=${entry#*|}
  files=${args%% -- *} flags=
  [[ "$args" == *" -- "* ]] && flags="-- ${args#* -- }"
  for file in $(cd "$work/corpus/$name" && eval "ls $files"); do
    for _ in $(seq "$reps"); do
      warm+=("$(time_migrate "$work/corpus/$name" --diff --cache-dir="$cache" "$file" "$flags")")
    done
    whole+=("$(time_migrate "$work/corpus/$name" --diff --no-cache "$file" "$flags")")
  done
done
w=$(median "${warm[@]}") n=$(median "${whole[@]}")
echo "every file after the first (${#whole[@]} files): warm median ${w}s (goal <= 1.5), --no-cache median ${n}s; ratio $(ratio "$w" "$n")"

# 3. --check on the migrated corpus, one run per program.
for entry in "${programs[@]}"; do
  name=${entry%%|*} args=${entry#*|}
  (cd "$work/corpus/$name" && eval "\"$migrate\" --quiet --cache-dir=\"$cache\" $args" > /dev/null 2>&1)
done
check_pass() {
  local total=0 t
  for entry in "${programs[@]}"; do
    name=${entry%%|*} args=${entry#*|}
    t=$(time_migrate "$work/corpus/$name" --check --cache-dir="$cache" "$args")
    total=$(awk -v a="$total" -v b="$t" 'BEGIN { printf "%.3f", a + b }')
  done
  echo "$total"
}
check_first=$(check_pass)
check_runs=()
for _ in $(seq "$reps"); do check_runs+=("$(check_pass)"); done
echo "--check on the migrated corpus (10 programs, 14 files): first run ${check_first}s, then median $(median "${check_runs[@]}")s (goal <= 15)"

# 4. lit, with and without the cache (the cache warm, as after any earlier run).
if [ "$run_lit" = 1 ]; then
  lit=$(grep -o "[^ \"]*lit\.py" "$build/test/rewriter/lit/CTestTestfile.cmake" | head -1)
  python=$(command -v python3)
  start=$(now); "$python" "$lit" -q "$build/test/rewriter/lit" > /dev/null; end=$(now)
  with=$(elapsed "$start" "$end")
  start=$(now); ACCEL_LIT_NO_CACHE=1 "$python" "$lit" -q "$build/test/rewriter/lit" > /dev/null; end=$(now)
  without=$(elapsed "$start" "$end")
  echo "lit: ${with}s with the cache, ${without}s with --no-cache; ratio $(ratio "$with" "$without")"
fi
