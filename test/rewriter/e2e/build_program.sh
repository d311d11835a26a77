# Sourced by the end-to-end scripts: builds a user's CMake project the way its user would
# (Release, Ninja), quietly.
#   build_program SOURCE_DIR BUILD_DIR [CMAKE_ARGS...]
# Every project lives in a fresh temporary directory, so ccache (when present) takes paths
# relative to that directory: the same program built again in a later run, or in another
# checkout, is a cache hit, as the plain program always is and the migrated one is until
# accel-migrate's output changes.
# Without ccache (a cold CI run), sources compile with the precompiled <torch/torch.h> that
# torch_pch.sh made, named by ACCEL_E2E_PCH; with ccache the cache does better, and GCC's PCH
# would keep ccache from caching.
# Warnings are errors in the programs we build: a migration that leaves a variable unused, or
# anything else a careful shop's -Werror build rejects, fails the test.
# shellcheck disable=SC2034
strict_flags=(-DCMAKE_CXX_FLAGS="-Wall -Wextra -Werror")
e2e_scripts=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

build_program() {
  local source=$1 build=$2
  shift 2
  local launcher=()
  if command -v ccache > /dev/null && [ -z "${CCACHE_DISABLE:-}" ]; then
    launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  elif [ -f "${ACCEL_E2E_PCH:-}.gch" ]; then
    launcher=("-DCMAKE_CXX_COMPILER_LAUNCHER=$e2e_scripts/with_pch.sh;$ACCEL_E2E_PCH")
  fi
  local base
  base=$(dirname "$source")
  # Quiet when it builds; the compiler's errors (a -Werror warning) shown when it does not.
  if ! CCACHE_BASEDIR=$base CCACHE_NOHASHDIR=1 \
    cmake -S "$source" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" "$@" \
    > "$build.log" 2>&1 ||
    ! CCACHE_BASEDIR=$base CCACHE_NOHASHDIR=1 cmake --build "$build" >> "$build.log" 2>&1; then
    cat "$build.log"
    echo "building $source failed (above)"
    return 1
  fi
}
