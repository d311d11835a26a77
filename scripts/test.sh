#!/usr/bin/env bash
# Runs every test: installs what is missing, builds with Ninja, runs the suite through ctest
# (unit, multi-process, fault and install tests), then again built with AddressSanitizer and
# UndefinedBehaviorSanitizer.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
jobs=$(nproc)

scripts/install-deps.sh

echo "== build (RelWithDebInfo)"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build -j "$jobs"
echo "== tests"
ctest --test-dir build --output-on-failure -j "$jobs"

echo "== build (AddressSanitizer + UndefinedBehaviorSanitizer)"
# Debug keeps LLVM's and our assertions on. The rewriter runs its lit tests sanitized too; the end
# to end tests (a user's unsanitized build linking libaccel) and the fuzzer (its own sanitizers)
# are labelled no-sanitize.
cmake -S . -B build-sanitize -G Ninja -DCMAKE_BUILD_TYPE=Debug -DACCEL_SANITIZE=ON \
  -DACCEL_BUILD_BENCHMARKS=OFF -DACCEL_BUILD_REWRITER=ON
cmake --build build-sanitize -j "$jobs"
echo "== tests under sanitizers"
ctest --test-dir build-sanitize --output-on-failure -j "$jobs" -LE no-sanitize
