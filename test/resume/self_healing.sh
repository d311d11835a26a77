#!/usr/bin/env bash
# Self-healing training, end to end: a job killed with SIGKILL at several points and restarted by
# `accel launch --max_restarts` ends bitwise equal to a job never interrupted: weights, AdamW
# state, and every logged loss. The kill points are drawn from a seeded generator whose seed is
# printed (set ACCEL_RESUME_TEST_SEED to replay one). Five kills per run, one per start, cycling
# through one rank, every rank, and rank 0 inside save_state.
#   self_healing.sh ACCEL WORKER PROCESSES
set -euo pipefail
accel=${1:?usage: self_healing.sh ACCEL WORKER PROCESSES}
worker=${2:?usage: self_healing.sh ACCEL WORKER PROCESSES}
processes=${3:?usage: self_healing.sh ACCEL WORKER PROCESSES}
seed=${ACCEL_RESUME_TEST_SEED:-$(( $(date +%s) % 100000 ))}
echo "kill points drawn with seed $seed (ACCEL_RESUME_TEST_SEED=$seed replays them)"
RANDOM=$seed
work=$(mktemp -d "${TMPDIR:-/tmp}/accel-self-healing.XXXXXX")
trap 'rm -rf "$work"' EXIT

# 96 samples, batches of 4, accumulation 2, 4 epochs: optimizer steps per process.
total=$(( 96 / 4 / processes / 2 * 4 ))
save_every=4

"$accel" launch --num_processes "$processes" "$worker" "$work/reference" 2> "$work/reference.log" ||
  { cat "$work/reference.log"; exit 1; }

# Five increasing kill steps in 1..total-1, one per start: each start resumes from a checkpoint at
# or before the previous kill, so it reaches the next one. A save kill needs a step that saves.
kills=()
step=0
kinds=("rank" "all" "save" "rank" "save")
for start in 0 1 2 3 4; do
  room=$(( total - 1 - step - (4 - start) * save_every ))
  next=$(( step + 1 + RANDOM % (room > 1 ? room : 1) ))
  kind=${kinds[$start]}
  case $kind in
    rank) who=$(( RANDOM % processes )) ;;
    all) who=all ;;
    save) next=$(( (next + save_every - 1) / save_every * save_every )); who=save ;;
  esac
  step=$next
  kills+=("$start:$step:$who")
done
echo "kills (start:optimizer step:who) of $total steps: ${kills[*]}"

set +e
"$accel" launch --num_processes "$processes" --max_restarts 5 --grace_period 2 \
  "$worker" "$work/killed" "${kills[@]}" 2> "$work/killed.log"
code=$?
set -e
grep -E "^start |accel launch: |finished at" "$work/killed.log" || true
[ $code -eq 0 ] || { echo "FAIL: the restarted job exited $code"; cat "$work/killed.log"; exit 1; }
[ "$(grep -c "restarting the group" "$work/killed.log")" -eq 5 ] ||
  { echo "FAIL: expected 5 restarts"; exit 1; }

for rank in $(seq 0 $((processes - 1))); do
  cmp "$work/reference/final_$rank.bin" "$work/killed/final_$rank.bin" ||
    { echo "FAIL: rank $rank's weights or optimizer state differ"; exit 1; }
done
# Every step's loss as the uninterrupted run logged it; steps replayed after a kill are logged
# again, and must repeat the same value.
python3 - "$work/reference/logs/resume/metrics.jsonl" "$work/killed/logs/resume/metrics.jsonl" \
  "$total" << 'PYTHON'
import json, sys
def losses(path):
    by_step = {}
    for line in open(path):
        record = json.loads(line)
        by_step.setdefault(record["step"], []).append(repr(record["values"]["loss"]))
    return by_step
reference, killed, total = losses(sys.argv[1]), losses(sys.argv[2]), int(sys.argv[3])
assert sorted(reference) == list(range(1, total + 1)), sorted(reference)
assert sorted(killed) == sorted(reference), (sorted(killed), sorted(reference))
for step, values in killed.items():
    assert all(v == reference[step][0] for v in values), (step, values, reference[step])
replayed = sum(len(v) - 1 for v in killed.values())
print(f"losses of {total} steps bitwise equal; {replayed} replayed after kills logged the same")
PYTHON
echo "self-healing on $processes process(es): ok"
