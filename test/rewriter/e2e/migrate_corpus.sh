#!/usr/bin/env bash
# accel-migrate on a program written the way public LibTorch tutorials are (test/rewriter/e2e/corpus/NAME:
# its own CMake project, its own style). Installs accel into a fresh prefix, builds and runs the
# plain program, migrates a copy with the installed accel-migrate, and checks that
#  - a second migration finds nothing to do (--check),
#  - no line of the diff changed only in whitespace, and no new line ends in whitespace,
#  - the plain and the migrated program both build with -Wall -Wextra -Werror (nothing the
#    migration leaves unused warns),
#  - the migrated program builds with find_package(accel) and, on one process, prints exactly
#    what the plain program printed,
#  - under `accel launch --num_processes 2` each line named by an `once` rule appears once, and
#    each `value` rule's number is within its tolerance of the one-process run.
#   migrate_corpus.sh BUILD_DIR SOURCE_DIR NAME
# NAME/corpus.conf sets: binary (the executable's name), sources (the files to migrate, and any
# compiler arguments after --, or `-p ../database`), database (non-empty: configure the project
# into ../database with compile_commands.json first), once (regexes), values (entries
# "REGEX|TOLERANCE", the regex capturing the number in its first group), weights (non-empty: the
# program prints a line "weights: N N ..." on standard error on every process; one migrated
# process must print the plain program's line, two processes the same line on both ranks, and
# two processes with split batches (ACCEL_SPLIT_BATCHES=1: each reads half of every batch, the
# gradients averaged) the one-process numbers within a relative 1e-5, and print what one process
# printed, numbers within 1e-3), rundir (a relative folder of each run's own that the program
# runs in, for a program that reads its data at a relative path such as ../../data; default .)
# and setup (a command run in each run's own folder before the program: its synthetic data),
# warnings ("new": a program of someone else's that warns as written builds with -Wall -Wextra
# but not -Werror, and the migrated build may not warn more than the plain one).
# args (the program's command-line arguments, every run), ignore (a regex: lines left out of the
# one-process comparison), cxxflags (added to a `warnings=new` program's builds), mask (a sed -E expression applied to both outputs before it), refused and refused_warning (regexes:
# two processes must stop with the first on their standard error, the migration must warn the
# second), checked (non-empty: the two-process runs with ACCEL_DEBUG=1, whose per-step hash of the
# parameters stops a job whose ranks' weights differ), split (non-empty: each `value` of two
# processes with split batches within its tolerance of one process; split_values, when given,
# replaces values there: a training metric that two processes without split batches change).
# With ACCEL_CORPUS_ROOT set, NAME is a folder under it instead (real_corpus.sh's programs).
set -euo pipefail
[ -n "${ACCEL_TRACE:-}" ] && set -x
build_dir=$1 source_dir=$2 name=$3
# shellcheck source=test/rewriter/e2e/build_program.sh
source "$(dirname "${BASH_SOURCE[0]}")/build_program.sh"
program="${ACCEL_CORPUS_ROOT:-$source_dir/test/rewriter/e2e/corpus}/$name"
binary= sources= database= once=() values=() weights= rundir=. setup= warnings= checked= split= args=() refused= refused_warning= ignore= mask= split_values=() cxxflags= launch_env=()
# shellcheck source=/dev/null
source "$program/corpus.conf"

work=$(mktemp -d)
plain_build=
trap 'if [ -n "$plain_build" ]; then kill "$plain_build" 2> /dev/null || true; wait || true; fi
      rm -rf "$work"' EXIT
cmake --install "$build_dir" --prefix "$work/prefix" > /dev/null
# Each run in a folder of its own, set up as the program expects (its data).
run_in() {
  mkdir -p "$work/run-$1/$rundir"
  if [ -n "$setup" ]; then (cd "$work/run-$1" && eval "$setup"); fi
  echo "$work/run-$1/$rundir"
}
for run in plain one two; do run_in "$run" > /dev/null; done
cp -r "$program" "$work/src"
rm -f "$work/src/corpus.conf"
cp -r "$work/src" "$work/original"

# The plain program builds (one core) while the migration runs (the other).
build_flags=("${strict_flags[@]}")
[ "$warnings" = new ] && build_flags=(-DCMAKE_CXX_FLAGS="-Wall -Wextra${cxxflags:+ $cxxflags}")
build_program "$work/original" "$work/plain" "${build_flags[@]}" &
plain_build=$!

# A program migrated with -p reads its compile commands from the project's own CMake
# configuration (exported, as users do for clang tools), made before the migration.
if [ -n "$database" ]; then
  cmake -S "$work/src" -B "$work/database" -G Ninja -DCMAKE_EXPORT_COMPILE_COMMANDS=ON > /dev/null
fi

