#!/usr/bin/env bash
# The project's Python environment: the pinned `torch` wheel (its LibTorch is what accel builds
# against), Python Accelerate (the reference for behaviour and speed) and TensorBoard (whose reader
# checks the tracker's event files), in a virtual environment keyed by the pinned torch and
# Accelerate, so a second checkout neither downloads nor unpacks them again.
#
#   scripts/python-env.sh              prints the environment's folder
#   scripts/python-env.sh --install    creates it if it is missing or incomplete, then prints it
#   scripts/python-env.sh --torch-dir  prints the LibTorch root inside it (.../site-packages/torch)
#   scripts/python-env.sh --mlflow     creates MLflow's own environment if it is missing (the
#                                      tracking server and client the MLflow tracker is tested
#                                      against, kept apart: its pins would move torch's), prints it
#
# ACCEL_VENV overrides the folder; the default is $XDG_CACHE_HOME/accel (else ~/.cache/accel).
set -euo pipefail

torch_version=2.11.0
accelerate_version=1.15.0
tensorboard_version=2.20.0
cache=${XDG_CACHE_HOME:-$HOME/.cache}/accel
venv=${ACCEL_VENV:-$cache/venv-torch-$torch_version-accelerate-$accelerate_version}
marker="$venv/.accel-complete"

mlflow_version=3.17.2
mlflow_venv=${ACCEL_MLFLOW_VENV:-$cache/venv-mlflow-$mlflow_version}

pins="torch==$torch_version accelerate==$accelerate_version tensorboard==$tensorboard_version"

install() {
  if [ -f "$marker" ]; then
    grep -qxF "$pins" "$marker" && return 0
    # An environment from before a pin was added or changed: only what differs is installed.
    echo "python-env: updating $venv to $pins" >&2
    "$venv/bin/pip" install -q --disable-pip-version-check "tensorboard==$tensorboard_version" >&2
    echo "$pins" > "$marker"
    return 0
  fi
  echo "python-env: creating $venv ($pins)" >&2
  rm -rf "$venv"
  mkdir -p "$(dirname "$venv")"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check --upgrade pip >&2
  "$venv/bin/pip" install -q --disable-pip-version-check \
    "torch==$torch_version" "accelerate==$accelerate_version" \
    "tensorboard==$tensorboard_version" safetensors numpy >&2
  # The marker is written last, so an interrupted install is redone rather than half reused.
  echo "$pins" > "$marker"
}

install_mlflow() {
  [ -f "$mlflow_venv/.accel-complete" ] && return 0
  echo "python-env: creating $mlflow_venv (mlflow[auth]==$mlflow_version)" >&2
  rm -rf "$mlflow_venv"
  mkdir -p "$(dirname "$mlflow_venv")"
  python3 -m venv "$mlflow_venv"
  "$mlflow_venv/bin/pip" install -q --disable-pip-version-check "mlflow[auth]==$mlflow_version" >&2
  touch "$mlflow_venv/.accel-complete"
}

case "${1:-}" in
  --install) install; echo "$venv" ;;
  --mlflow) install_mlflow; echo "$mlflow_venv" ;;
  --torch-dir)
    [ -f "$marker" ] || { echo "python-env: $venv is not installed; run scripts/install-deps.sh" >&2; exit 1; }
    for dir in "$venv"/lib/python3*/site-packages/torch; do echo "$dir"; done ;;
  "") echo "$venv" ;;
  *) echo "usage: $0 [--install | --torch-dir | --mlflow]" >&2; exit 2 ;;
esac
