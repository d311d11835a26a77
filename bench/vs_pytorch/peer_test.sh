#!/usr/bin/env bash
# accel beside PyTorch's own parallelism, the numbers (ctest peer.vs_pytorch; run.sh times them):
# the job of train_accel.cpp and train_pytorch.py on 2 processes, per layout (FULL_SHARD against
# fully_shard, tp and tp with sequence parallelism against parallelize_module, pp 1F1B against
# Schedule1F1B), gives every step's loss and gradient norm and the final weights within 1e-5.
# With SGD, which moves each weight by its gradient: AdamW moves a weight whose gradient is
# rounding noise (the key projection's bias, a dead unit's row) by about its learning rate
# whichever way the noise falls, so its weights part between any two reduction orders
# (compare.py's docstring); the AdamW job is checked once as run.sh checks it, against one
# process. Both sides start under `accel launch`, which sets torchrun's environment.
#   peer_test.sh BUILD_DIR
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=$(cd "${1:?usage: peer_test.sh BUILD_DIR}" && pwd)
python=$("$here/../../scripts/python-env.sh")/bin/python
accel=$build/launcher/accel
work=$(mktemp -d "${TMPDIR:-/tmp}/accel-peer-pytorch.XXXXXX")
trap 'rm -rf "$work"' EXIT
export PYTHONWARNINGS=ignore
job=(--steps 3)
sgd=(--optimizer sgd --lr 0.05)
"$python" "$here/make_inputs.py" "$work/data" "${job[@]}"

run() {  # SIDE NAME PROCESSES ARGS...: SIDE accel or pytorch, into $work/SIDE-NAME
  local side=$1 name=$2 processes=$3
  shift 3
  local program=("$build/bench/vs_pytorch/accel_vs_pytorch")
  [ "$side" = pytorch ] && program=("$python" "$here/train_pytorch.py")
  mkdir -p "$work/$side-$name"
  "$accel" launch --num_processes "$processes" "${program[@]}" --data "$work/data" \
    --out "$work/$side-$name" "${job[@]}" "$@" 2> "$work/$side-$name.log" ||
    { cat "$work/$side-$name.log" >&2; echo "peer: the $side run $name failed" >&2; return 1; }
}

for layout in fsdp tp tp_sp pp; do
  echo "peer: $layout, SGD"
  run accel "$layout" 2 --layout "$layout" "${sgd[@]}"
  run pytorch "$layout" 2 --layout "$layout" "${sgd[@]}"
  "$python" "$here/compare.py" --layout "$layout" --accel "$work/accel-$layout" \
    --pytorch "$work/pytorch-$layout"
done

echo "peer: tp_sp, AdamW (the weights judged against one process)"
run pytorch plain 1 --layout plain
run accel adamw 2 --layout tp_sp
run pytorch adamw 2 --layout tp_sp
"$python" "$here/compare.py" --layout tp_sp --accel "$work/accel-adamw" \
  --pytorch "$work/pytorch-adamw" --reference "$work/pytorch-plain"

# The comparison can fail: two different jobs must not pass as equal.
if "$python" "$here/compare.py" --accel "$work/accel-tp_sp" --pytorch "$work/pytorch-adamw" \
  > /dev/null; then
  echo "peer: compare.py found the SGD and the AdamW job equal" >&2
  exit 1
fi
echo "peer: accel and PyTorch's parallelism agree"