# Migrate in place, timed; the statistics say how many lines changed only in whitespace. The
# tests share one preamble cache in the build tree.
migrate="\"$work/prefix/bin/accel-migrate\" --cache-dir=\"$build_dir/migrate-cache\""
start=$(date +%s.%N)
(cd "$work/src" && eval "$migrate --stats-json=\"$work/stats.json\" $sources") \
  2> >(tee "$work/migrate.err" >&2)
end=$(date +%s.%N)
(cd "$work/src" && eval "$migrate --check $sources")
diff -ru "$work/original" "$work/src" > "$work/migration.diff" || true
cat "$work/migration.diff"
# (A line's \r is the line ending of a file written on Windows, which new lines take too.)
if sed 's/\r$//' "$work/migration.diff" | grep -nE '^\+.*[[:space:]]$'; then
  echo "the lines above end in whitespace: the migration must not leave trailing spaces"; exit 1
fi
python3 - "$work/stats.json" "$start" "$end" <<'PY'
import json, sys
stats = json.load(open(sys.argv[1]))
files = stats["files"]
changes = sum(f["total_changes"] for f in files)
warnings = sum(f["warnings"] for f in files)
noise = sum(f["whitespace_only_lines"] for f in files)
seconds = float(sys.argv[3]) - float(sys.argv[2])
print(f"migration: {len(files)} file(s), {changes} changes, {warnings} warnings, "
      f"{noise} whitespace-only lines, {seconds:.1f} s ({seconds / len(files):.1f} s per file)")
if noise:
    sys.exit("lines changed only in whitespace: the diff must show the migration alone")
PY

wait "$plain_build"
if ! (cd "$work/run-plain/$rundir" && "$work/plain/$binary" "${args[@]}" > "$work/plain.txt" \
  2> "$work/plain.err"); then
  tail -c 4000 "$work/plain.err"; echo "the plain $name failed (above)"; exit 1
fi

build_program "$work/src" "$work/migrated" -DCMAKE_PREFIX_PATH="$work/prefix" "${build_flags[@]}"
if [ "$warnings" = new ]; then
  plain_warnings=$(grep -c "warning:" "$work/plain.log" || true)
  migrated_warnings=$(grep -c "warning:" "$work/migrated.log" || true)
  echo "warnings: the plain build $plain_warnings, the migrated build $migrated_warnings"
  if [ "$migrated_warnings" -gt "$plain_warnings" ]; then
    grep "warning:" "$work/migrated.log"; echo "the migration adds warnings (above)"; exit 1
  fi
fi
# The migrated program must print exactly what the plain one printed, with default options: the
# prepared optimizer's fused step on the CPU rounds as LibTorch's own step does (issue 59).
if ! (cd "$work/run-one/$rundir" && "$work/migrated/$binary" "${args[@]}" > "$work/one.txt" \
  2> "$work/one.err"); then
  tail -c 4000 "$work/one.err"; echo "the migrated $name failed on one process (above)"; exit 1
fi
# ignore (a regex): lines that differ on every run of the plain program too (a time taken, the
# addresses in an exception's stack trace) are left out of the comparison.
# mask (a sed -E expression) rewrites what differs within a line (an epoch's time) alike in both.
compared() {
  if [ -n "$ignore" ]; then grep -avE -- "$ignore" "$1" || true; else cat "$1"; fi |
    if [ -n "$mask" ]; then sed -E "$mask"; else cat; fi
}
if ! diff -u <(compared "$work/plain.txt") <(compared "$work/one.txt"); then
  echo "migrated $name on one process differs from the plain program"; exit 1
fi

# ACCEL_DEBUG=1 (checked: a non-empty `checked`): after every optimizer step the processes compare
# a hash of their parameters and stop naming the first that differs: ranks' weights equal, for a
# program that does not print them.
# launch_env (VAR=VALUE ...): the options a user sets for the launched runs, as the environment's
# (ACCEL_DDP_FIND_UNUSED_PARAMETERS=true where the runtime asks for it).
debug_env=("${launch_env[@]}")
[ -n "$checked" ] && debug_env+=(ACCEL_DEBUG=1)
two_status=0
(cd "$work/run-two/$rundir" && env "${debug_env[@]}" "$work/prefix/bin/accel" launch \
  --num_processes 2 "$work/migrated/$binary" "${args[@]}" > "$work/two.txt" 2> "$work/two.err") \
  || two_status=$?
# refused (a regex): a program accel-migrate cannot make right says why when migrated (the regex
# in its warnings), and two processes stop at the first step with the runtime's refusal.
if [ -n "$refused" ]; then
  if [ "$two_status" -eq 0 ] || ! grep -qE -- "$refused" "$work/two.err"; then
    grep -v "^frame #" "$work/two.err" | tail -20
    echo "two processes of $name were to stop with '$refused' (exit $two_status)"; exit 1
  fi
  if ! grep -qE -- "$refused_warning" "$work/migrate.err"; then
    echo "the migration of $name does not warn '$refused_warning'"; exit 1
  fi
  echo "two processes stopped as they must: $(grep -m1 -oE -- "$refused" "$work/two.err")"
  echo "migration end-to-end test of $name passed (refused)"
  exit 0
