#!/usr/bin/env bash
# accel-migrate on public LibTorch programs as their authors wrote them: each entry of
# test/rewriter/e2e/real/*.conf names a repository, a commit and the program's files there. The
# program is taken from the session's mirror of the repository (/work/.mirror/OWNER+NAME/repo, as
# the tool library's fetch makes it; their code is not ours to commit, so CI, which has no
# network, does not run this), given a CMake project and its synthetic data, and then goes
# through migrate_corpus.sh as the corpus written here does: built plain and migrated (-Wall
# -Wextra, no new warnings), one migrated process printing exactly what the plain program
# printed with default options, two processes finishing with the metrics within the entry's
# tolerance and their weights equal after every optimizer step (ACCEL_DEBUG=1's hash check), and,
# for an entry with split=1, two processes with split batches printing the one-process metrics.
# The only changes to a program are the entry's `shrink` edits (less data, fewer epochs).
#   real_corpus.sh BUILD_DIR [ENTRY...]      (default: every entry)
# Prints a table: entry, repository, shape, result.
set -euo pipefail
build_dir=$(cd "$1" && pwd)
shift
source_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
here="$source_dir/test/rewriter/e2e"
mirrors=${ACCEL_MIRRORS:-/work/.mirror}
python="$("$source_dir/scripts/python-env.sh")/bin/python"
# The plain programs find LibTorch as a user points at it, as ctest's corpus tests do.
export CMAKE_PREFIX_PATH=${CMAKE_PREFIX_PATH:-$("$source_dir/scripts/python-env.sh" --torch-dir)}
entries=("$@")
if [ ${#entries[@]} -eq 0 ]; then
  for conf in "$here"/real/*.conf; do entries+=("$(basename "$conf" .conf)"); done
fi

# REAL_CORPUS_KEEP=DIR: the programs, their builds and runs are made there and kept (to read a
# failure's migration and logs); otherwise in a temporary folder removed at the end.
if [ -n "${REAL_CORPUS_KEEP:-}" ]; then
  mkdir -p "$REAL_CORPUS_KEEP"
  root=$(cd "$REAL_CORPUS_KEEP" && pwd)
else
  root=$(mktemp -d)
  trap 'rm -rf "$root"' EXIT
fi
results=()
for entry in "${entries[@]}"; do
  repo= commit= files=() binary= sources= cmake_sources= includes= shrink=() data= rundir=.
  once=() values=() shape= split= args=() packages=() deps=() refused= refused_warning= ignore= mask= setup_extra= split_values=() definitions= cxxflags= harness_files=() launch_env=() libraries=
  # shellcheck source=/dev/null
  source "$here/real/$entry.conf"
  mirror="$mirrors/${repo/\//+}/repo"
  if [ ! -d "$mirror" ]; then
    results+=("| $entry | $repo | $shape | not run: no mirror at $mirror (fetch github:$repo) |")
    continue
  fi
  # packages: NAME:PATH, a Debian package the program needs (Eigen) and a file it installs;
  # installed here when missing, as scripts/install-deps.sh installs the project's.
  missing_packages() {
    missing=()
    for package in "${packages[@]}"; do
      [ -e "${package#*:}" ] || missing+=("${package%%:*}")
    done
  }
  missing_packages
  if [ ${#missing[@]} -gt 0 ]; then
    sudo=$([ "$(id -u)" -eq 0 ] || echo sudo)
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends \
      "${missing[@]}" > /dev/null 2>&1 || true
    missing_packages
  fi
  if [ ${#missing[@]} -gt 0 ]; then
    results+=("| $entry | $repo | $shape | not run: apt-get could not install ${missing[*]} |")
    continue
  fi
  program="$root/$entry"
  mkdir -p "$program"
  # deps: OWNER/NAME@COMMIT:PATH=DEST, a file of another repository (a git submodule's).
  for dep in "${deps[@]}"; do
    dep_repo=${dep%%@*} rest=${dep#*@}
    dep_commit=${rest%%:*} rest=${rest#*:}
    dep_mirror="$mirrors/${dep_repo/\//+}/repo"
    if [ ! -d "$dep_mirror" ]; then
      echo "real_corpus: $entry needs a mirror of $dep_repo (fetch github:$dep_repo)" >&2; exit 1
    fi
    mkdir -p "$(dirname "$program/${rest#*=}")"
    git --git-dir="$dep_mirror" show "$dep_commit:${rest%%=*}" > "$program/${rest#*=}"
  done
  for file in "${files[@]}"; do
    from=${file%%=*} to=${file#*=}
    mkdir -p "$(dirname "$program/$to")"
    git --git-dir="$mirror" show "$commit:$from" > "$program/$to"
  done
  # harness_files: FILE=DEST, a file of real/ standing in for one a program's build downloads
  # (a newer header than Debian's package has).
  for file in "${harness_files[@]}"; do
    mkdir -p "$(dirname "$program/${file#*=}")"
    cp "$here/real/${file%%=*}" "$program/${file#*=}"
  done
  for edit in "${shrink[@]}"; do
    file=${edit%%|*} expression=${edit#*|}
    sed -i -E "$expression" "$program/$file"
  done
  # LibTorch seeds its default CPU generator from the system's entropy: an unseeded program (most
  # of the tutorials) prints other numbers on every run, the plain program too. Both builds get
  # this one source of the harness's, which fixes the seed before main; the program is unchanged
  # (accel-migrate does not see the file). Two processes then start from the same stream too.
  cat > "$program/corpus_seed.cpp" <<'SEED'
// real_corpus.sh's, not the program's: the default CPU generator seeded before main, so that
// the plain and the migrated program can be compared number for number.
#include <ATen/CPUGeneratorImpl.h>

#include <mutex>

namespace {
const bool seeded = [] {
  auto generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_current_seed(20201127);
  return true;
}();
}  // namespace
SEED
  cat > "$program/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.18)
project($binary CXX)
set(CMAKE_CXX_STANDARD 17)
add_executable($binary $cmake_sources corpus_seed.cpp)
target_include_directories($binary PRIVATE . $includes)
target_compile_definitions($binary PRIVATE $definitions)
target_link_libraries($binary PRIVATE $libraries)
find_package(accel QUIET)
if (accel_FOUND)
  target_link_libraries($binary PRIVATE accel::accel)
else ()
  find_package(Torch REQUIRED)
  target_link_libraries($binary PRIVATE "\${TORCH_LIBRARIES}")
endif ()
CMAKE
  setup=
  case "$data" in
    mnist:*) setup="\"$python\" \"$here/real/make_mnist.py\" \"${data#mnist:}\"" ;;
    py:*) setup="\"$python\" \"$here/real/\"${data#py:}" ;;
    '') ;;
    *) echo "real_corpus: $entry: unknown data '$data'" >&2; exit 1 ;;
  esac
  # @PROGRAM@ in setup_extra: the program's folder (a configuration file it reads where it runs).
  setup_extra=${setup_extra//@PROGRAM@/\"$program\"}
  if [ -n "$setup_extra" ]; then setup="${setup:+$setup && }$setup_extra"; fi
  {
    echo "binary=$binary"
    printf 'sources=%q\n' "$sources"
    printf 'rundir=%q\n' "$rundir"
    printf 'setup=%q\n' "$setup"
    echo "warnings=new"
    echo "checked=1"
    # cxxflags: what a program written against older standard headers needs to build here
    # (-include fstream), for both builds and the migration's parse.
    printf 'cxxflags=%q\n' "$cxxflags"
    printf 'split=%q\n' "$split"
    printf 'refused=%q\n' "$refused"
    printf 'refused_warning=%q\n' "$refused_warning"
    printf 'ignore=%q\n' "$ignore"
    printf 'mask=%q\n' "$mask"
    printf 'split_values=('; [ ${#split_values[@]} -eq 0 ] || printf '%q ' "${split_values[@]}"
    echo ')'
    printf 'args=('; [ ${#args[@]} -eq 0 ] || printf '%q ' "${args[@]}"; echo ')'
    printf 'launch_env=('; [ ${#launch_env[@]} -eq 0 ] || printf '%q ' "${launch_env[@]}"; echo ')'
    # (an empty array would print as one empty pattern)
    printf 'once=('; [ ${#once[@]} -eq 0 ] || printf '%q ' "${once[@]}"; echo ')'
    printf 'values=('; [ ${#values[@]} -eq 0 ] || printf '%q ' "${values[@]}"; echo ')'
  } > "$program/corpus.conf"
  log="$root/$entry.log"
  start=$SECONDS
  if ACCEL_CORPUS_ROOT="$root" "$here/migrate_corpus.sh" "$build_dir" "$source_dir" "$entry" \
    > "$log" 2>&1; then
    outcome=passed
  else
    outcome="FAILED: $(grep -avE '^\s*$' "$log" | tail -1)"
    cp "$log" "${TMPDIR:-/tmp}/real-corpus-$entry.log"
  fi
  changes=$(grep -aoE '^migration: [0-9]+ file\(s\), [0-9]+ changes, [0-9]+ warnings' "$log" |
    sed 's/^migration: //' || true)
  results+=("| $entry | $repo@${commit:0:7} | $shape | $changes | $outcome ($((SECONDS - start)) s) |")
  echo "${results[-1]}"
done
echo
echo "| program | repository | shape | migration | result |"
echo "|---|---|---|---|---|"
printf '%s\n' "${results[@]}"
! printf '%s\n' "${results[@]}" | grep -q "FAILED"
