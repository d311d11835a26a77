#!/usr/bin/env bash
# Prints the speed table of accel against Python Accelerate (see speed.py): step time, time to the
# first step and peak memory, small and large model, 1 and 2 processes, interleaved runs.
#   bench/vs_accelerate/run.sh [BUILD_DIR [REPS]]
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=${1:-$here/../../build}
venv=$("$here/../../scripts/python-env.sh")
exec "$venv/bin/python" "$here/speed.py" --build "$build" --reps "${2:-3}"