fi
if [ "$two_status" -ne 0 ]; then
  grep -v "^frame #" "$work/two.err" | tail -40
  echo "two processes of the migrated $name failed (exit $two_status; above)"; exit 1
fi
cat "$work/two.err" >&2
cat "$work/two.txt"
for pattern in "${once[@]}"; do
  n=$(grep -acE -- "$pattern" "$work/two.txt" || true)
  if [ "$n" -ne 1 ]; then echo "2 processes printed '$pattern' $n times, expected once"; exit 1; fi
done
# (grep -a throughout: a program may print a byte that is not text, as austinvhuang's nca prints
# torch::cuda::device_count(), an int8_t, as the character 0.)
# compare_values RUN WHAT ENTRY...: each entry's number (its regex's first group, last match) in
# RUN's output within its tolerance of one process's.
compare_values() {
  local run=$1 what=$2 entry pattern tolerance one two
  shift 2
  for entry in "$@"; do
    pattern=${entry%|*} tolerance=${entry##*|}
    one=$(grep -aE -- "$pattern" "$work/one.txt" | tail -1 | sed -E "s#.*$pattern.*#\\1#")
    two=$(grep -aE -- "$pattern" "$work/$run.txt" | tail -1 | sed -E "s#.*$pattern.*#\\1#")
    awk -v a="$one" -v b="$two" -v t="$tolerance" -v p="$pattern" -v w="$what" 'BEGIN {
      d = a - b; if (d < 0) d = -d
      printf "%s: one process %s, %s %s (tolerance %s)\n", p, a, w, b, t
      if (a == "" || b == "" || d > t) exit 1 }'
  done
}
compare_values two "two processes" "${values[@]}"
# split (non-empty): with ACCEL_SPLIT_BATCHES=1 two processes read half of every batch each and
# train as one process does; each `value` must then be the one-process number within its
# tolerance (the program's batches must divide by two).
# The split-batch run, once for `split` and `weights` both.
run_split() {
  [ -f "$work/split.txt" ] && return 0
  if ! (cd "$(run_in split)" && env "${debug_env[@]}" ACCEL_SPLIT_BATCHES=1 \
    "$work/prefix/bin/accel" launch --num_processes 2 "$work/migrated/$binary" "${args[@]}" \
    > "$work/split.txt" 2> "$work/split.err"); then
    grep -v "^frame #" "$work/split.err" | tail -40
    echo "two processes of $name with split batches failed (above)"; exit 1
  fi
}
if [ -n "$split" ]; then
  run_split
  [ ${#split_values[@]} -gt 0 ] || split_values=("${values[@]}")
  compare_values split "two processes with split batches" "${split_values[@]}"
fi
if [ -n "$weights" ]; then
  run_split
  python3 - "$work" <<'PY'
import sys
work = sys.argv[1]
def lines(name):
    return [l.split()[1:] for l in open(f"{work}/{name}.err") if l.startswith("weights:")]
plain, one, two, split = lines("plain"), lines("one"), lines("two"), lines("split")
print(f"weights: plain {plain}\n  one process {one}\n  two {two}\n  two, split batches {split}")
if len(plain) != 1 or one != plain:
    sys.exit("one migrated process must end with the plain program's weights")
for run, got in (("two processes", two), ("two processes with split batches", split)):
    if len(got) != 2 or got[0] != got[1]:
        sys.exit(f"{run}: both ranks must print the same weights (gradients averaged)")
for a, b in zip(map(float, one[0]), map(float, split[0])):
    if abs(a - b) > 1e-5 * max(1.0, abs(a)):
        sys.exit(f"split batches on two processes: {b} against one process's {a} (1e-5)")
print("weights: equal on both ranks; split batches equal one process within 1e-5")
# With split batches the job trains as the one process did: every line it prints (metrics over
# all processes' batches) is the one-process line, numbers within 1e-3 (printed roundings).
def numeric(token):
    try:
        return float(token)
    except ValueError:
        return None
one_out = open(f"{work}/one.txt").read().split("\n")
split_out = open(f"{work}/split.txt").read().split("\n")
if len(one_out) != len(split_out):
    sys.exit(f"split batches printed {len(split_out)} lines, one process {len(one_out)}")
for a, b in zip(one_out, split_out):
    ta, tb = a.split(), b.split()
    same = len(ta) == len(tb) and all(
        x == y or (numeric(x.strip(",")) is not None and numeric(y.strip(",")) is not None and
                   abs(numeric(x.strip(",")) - numeric(y.strip(","))) <= 1e-3)
        for x, y in zip(ta, tb))
    if not same:
        sys.exit(f"split batches printed '{b}' where one process printed '{a}'")
print("split batches: every printed line is the one-process line")
PY
fi
echo "migration end-to-end test of $name passed"
