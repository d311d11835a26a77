#!/usr/bin/env bash
# The CUDA paths on a machine with a CUDA GPU: builds libaccel and the tests labelled `gpu`
# against the machine's own PyTorch (2.11+cu130 on the lent machines), runs them, then builds the
# example programs plain and migrated and runs both on cuda:0 (they must print the same).
#
# The GPU machines have no network and none of Debian's -dev packages, so the build's small
# dependencies travel with the tree:
#   scripts/gpu-check.sh --bundle      (here) writes build-gpu-deps/: GoogleTest, yaml-cpp, CLI11,
#                                      nlohmann-json and Gloo's headers, and the examples migrated
#                                      by this machine's accel-migrate (needs a build in build/)
#   scripts/gpu-check.sh               (there, with build-gpu-deps/ carried) builds and runs
# CI does not need this script: it builds the gpu tests and leaves them out (ctest -LE gpu).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
deps=$root/build-gpu-deps
examples=(classifier curve_fit spirals)

bundle() {
  rm -rf "$deps" && mkdir -p "$deps/include" "$deps/lib/x86_64-linux-gnu/cmake" "$deps/migrated"
  local lib=/usr/lib/x86_64-linux-gnu
  cp -r /usr/include/gtest /usr/include/gmock /usr/include/yaml-cpp /usr/include/CLI \
        /usr/include/nlohmann /usr/include/gloo "$deps/include/"
  # Debian's layout, so GTest's package config finds its prefix four folders up as at home.
  cp "$lib"/libgtest.a "$lib"/libgtest_main.a "$lib"/libyaml-cpp.a "$deps/lib/x86_64-linux-gnu/"
  cp -r "$lib/cmake/GTest" "$deps/lib/x86_64-linux-gnu/cmake/"
  # yaml-cpp's static library under a config of its own (Debian's names the shared one).
  mkdir -p "$deps/lib/cmake/yaml-cpp"
  cat > "$deps/lib/cmake/yaml-cpp/yaml-cpp-config.cmake" <<'EOF'
get_filename_component(_prefix "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
add_library(yaml-cpp STATIC IMPORTED)
set_target_properties(yaml-cpp PROPERTIES
  IMPORTED_LOCATION "${_prefix}/lib/x86_64-linux-gnu/libyaml-cpp.a"
  INTERFACE_INCLUDE_DIRECTORIES "${_prefix}/include")
EOF
  [ -x build/rewriter/accel-migrate ] || { echo "gpu-check: build/ has no accel-migrate; run scripts/test.sh first" >&2; exit 1; }
  for example in "${examples[@]}"; do
    mkdir -p "$deps/migrated/$example"
    cp "examples/$example/train.cpp" "examples/$example/CMakeLists.txt" "$deps/migrated/$example/"
    build/rewriter/accel-migrate "$deps/migrated/$example/train.cpp"
  done
  du -sh "$deps"
  echo "gpu-check: carry build-gpu-deps to the GPU machine with the tree"
}

check() {
  command -v nvidia-smi > /dev/null && nvidia-smi -L || true
  [ -d "$deps" ] || { echo "gpu-check: build-gpu-deps/ is missing: run scripts/gpu-check.sh --bundle here and carry it" >&2; exit 1; }
  local python=python3 torch_root
  venv=$("$root/scripts/python-env.sh")
  [ -x "$venv/bin/python" ] && python="$venv/bin/python"
  torch_root=$("$python" -c 'import os, torch; print(os.path.dirname(torch.__file__))')
  echo "== LibTorch from $torch_root ($("$python" -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda, "gpus", torch.cuda.device_count())'))"

  # The GTest package config expects to sit at <prefix>/lib/cmake/GTest.
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_PREFIX_PATH="$torch_root;$deps" -DCMAKE_CXX_FLAGS="-isystem $deps/include" \
    -DACCEL_BUILD_REWRITER=OFF -DACCEL_BUILD_BENCHMARKS=OFF > build-gpu.log
  cmake --build build-gpu -j "$(nproc)" --target accel accel_cli accel_selfcheck accel_gpu_tests
  echo "== ctest -L gpu"
  ctest --test-dir build-gpu -L gpu --output-on-failure

  echo "== examples, plain and migrated, on cuda:0"
  cmake --install build-gpu --prefix build-gpu/install > /dev/null
  for example in "${examples[@]}"; do
    local work=build-gpu/examples/$example
    rm -rf "$work" && mkdir -p "$work/run-plain" "$work/run-migrated"
    cmake -S "examples/$example" -B "$work/plain" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$torch_root" > /dev/null
    cmake --build "$work/plain" > /dev/null
    cmake -S "$deps/migrated/$example" -B "$work/migrated" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$root/build-gpu/install;$torch_root" > /dev/null
    cmake --build "$work/migrated" > /dev/null
    (cd "$work/run-plain" && ../plain/train > ../plain.txt)
    # Exactly what the plain program printed needs LibTorch's own optimizer step, not the fused one.
    (cd "$work/run-migrated" && ACCEL_FUSED_OPTIMIZER=0 ../migrated/train > ../migrated.txt)
    if diff -u "$work/plain.txt" "$work/migrated.txt"; then
      echo "$example: the migrated program on cuda:0 printed what the plain one did"
    else
      echo "$example: the migrated program differs from the plain one on cuda:0"; exit 1
    fi
  done
  echo "gpu-check: all passed"
}

case "${1:-}" in
  --bundle) bundle ;;
  "") check ;;
  *) echo "usage: $0 [--bundle]" >&2; exit 2 ;;
esac
