#!/usr/bin/env bash
# A compiler launcher (CMAKE_CXX_COMPILER_LAUNCHER) that compiles with a precompiled header
# included first: with_pch.sh HEADER COMPILER ARGS... (see torch_pch.sh).
set -euo pipefail
header=$1 compiler=$2
shift 2
exec "$compiler" -include "$header" "$@"
