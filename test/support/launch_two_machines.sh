#!/usr/bin/env bash
# Usage: launch_two_machines.sh ACCEL PROCESSES PROGRAM [ARGS...]
#
# Runs PROGRAM as one job of PROCESSES processes on two "machines" of this host: two
# `accel launch --num_machines 2`, machine ranks 0 and 1, meeting at a free loopback port. This is
# how the runtime sees a two-machine job (LOCAL_WORLD_SIZE = PROCESSES / 2, GROUP_RANK 0 or 1)
# without a second machine. Fails when either launcher fails.
set -u
if [ $# -lt 3 ]; then
  echo "usage: $0 ACCEL PROCESSES PROGRAM [ARGS...]" >&2
  exit 2
fi
accel=$1
processes=$2
shift 2

# A port nothing listens on (a connection to it is refused), from a range clear of the
# ephemeral ports the kernel hands out.
port=
for _ in $(seq 50); do
  candidate=$((20000 + RANDOM % 12000))
  if ! (exec 3<>"/dev/tcp/127.0.0.1/$candidate") 2>/dev/null; then
    port=$candidate
    break
  fi
done
if [ -z "$port" ]; then
  echo "$0: found no free port" >&2
  exit 1
fi

launch() {
  "$accel" launch --num_processes "$processes" --num_machines 2 --machine_rank "$1" \
    --main_process_ip 127.0.0.1 --main_process_port "$port" --grace_period 2 "${@:2}"
}

launch 0 "$@" &
first=$!
launch 1 "$@"
second=$?
wait "$first"
first_status=$?
if [ "$first_status" -ne 0 ] || [ "$second" -ne 0 ]; then
  echo "$0: machine 0 exited $first_status, machine 1 exited $second" >&2
  exit 1
fi
