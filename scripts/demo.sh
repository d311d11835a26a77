#!/usr/bin/env bash
# The demo, the user story end to end: builds and installs accel, takes the plain single-GPU
# LibTorch program examples/classifier/train.cpp, shows the diff accel-migrate proposes, migrates
# it in place, builds it against the installed package with find_package(accel), and runs it on
# one process and on two under `accel launch`.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

scripts/install-deps.sh
# In batches (ACCEL_UNITY_BUILD, as scripts/test.sh builds this tree): LibTorch's and Clang's
# headers are parsed once a batch of eight sources instead of once a source.
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DACCEL_UNITY_BUILD=ON
cmake --build build -j "$(nproc)" --target accel accel_cli accel_selfcheck accel-migrate
cmake --install build --prefix build/install > /dev/null
bin=build/install/bin

demo=build/demo-classifier
rm -rf "$demo" && mkdir -p "$demo"
cp examples/classifier/train.cpp examples/classifier/CMakeLists.txt "$demo/"

echo "== accel-migrate --diff $demo/train.cpp"
"$bin/accel-migrate" --diff "$demo/train.cpp"
echo "== accel-migrate $demo/train.cpp (in place)"
"$bin/accel-migrate" "$demo/train.cpp"

echo "== build it against build/install with find_package(accel)"
cmake -S "$demo" -B "$demo/build" -G Ninja -DCMAKE_PREFIX_PATH="$root/build/install" \
  -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build "$demo/build" > /dev/null

# Run inside the demo folder: the program saves its optimizer beside itself.
bin=$root/$bin
cd "$demo"
echo "== one process"
./build/train
echo "== accel launch --num_processes 2"
"$bin/accel" launch --num_processes 2 ./build/train
