#!/usr/bin/env bash
# Runs every test: installs what is missing (Debian packages; the pinned torch wheel and Python
# Accelerate in the reused virtual environment), builds with Ninja against the wheel's LibTorch
# (CUDA 13 build: every CUDA and NCCL path is compiled and linked), runs the suite through ctest
# (unit, multi-process, fault, install, accel-migrate lit and end to end), while it builds what
# the sanitizers protect (the runtime and its multi-process tests, the parts of accel-migrate its
# unit tests cover) with AddressSanitizer and UndefinedBehaviorSanitizer, and then runs those
# tests again.
# Tests labelled `gpu` need a CUDA GPU: they are built here and run by scripts/gpu-check.sh.
#
#   scripts/test.sh                   every test (CI runs this)
#   scripts/test.sh --full            and the long forms: the benchmarks built, layout.function_size
#                                     over every file whatever its recorded verdict
#   scripts/test.sh --sanitized-only  the sanitized half alone, at full priority: the check to run
#                                     before a stop when the Release tests were run already
set -euo pipefail
full=OFF
release=1
for arg in "$@"; do
  case $arg in
    --full) full=ON ;;
    --sanitized-only) release= ;;
    *) echo "usage: $0 [--full | --sanitized-only]" >&2; exit 2 ;;
  esac
done
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
jobs=$(nproc)
start=$SECONDS
phase() { echo "== $1 (at $(((SECONDS - start) / 60))m$(((SECONDS - start) % 60))s)"; }

scripts/install-deps.sh
# MLflow's environment, for tracking.mlflow_round_trip's server (made here, not inside the test,
# whose timeout it would eat; the demo does not need it).
scripts/python-env.sh --mlflow > /dev/null
# A run writes about 13 GB (two build trees and what the tests make); short of it, the build
# stops at a link with "No space left on device" half an hour in. Said now instead.
free_gb=$(($(df -Pk . | awk 'NR == 2 { print $4 }') / 1048576))
if [ "$free_gb" -lt 16 ]; then
  echo "warning: $free_gb GB free under $root; a full run needs about 16 (build/, build-sanitize/," \
    "the tests' temporary files)"
fi
# What the tests leave in a temporary folder (a killed process cannot clean up after itself)
# goes with the run.
TMPDIR=$(mktemp -d "${TMPDIR:-/tmp}/accel-tests.XXXXXX")
export TMPDIR
sanitized_build=
cleanup() {
  [ -n "$sanitized_build" ] && kill -- "-$sanitized_build" 2> /dev/null || true
  rm -rf "$TMPDIR"
}
trap cleanup EXIT
if [ -n "$release" ]; then
  phase "format"
  scripts/check-format.sh
fi

# ccache, shared by every checkout on this machine: paths are taken relative to the checkout, so
# a fresh clone reuses what an earlier one compiled. PCH builds need the sloppiness settings.
launcher=()
if command -v ccache > /dev/null; then
  export CCACHE_BASEDIR=$root CCACHE_NOHASHDIR=1 CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-8G}
  export CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
  ccache -z > /dev/null
fi

# Both trees compile their sources in batches (ACCEL_UNITY_BUILD; cmake/AccelCompileOptions.cmake
# says why and what still compiles each source alone).
# The sanitized tree (AddressSanitizer + UndefinedBehaviorSanitizer): Debug keeps LLVM's and our
# assertions on; -g1 keeps the line tables the sanitizers' reports need and leaves out the rest of
# the debug information. It builds what the sanitizers protect: the runtime, the launcher, common
# and the parts of accel-migrate's library its unit tests cover, with their unit and multi-process
# tests.
configure_sanitized() {
  cmake -S . -B build-sanitize -G Ninja -DCMAKE_BUILD_TYPE=Debug -DACCEL_SANITIZE=ON \
    -DCMAKE_CXX_FLAGS_DEBUG=-g1 -DCMAKE_C_FLAGS_DEBUG=-g1 -DACCEL_UNITY_BUILD=ON \
    -DACCEL_BUILD_BENCHMARKS=OFF -DACCEL_BUILD_REWRITER=ON "${launcher[@]}"
}
mkdir -p build-sanitize
if [ -n "$release" ]; then
  # Release: -O2 as RelWithDebInfo, without its debug information, which costs a third of the
  # compile time of a LibTorch source here (checkpointing.cpp: 30 s with -g, 21 s without).
  # The benchmarks only with --full: no test runs them (bench/README.md says how to).
  phase "build (Release)"
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DACCEL_UNITY_BUILD=ON \
    -DACCEL_BUILD_BENCHMARKS=$full -DACCEL_FULL_TESTS=$full "${launcher[@]}"
  cmake --build build -j "$jobs"

  # The sanitized tree builds beside the Release tests, at the lowest priority: it takes the
  # cycles the tests leave idle (processes of a job waiting on each other, launches waiting out a
  # timeout) and yields the rest, so the tests run as they would alone.
  # In a process group of its own (job control), so that a failed test run stops the whole build;
  # not in a session of its own (setsid): the kernel's autogroups would then give the build's
  # session as much CPU as the tests', whatever its nice value. Its configuration runs there too.
  set -m
  (
    renice -n 19 -p "$BASHPID" > /dev/null
    configure_sanitized
    cmake --build build-sanitize -j "$jobs"
  ) > build-sanitize/ci-build.log 2>&1 &
  sanitized_build=$!
  set +m

  phase "tests (Release; the sanitized tree builds beside them)"
  ctest --test-dir build --output-on-failure -j "$jobs" -LE gpu
  echo "built, not run here (they need a CUDA GPU; scripts/gpu-check.sh runs them):"
  ctest --test-dir build -N -L gpu | grep "Test *#" || true

  phase "build (AddressSanitizer + UndefinedBehaviorSanitizer), what is left of it"
  if ! wait "$sanitized_build"; then
    tail -c 20000 build-sanitize/ci-build.log
    echo "the sanitized build failed (above; whole in build-sanitize/ci-build.log)"
    exit 1
  fi
  sanitized_build=
  tail -n 1 build-sanitize/ci-build.log
else
  phase "build (AddressSanitizer + UndefinedBehaviorSanitizer)"
  configure_sanitized
  cmake --build build-sanitize -j "$jobs"
fi

phase "tests under sanitizers"
# ASan's shadow memory must leave the CUDA driver's mappings alone (protect_shadow_gap=0);
# LibTorch's CUDA libraries are loaded even on a CPU run.
export ASAN_OPTIONS=${ASAN_OPTIONS:-protect_shadow_gap=0}
# print_suppressions=0: the count of suppressed leaks would otherwise end every accel-migrate run's
# error output, which the lit tests read.
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$root/test/sanitizers/lsan.supp:print_suppressions=0}
ctest --test-dir build-sanitize --output-on-failure -j "$jobs" -LE "no-sanitize|gpu"

[ ${#launcher[@]} -gt 0 ] && ccache -s | grep -E "Hits|Misses|hit rate" || true
phase "done"
