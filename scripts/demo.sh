#!/usr/bin/env bash
# The demo: builds and installs accel, builds examples/regression out of tree against the
# installed package with find_package(accel), then runs it as one plain process and as two
# processes under `accel launch`.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build -j "$(nproc)" --target accel accel_cli
cmake --install build --prefix build/install > /dev/null

echo "== examples/regression/train.cpp, built against build/install with find_package(accel)"
cmake -S examples/regression -B build/example-regression -G Ninja \
  -DCMAKE_PREFIX_PATH="$root/build/install" -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build build/example-regression > /dev/null

echo "== one process"
build/example-regression/train 5
echo "== accel launch --num_processes 2"
build/install/bin/accel launch --num_processes 2 build/example-regression/train 5
