#!/usr/bin/env bash
# accelerate_fsdp_configs.py under the project's Python environment (Accelerate 1.15 in it).
#   accelerate_fsdp_configs.sh ACCEL_CLI
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
python=$("$here/../../scripts/python-env.sh")/bin/python
PYTHONWARNINGS=ignore exec "$python" "$here/accelerate_fsdp_configs.py" "${1:?usage: accelerate_fsdp_configs.sh ACCEL_CLI}"
