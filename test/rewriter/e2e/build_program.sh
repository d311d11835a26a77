# Sourced by the end-to-end scripts: builds a user's CMake project the way its user would
# (Release, Ninja), quietly.
#   build_program SOURCE_DIR BUILD_DIR [CMAKE_ARGS...]
# Every project lives in a fresh temporary directory, so ccache (when present) takes paths
# relative to that directory: the same program built again in a later run, or in another
# checkout, is a cache hit, as the plain program always is and the migrated one is until
# accel-migrate's output changes.
# Warnings are errors in the programs we build: a migration that leaves a variable unused, or
# anything else a careful shop's -Werror build rejects, fails the test.
# shellcheck disable=SC2034
strict_flags=(-DCMAKE_CXX_FLAGS="-Wall -Wextra -Werror")

build_program() {
  local source=$1 build=$2
  shift 2
  local launcher=()
  if command -v ccache > /dev/null; then
    launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
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
