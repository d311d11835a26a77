#!/usr/bin/env bash
# The CUDA paths on a machine with a CUDA GPU: the tests labelled `gpu`, the example programs
# plain and migrated on cuda:0 (they must print the same), and the GPU timing table (accel's
# optimizer steps and training step against plain LibTorch, PyTorch and Accelerate; the device
# memory of each sharding strategy on one process; FP8's MLP step against bf16's).
#
# Device time is short and the lent machines have no network, so everything is built here, against
# the same torch 2.11 CUDA 13 wheel the machines hold, and travels in one folder:
#   scripts/gpu-check.sh --bundle      (here, after scripts/test.sh or a build in build/) writes
#                                      build-gpu-deps/: the test and benchmark binaries, the six
#                                      example programs, and the shared libraries they need that
#                                      are neither LibTorch's nor the C library's
#   scripts/gpu-check.sh               (there, with build-gpu-deps/ carried) runs everything with
#                                      the machine's own LibTorch, writes the log to $OUT (when
#                                      set) and exits non-zero if anything failed
# CI does not need this script: it builds the gpu tests and leaves them out (ctest -LE gpu).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
deps=$root/build-gpu-deps
build=${ACCEL_BUILD_DIR:-$root/build}
examples=(classifier curve_fit spirals)
binaries=(test/accel_gpu_tests bench/accel_bench_optimizer_step bench/accel_bench_sharding
          bench/accel_bench_fp8_matmul)

bundle() {
  [ -x "$build/rewriter/accel-migrate" ] ||
    { echo "gpu-check: $build has no accel-migrate; run scripts/test.sh first" >&2; exit 1; }
  # The gpu tests exist only in a build against a CUDA LibTorch.
  grep -q 'accel_gpu_tests:' "$build/build.ninja" ||
    { echo "gpu-check: $build is not a CUDA build of libaccel" >&2; exit 1; }
  local torch_root work=$build/gpu-bundle
  torch_root=$("$root/scripts/python-env.sh" --torch-dir)
  # The test command leaves the benchmarks out of its tree (they are no test); three run here.
  cmake -S "$root" -B "$build" -DACCEL_BUILD_BENCHMARKS=ON > /dev/null
  cmake --build "$build" --target accel_gpu_tests accel_bench_optimizer_step accel_bench_sharding \
    accel_bench_fp8_matmul
  rm -rf "$deps" "$work" && mkdir -p "$deps/bin" "$deps/lib" "$work"
  cmake --install "$build" --prefix "$work/install" > /dev/null
  for binary in "${binaries[@]}"; do cp "$build/$binary" "$deps/bin/"; done

  # The examples as their users build them: plain against LibTorch, migrated against libaccel.
  for example in "${examples[@]}"; do
    mkdir -p "$work/$example/migrated-source"
    cp "examples/$example/train.cpp" "examples/$example/CMakeLists.txt" \
      "$work/$example/migrated-source/"
    "$build/rewriter/accel-migrate" --cache-dir="$build/migrate-cache" \
      "$work/$example/migrated-source/train.cpp"
    cmake -S "examples/$example" -B "$work/$example/plain" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$torch_root" -DCMAKE_CXX_COMPILER_LAUNCHER=ccache > /dev/null
    cmake -S "$work/$example/migrated-source" -B "$work/$example/migrated" -G Ninja \
      -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$work/install;$torch_root" \
      -DCMAKE_CXX_COMPILER_LAUNCHER=ccache > /dev/null
    cmake --build "$work/$example/plain" > /dev/null
    cmake --build "$work/$example/migrated" > /dev/null
    cp "$work/$example/plain/train" "$deps/bin/${example}_plain"
    cp "$work/$example/migrated/train" "$deps/bin/${example}_migrated"
  done
  strip --strip-debug "$deps"/bin/*

  # Shared libraries from this machine's packages (protobuf for the TensorBoard tracker, CUDA's
  # runtime): the GPU machine's image has other versions or none. LibTorch's own, and the C and
  # C++ runtime (older here than there), stay behind.
  ldd "$deps"/bin/* | awk '$3 ~ /^\// {print $3}' | sort -u |
    grep -vE '/torch/lib/|/nvidia/|/(libc|libm|libdl|librt|libpthread|libutil|libgcc_s|libstdc\+\+)\.so|ld-linux' |
    while read -r library; do cp -L "$library" "$deps/lib/"; done
  du -sh "$deps"
  ls "$deps/bin" "$deps/lib"
  echo "gpu-check: carry build-gpu-deps to the GPU machine with the tree"
}

failures=()

# Runs one step of the check, keeping on after a failure so one run shows everything.
step() {
  local name=$1
  shift
  echo
  echo "== $name"
  if "$@"; then echo "== $name: passed"; else failures+=("$name"); echo "== $name: FAILED"; fi
}

example_matches() {
  local example=$1 work=$2/$1
  mkdir -p "$work/plain" "$work/migrated"
  (cd "$work/plain" && "$deps/bin/${example}_plain" > ../plain.txt)
  # Exactly what the plain program printed needs LibTorch's own optimizer step: on CUDA the fused
  # step is ATen's (PyTorch's fused=True), which rounds otherwise; on the CPU it is exact.
  (cd "$work/migrated" && ACCEL_FUSED_OPTIMIZER=0 "$deps/bin/${example}_migrated" > ../migrated.txt)
  tail -n 3 "$work/migrated.txt"
  diff -u "$work/plain.txt" "$work/migrated.txt"
}

check() {
  [ -d "$deps/bin" ] ||
    { echo "gpu-check: build-gpu-deps/ is missing: run scripts/gpu-check.sh --bundle here and carry it" >&2; exit 1; }
  nvidia-smi -L || true
  local python=python3 torch_root work
  torch_root=$("$python" -c 'import os, torch; print(os.path.dirname(torch.__file__))')
  echo "LibTorch from $torch_root ($("$python" -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda, "gpus", torch.cuda.device_count())'))"
  export LD_LIBRARY_PATH="$deps/lib:$torch_root/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  work=$(mktemp -d)

  step "gpu tests" "$deps/bin/accel_gpu_tests"
  for example in "${examples[@]}"; do
    step "$example: migrated prints what plain prints on cuda:0" example_matches "$example" "$work"
  done
  step "optimizer and training steps: accel and plain LibTorch" \
    "$deps/bin/accel_bench_optimizer_step" 15 --device cuda
  step "the same for PyTorch and Accelerate" \
    "$python" bench/vs_accelerate/gpu_step.py --rounds 15
  step "device memory by sharding strategy, one process" \
    "$deps/bin/accel_bench_sharding" 5 --device cuda
  step "FP8 MLP forward+backward against bf16 (4096 -> 14336 -> 4096, 8192 tokens)" \
    "$deps/bin/accel_bench_fp8_matmul" --device cuda

  echo
  if [ ${#failures[@]} -eq 0 ]; then echo "gpu-check: all passed"; return 0; fi
  printf 'gpu-check: FAILED: %s\n' "${failures[@]}"
  return 1
}

case "${1:-}" in
  --bundle) bundle ;;
  "")
    if [ -n "${OUT:-}" ]; then
      check 2>&1 | tee "$OUT/gpu-check.log"
      exit "${PIPESTATUS[0]}"
    fi
    check
    ;;
  *) echo "usage: $0 [--bundle]" >&2; exit 2 ;;
esac
