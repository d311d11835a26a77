#!/usr/bin/env bash
# Precompiles <torch/torch.h> once for the end-to-end tests' programs (the corpus and the
# examples, each built plain and migrated from nothing): about 7 of a corpus source's 15 s is
# parsing LibTorch. The flags are the ones a user's project gets (CMake's Release, C++17,
# find_package(Torch), -Wall -Wextra -Werror), taken from a one-file project configured the same
# way, since GCC uses a precompiled header only when they match. build_program.sh passes it with
# -include through a compiler launcher; where GCC finds it does not match it reads the header
# itself, so a stale or missing one costs time and never changes a result.
#   torch_pch.sh BUILD_DIR   (writes BUILD_DIR/e2e-pch/torch_pch.h and its .gch)
set -euo pipefail
out=$1/e2e-pch
if command -v ccache > /dev/null && [ -z "${CCACHE_DISABLE:-}" ]; then
  echo "ccache is in use: the programs compile through it, without this header"
  exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out" "$work/project"
cat > "$work/project/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.18)
project(torch_pch CXX)
set(CMAKE_CXX_STANDARD 17)
find_package(Torch REQUIRED)
add_library(probe OBJECT probe.cpp)
target_link_libraries(probe PRIVATE torch)
CMAKE
echo 'int probe();' > "$work/project/probe.cpp"
cmake -S "$work/project" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_EXPORT_COMPILE_COMMANDS=ON -DCMAKE_CXX_FLAGS="-Wall -Wextra -Werror" > "$work/configure.log" 2>&1 ||
  { cat "$work/configure.log"; exit 1; }
printf '#include <torch/torch.h>\n' > "$work/torch_pch.h"
# The probe's compile command, compiling the header instead of the probe.
python3 - "$work" <<'PY' > "$work/command"
import json, shlex, sys
work = sys.argv[1]
entry = json.load(open(f"{work}/build/compile_commands.json"))[0]
args = shlex.split(entry["command"])
out = args.index("-o")
del args[out:out + 2]
args.remove("-c")
args.remove(entry["file"])
args += ["-x", "c++-header", f"{work}/torch_pch.h", "-o", f"{work}/torch_pch.h.gch"]
print(shlex.join(args))
PY
(cd "$work/build" && eval "$(cat "$work/command")")
# In place whole: the header last, so a reader never finds it beside a half-written .gch.
mv "$work/torch_pch.h.gch" "$out/torch_pch.h.gch"
mv "$work/torch_pch.h" "$out/torch_pch.h"
echo "precompiled <torch/torch.h>: $(du -h "$out/torch_pch.h.gch" | cut -f1) in $out"
