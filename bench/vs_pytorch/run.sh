#!/usr/bin/env bash
# accel beside PyTorch's own parallelism on one GPT job (see README.md): per layout, the losses,
# gradient norms and final weights of both (compare.py) and the step-time ratio, medians of
# interleaved runs. Builds accel_vs_pytorch in BUILD_DIR first (a tree with the tests or the
# benchmarks: either has the target).
#   bench/vs_pytorch/run.sh [BUILD_DIR [RUNS]]
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${1:-$root/build}
runs=${2:-3}
venv=$("$root/scripts/python-env.sh")
[ -f "$build/CMakeCache.txt" ] || cmake -S "$root" -B "$build" -G Ninja > /dev/null
cmake --build "$build" --target accel_vs_pytorch accel > /dev/null
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
job=(--steps 20)  # the job's shape (gpt.py's flags), the same on both sides
"$venv/bin/python" "$here/make_inputs.py" "$work/data" "${job[@]}"
# The one-process run the weights are judged against (compare.py --reference).
# A failed run shows its log (torchrun's output goes there, not to the table).
shown() { "$@" 2> "$work/last.log" || { cat "$work/last.log" >&2; return 1; }; }
shown "$venv/bin/python" -m torch.distributed.run --nproc_per_node 1 "$here/train_pytorch.py" \
  --layout plain --data "$work/data" --out "$work/plain" "${job[@]}"
# LAYOUT:PROCESSES (4 processes share this machine's 2 cores: their times say less).
for entry in fsdp:2 tp:2 tp_sp:2 pp:2 fsdp:4 tp_sp:4 pp:4 fsdp_tp:4; do
  layout=${entry%:*} processes=${entry#*:}
  ours=() theirs=()
  for run in $(seq "$runs"); do
    out=$work/$layout-$processes
    mkdir -p "$out/accel-$run" "$out/pytorch-$run"
    "$build/launcher/accel" launch --num_processes "$processes" \
      "$build/bench/vs_pytorch/accel_vs_pytorch" \
      --layout "$layout" --data "$work/data" --out "$out/accel-$run" "${job[@]}"
    shown "$venv/bin/python" -m torch.distributed.run --nproc_per_node "$processes" \
      "$here/train_pytorch.py" --layout "$layout" --data "$work/data" --out "$out/pytorch-$run" \
      "${job[@]}"
    ours+=("$out/accel-$run") theirs+=("$out/pytorch-$run")
  done
  "$venv/bin/python" "$here/compare.py" --layout "$layout, $processes processes" \
    --accel "${ours[@]}" --pytorch "${theirs[@]}" --reference "$work/plain" || status=1
done
exit "${status:-0}"
