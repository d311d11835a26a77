#!/usr/bin/env bash
# accel beside PyTorch's own parallelism on one GPT job (see README.md): per layout, the losses,
# gradient norms and final weights of both (compare.py) and the step-time ratio, medians of
# interleaved runs. Builds accel_vs_pytorch in BUILD_DIR first (benchmarks on).
#   bench/vs_pytorch/run.sh [BUILD_DIR [RUNS]]
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${1:-$root/build}
runs=${2:-3}
venv=$("$root/scripts/python-env.sh")
cmake -S "$root" -B "$build" -DACCEL_BUILD_BENCHMARKS=ON > /dev/null
cmake --build "$build" --target accel_vs_pytorch accel > /dev/null
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
job=(--steps 10)  # the job's shape (gpt.py's flags), the same on both sides
"$venv/bin/python" "$here/make_inputs.py" "$work/data" "${job[@]}"
# The one-process run the weights are judged against (compare.py --reference).
# A failed run shows its log (torchrun's output goes there, not to the table).
shown() { "$@" 2> "$work/last.log" || { cat "$work/last.log" >&2; return 1; }; }
shown "$venv/bin/python" -m torch.distributed.run --nproc_per_node 1 "$here/train_pytorch.py" \
  --layout plain --data "$work/data" --out "$work/plain" "${job[@]}"
for layout in fsdp; do
  ours=() theirs=()
  for run in $(seq "$runs"); do
    mkdir -p "$work/$layout/accel-$run" "$work/$layout/pytorch-$run"
    "$build/launcher/accel" launch --num_processes 2 "$build/bench/accel_vs_pytorch" \
      --layout "$layout" --data "$work/data" --out "$work/$layout/accel-$run" "${job[@]}"
    shown "$venv/bin/python" -m torch.distributed.run --nproc_per_node 2 "$here/train_pytorch.py" \
      --layout "$layout" --data "$work/data" --out "$work/$layout/pytorch-$run" "${job[@]}"
    ours+=("$work/$layout/accel-$run") theirs+=("$work/$layout/pytorch-$run")
  done
  "$venv/bin/python" "$here/compare.py" --layout "$layout" --accel "${ours[@]}" \
    --pytorch "${theirs[@]}" --reference "$work/plain" || status=1
done
exit "${status:-0}"
