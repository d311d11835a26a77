#!/usr/bin/env bash
# Installs what accel builds and tests with, where it is missing:
#   - Debian's packages (compilers, Clang LibTooling, CLI11, yaml-cpp, nlohmann-json, GoogleTest...);
#   - LibTorch from the pinned `torch` wheel (CUDA 13 build) and Python Accelerate, the reference for
#     behaviour, in one virtual environment that is created once per pinned version set and reused
#     by every checkout (see scripts/python-env.sh for where it lives).
# Prints nothing when everything is there already.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

packages=(
  cmake ninja-build g++ pkg-config ccache
  libgloo-dev                       # Gloo's headers, for c10d's ProcessGroupGloo.hpp (the wheel has none)
  libcli11-dev libyaml-cpp-dev      # the accel command line and its config file
  libcurl4-openssl-dev              # the MLflow tracker's requests to its server
  nlohmann-json3-dev                # safetensors headers
  libprotobuf-dev protobuf-compiler # the TensorBoard tracker's event messages
  libspdlog-dev                     # accel::get_logger (spdlog with Debian's fmt 9, apart from LibTorch)
  tmux                              # the progress bar's test in a real terminal
  googletest libgtest-dev           # tests
  libbenchmark-dev                  # benchmarks
  clang-14 libclang-cpp14-dev libclang-14-dev llvm-14-dev  # accel-migrate (Clang LibTooling)
  llvm-14-tools python3 python3-venv patch  # its lit + FileCheck tests
  libclang-rt-14-dev                # libFuzzer, for the safetensors header fuzz test
  util-linux                        # setpriv: the read-only lit test runs unprivileged under root
  clang-format-14                   # scripts/check-format.sh
  clang-tidy-14                     # layout.function_size (readability-function-size)
)

missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" ||
    missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -q
  $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# Debian's libtorch-dev beside the wheel makes find_package(Torch) pick /usr/lib's libc10.so and the
# programs abort at load; say so rather than build something that cannot run.
if dpkg-query -W -f='${Status}' libtorch-dev 2>/dev/null | grep -q "install ok installed"; then
  echo "install-deps: warning: Debian's libtorch-dev is installed; accel builds against the torch" \
       "wheel and puts it first in CMAKE_PREFIX_PATH, but removing libtorch-dev is safer" >&2
fi

"$root/scripts/python-env.sh" --install > /dev/null
# MLflow's own environment (for the tracking test's server) is the test command's to make:
# the demo never uses it, and it takes minutes to install.
