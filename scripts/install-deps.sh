#!/usr/bin/env bash
# Installs the Debian packages accel builds and tests with, where they are missing.
set -euo pipefail

packages=(
  cmake ninja-build g++ pkg-config
  libtorch-dev libgloo-dev          # LibTorch 1.13 (CPU, c10d with Gloo); Gloo's headers for c10d
  libcli11-dev libyaml-cpp-dev      # the accel command line and its config file
  nlohmann-json3-dev                # safetensors headers
  googletest libgtest-dev           # tests
  clang-14 libclang-cpp14-dev libclang-14-dev llvm-14-dev  # accel-migrate (Clang LibTooling)
  llvm-14-tools python3 patch       # its lit + FileCheck tests
  libclang-rt-14-dev                # libFuzzer, for the safetensors header fuzz test
)

missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" ||
    missing+=("$package")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "install-deps: installing ${missing[*]}"
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q
$sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
