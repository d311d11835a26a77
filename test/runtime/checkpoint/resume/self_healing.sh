#!/usr/bin/env bash
# Self-healing training, end to end: a job killed with SIGKILL at several points and restarted by
# `accel launch --max_restarts` ends bitwise equal to a job never interrupted: weights, AdamW
# state, and every logged loss. The kill points are drawn from a seeded generator whose seed is
# printed (set ACCEL_RESUME_TEST_SEED to replay one). Five kills per run, one per start, cycling
# through one rank, every rank, and rank 0 inside save_state.
# UNIT "optimizer" (the default) counts optimizer steps and saves between accumulation windows;
# "micro" counts micro-steps, saves every 5 from inside accumulate() and kills inside windows
# (see resume_worker.cpp). ACCEL_SHARDING_STRATEGY, when set, reaches the worker.
#   self_healing.sh ACCEL WORKER PROCESSES [UNIT]
set -euo pipefail
usage="usage: self_healing.sh ACCEL WORKER PROCESSES [optimizer|micro]"
accel=${1:?$usage}
worker=${2:?$usage}
processes=${3:?$usage}
unit=${4:-optimizer}
export RESUME_WORKER_UNIT=$unit
seed=${ACCEL_RESUME_TEST_SEED:-$(( $(date +%s) % 100000 ))}
echo "kill points drawn with seed $seed (ACCEL_RESUME_TEST_SEED=$seed replays them)"
RANDOM=$seed
work=$(mktemp -d "${TMPDIR:-/tmp}/accel-self-healing.XXXXXX")
trap 'rm -rf "$work"' EXIT

# 96 samples, batches of 4, 4 epochs: micro-steps per process; optimizer steps with accumulation 2.
if [ "$unit" = micro ]; then
  total=$(( 96 / 4 / processes * 4 ))
  save_every=5
  accumulation=3  # resume_worker's in this mode
else
  total=$(( 96 / 4 / processes / 2 * 4 ))
  save_every=4
fi

"$accel" launch --num_processes "$processes" "$worker" "$work/reference" 2> "$work/reference.log" ||
  { cat "$work/reference.log"; exit 1; }

# Five increasing kill steps in 1..total, one per start: each start resumes from a checkpoint at
# or before the previous kill, so it reaches the next one. A save kill needs a step that saves.
kills=()
step=0
kinds=("rank" "all" "save" "rank" "save")
for start in 0 1 2 3 4; do
  kind=${kinds[$start]}
  case $kind in
    rank) who=$(( RANDOM % processes )) ;;
    all) who=all ;;
    save) who=save ;;
  esac
  if [ "$unit" = micro ]; then
    # Any step after the last kill that leaves one save interval to each later kill; a rank's
    # kill inside a window (not on its synchronising micro-step), a save kill on a save.
    candidates=()
    for s in $(seq $(( step + 1 )) $(( total - (4 - start) * save_every ))); do
      if [ "$kind" = save ]; then
        [ $(( s % save_every )) -eq 0 ] && candidates+=("$s")
      elif [ $(( s % accumulation )) -ne 0 ] && [ "$s" -lt "$total" ]; then
        candidates+=("$s")
      fi
    done
    next=${candidates[$(( RANDOM % ${#candidates[@]} ))]}
  else
    room=$(( total - 1 - step - (4 - start) * save_every ))
    next=$(( step + 1 + RANDOM % (room > 1 ? room : 1) ))
    [ "$kind" = save ] && next=$(( (next + save_every - 1) / save_every * save_every ))
  fi
  step=$next
  kills+=("$start:$step:$who")
done
echo "kills (start:$unit step:who) of $total steps (${ACCEL_SHARDING_STRATEGY:-NO_SHARD}): ${kills[*]}"

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
python3 "$(dirname "${BASH_SOURCE[0]}")/compare_losses.py" \
  "$work/reference/logs/resume/metrics.jsonl" "$work/killed/logs/resume/metrics.jsonl" "$total"
echo "self-healing on $processes process(es), counting ${unit} steps: ok"
