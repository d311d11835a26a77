#!/usr/bin/env bash
# accel side by side with Python Accelerate (ctest label `peer`): the job trained by both on 1 and
# 2 processes gives the same numbers (default sharding, split_batches, even_batches=false); a
# config written by `accelerate config default` drives `accel launch` to the same run; checkpoints
# cross over both ways; big-model planning gives equal maps; fused optimizer steps on the CPU are
# bitwise LibTorch's own step (PyTorch's fused=True, which rounds otherwise, is reported).
#   peer_test.sh BUILD_DIR
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=$(cd "${1:?usage: peer_test.sh BUILD_DIR}" && pwd)
venv=$("$here/../../scripts/python-env.sh")
python=$venv/bin/python
accelerate=$venv/bin/accelerate
accel=$build/launcher/accel
bin=$build/bench/vs_accelerate
work=$(mktemp -d "${TMPDIR:-/tmp}/accel-peer.XXXXXX")
trap 'rm -rf "$work"' EXIT
export PYTHONPATH=$here PYTHONWARNINGS=ignore

"$python" "$here/make_inputs.py" "$work/data"

# Accelerate runs several CPU processes through its torchrun-based launcher (--multi_gpu): with
# --cpu it starts one process whatever --num_processes says. Its launch warnings go to a log.
accelerate_once() {  # NAME PROCESSES ARGS...
  local name=$1 processes=$2 mode=(--multi_gpu)
  shift 2
  [ "$processes" = 1 ] && mode=(--cpu)
  # torchrun's default port, 29500, may be taken by another test running beside this one.
  local port
  port=$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  "$accelerate" launch "${mode[@]}" --num_processes "$processes" --num_machines 1 \
    --main_process_port "$port" --mixed_precision no --dynamo_backend no \
    "$here/train_accelerate.py" \
    --data "$work/data" --out "$work/accelerate_$name" "$@" 2> "$work/accelerate_$name.log"
}
accelerate_run() {  # NAME PROCESSES ARGS...
  # The reference run is PyTorch's; once, loaded by the tests beside it, one of its processes
  # aborted at start ("terminate called without an active exception") before training a step.
  # Such a crash of the reference is retried once, and said; a second one fails the test.
  accelerate_once "$@" && return 0
  echo "peer: the Accelerate run '$1' failed; its log ends with:" >&2
  tail -5 "$work/accelerate_$1.log" >&2
  echo "peer: running it again once" >&2
  rm -rf "$work/accelerate_$1"
  accelerate_once "$@" || { cat "$work/accelerate_$1.log" >&2; return 1; }
}
accel_run() {  # NAME PROCESSES ARGS...
  local name=$1 processes=$2
  shift 2
  "$accel" launch --num_processes "$processes" "$bin/accel_vs_train" \
    --data "$work/data" --out "$work/accel_$name" "$@"
}
same_job() {  # NAME PROCESSES ARGS...
  echo "peer: the job, $1 ($2 process(es)) ${*:3}"
  accelerate_run "$@"
  accel_run "$@"
  "$python" "$here/compare_runs.py" "$work/accelerate_$1" "$work/accel_$1"
}

same_job one 1
same_job two 2
same_job split 2 --split_batches --batch_size 16
# even_batches=false: 50 evaluation samples in batches of 8 give one process 4 batches, the other 3.
same_job uneven 2 --uneven

# accel's fused AdamW step against Accelerate's per-parameter one agrees as its own per-parameter
# step does (LibTorch's, ACCEL_FUSED_OPTIMIZER=0); on the CPU the two are the same arithmetic.
echo "peer: the job, two (2 process(es)), LibTorch's own optimizer step"
ACCEL_FUSED_OPTIMIZER=0 accel_run unfused 2
"$python" "$here/compare_runs.py" "$work/accelerate_two" "$work/accel_unfused"
# And fused against unfused directly, both accel on 2 processes: the same (the fused step on the
# CPU is LibTorch's rounding; they were 6e-8 apart when it was ATen's fused kernel).
"$python" "$here/compare_runs.py" "$work/accel_two" "$work/accel_unfused"

# The comparison can fail: runs with different settings must not pass as equal.
if "$python" "$here/compare_runs.py" "$work/accelerate_two" "$work/accel_split" > /dev/null; then
  echo "peer: compare_runs.py found two different runs equal" >&2
  exit 1
fi

echo "peer: a config from 'accelerate config default', made 2-process, drives accel launch"
"$accelerate" config default --config_file "$work/accelerate_config.yaml" > /dev/null
"$python" - "$work/accelerate_config.yaml" <<'PY'
import json, sys
path = sys.argv[1]
with open(path) as f:
    config = json.load(f)  # Accelerate writes JSON, which is also YAML
config.update(num_processes=2, distributed_type="MULTI_CPU")
with open(path, "w") as f:
    json.dump(config, f, indent=2)
PY
"$accel" launch --config_file "$work/accelerate_config.yaml" "$bin/accel_vs_train" \
  --data "$work/data" --out "$work/accel_from_config"
"$python" "$here/compare_runs.py" "$work/accelerate_two" "$work/accel_from_config"

echo "peer: checkpoints cross over"
"$python" "$here/crossover.py" --bin "$bin/accel_vs_checkpoint" --work "$work/crossover"
echo "peer: big-model planning"
"$python" "$here/plan.py" --bin "$bin/accel_vs_plan" --work "$work/plan"
echo "peer: fused optimizer steps against LibTorch's own step and PyTorch's fused=True"
"$python" "$here/fused_vs_pytorch.py" --bin "$bin/accel_vs_fused" --work "$work/fused"
echo "peer: accel and Accelerate agree"
