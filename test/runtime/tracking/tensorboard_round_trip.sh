#!/usr/bin/env bash
# The TensorBoard tracker's files, read back by TensorBoard's own reader (the `tensorboard`
# package in the project's Python environment; see read_events.py).
#   tensorboard_round_trip.sh WRITER
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
writer=${1:?usage: tensorboard_round_trip.sh WRITER}
python=$("$here/../../../scripts/python-env.sh")/bin/python
work=$(mktemp -d "${TMPDIR:-/tmp}/accel-tensorboard.XXXXXX")
trap 'rm -rf "$work"' EXIT
read -r before after < <("$writer" "$work")
PYTHONWARNINGS=ignore "$python" "$here/read_events.py" "$work" "$before" "$after"
