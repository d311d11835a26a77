#!/usr/bin/env bash
# Self-healing across machines: one job of 2 machines x 2 processes (two `accel launch
# --num_machines 2` on this host, meeting on loopback), restarted by --max_restarts.
#   1. A rank of machine 1 is killed with SIGKILL, then (on the next start) every rank of machine
#      0. Both launchers restart their groups together and the job ends bitwise equal to an
#      uninterrupted 2 x 2 run: weights, AdamW state, every logged loss.
#   2. With --max_restarts 1 and a rank of machine 1 killed on both starts, machine 0's launcher
#      gives up, and machine 1's gives up with it, both naming the cause, long before a
#      collective would time out.
#   self_healing_two_machines.sh ACCEL WORKER
set -euo pipefail
accel=${1:?usage: self_healing_two_machines.sh ACCEL WORKER}
worker=${2:?usage: self_healing_two_machines.sh ACCEL WORKER}
work=$(mktemp -d "${TMPDIR:-/tmp}/accel-two-machines.XXXXXX")
trap 'rm -rf "$work"' EXIT

free_port() {
  for _ in $(seq 50); do
    local candidate=$((20000 + RANDOM % 12000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$candidate") 2>/dev/null; then
      echo "$candidate"
      return
    fi
  done
  echo "no free port" >&2
  exit 1
}

# job NAME RESTARTS [KILLS...]: both machines' launchers; their exit codes in NAME.codes.
job() {
  local name=$1 restarts=$2 port
  shift 2
  port=$(free_port)
  for machine in 0 1; do
    "$accel" launch --num_processes 4 --num_machines 2 --machine_rank "$machine" \
      --main_process_ip 127.0.0.1 --main_process_port "$port" --grace_period 2 \
      --max_restarts "$restarts" "$worker" "$work/$name" "$@" 2> "$work/$name.$machine.log" &
    eval "pid_$machine=\$!"
  done
  local codes=""
  for machine in 0 1; do
    eval "pid=\$pid_$machine"
    set +e
    wait "$pid"
    codes="$codes $?"
    set -e
  done
  echo "$codes" > "$work/$name.codes"
}

job reference 0
[ "$(cat "$work/reference.codes")" = " 0 0" ] ||
  { cat "$work/reference.0.log" "$work/reference.1.log"; echo "FAIL: the reference run failed"; exit 1; }

# 96 samples, batches of 4 on 4 processes, accumulation 2, 4 epochs: 12 optimizer steps; saves
# every 4. Rank 3 (machine 1) dies at step 5 of the first start; every rank of machine 0 at step
# 10 of the second.
start=$SECONDS
job killed 3 0:5:3 1:10:machine0
grep -hE "^start |accel launch: |finished at" "$work/killed.0.log" "$work/killed.1.log" || true
[ "$(cat "$work/killed.codes")" = " 0 0" ] ||
  { cat "$work/killed.0.log" "$work/killed.1.log"; echo "FAIL: the restarted job failed"; exit 1; }
for machine in 0 1; do
  restarts=$(grep -c "restarting the group on every machine" "$work/killed.$machine.log" || true)
  [ "$restarts" -eq 2 ] || { echo "FAIL: machine $machine restarted $restarts times, not 2"; exit 1; }
done
for rank in 0 1 2 3; do
  cmp "$work/reference/final_$rank.bin" "$work/killed/final_$rank.bin" ||
    { echo "FAIL: rank $rank's weights or optimizer state differ"; exit 1; }
done
python3 "$(dirname "${BASH_SOURCE[0]}")/compare_losses.py" \
  "$work/reference/logs/resume/metrics.jsonl" "$work/killed/logs/resume/metrics.jsonl" 12
echo "killed on machine 1, then on all of machine 0: restarted together, bitwise equal ($((SECONDS - start)) s)"

# Giving up: rank 3 dies on both starts; one restart allowed.
start=$SECONDS
job gives_up 1 0:5:3 1:6:3
elapsed=$((SECONDS - start))
codes=$(cat "$work/gives_up.codes")
[ "$codes" = " 137 137" ] ||
  { cat "$work/gives_up.0.log" "$work/gives_up.1.log"; echo "FAIL: exit codes$codes, not 137 137"; exit 1; }
for machine in 0 1; do
  grep -q "giving up after 1 restart; the last failure: machine 1: rank 3 (pid [0-9]*) was killed by signal 9 (SIGKILL)" \
    "$work/gives_up.$machine.log" ||
    { cat "$work/gives_up.$machine.log"; echo "FAIL: machine $machine did not name the cause"; exit 1; }
done
[ "$elapsed" -lt "${ACCEL_TIMEOUT:-30}" ] ||
  { echo "FAIL: giving up took $elapsed s, as long as a collective timeout"; exit 1; }
echo "a machine that gives up takes the other with it, naming the cause ($elapsed s)"
