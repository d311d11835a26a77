#!/usr/bin/env bash
# The MLflow tracker against a real MLflow tracking server (sqlite store, basic authentication),
# started here on 127.0.0.1, and read back with MLflow's own Python client (read_mlflow.py).
# MLflow lives in its own environment, made by scripts/python-env.sh --mlflow when missing.
#   mlflow_round_trip.sh LAUNCHER WRITER
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
launcher=${1:?usage: mlflow_round_trip.sh LAUNCHER WRITER}
writer=${2:?usage: mlflow_round_trip.sh LAUNCHER WRITER}
venv=$("$here/../../../scripts/python-env.sh" --mlflow)
work=$(mktemp -d "${TMPDIR:-/tmp}/accel-mlflow.XXXXXX")
server=""
cleanup() {
  [ -n "$server" ] && kill "$server" 2> /dev/null && wait "$server" 2> /dev/null
  [ -n "${ACCEL_KEEP:-}" ] && echo "kept $work" >&2 || rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
fail() {
  echo "mlflow_round_trip: $*" >&2
  exit 1
}
# `expect_in FILE TEXT`: the program's messages hold TEXT.
expect_in() { grep -qF -- "$2" "$1" || { cat "$1" >&2; fail "expected '$2' in $1"; }; }

port=$(free_port)
password="accel-test-password-1"
cd "$work"
MLFLOW_AUTH_ADMIN_PASSWORD=$password MLFLOW_FLASK_SERVER_SECRET_KEY=accel-test \
  "$venv/bin/mlflow" server --app-name basic-auth \
  --backend-store-uri "sqlite:///$work/mlflow.db" --default-artifact-root "$work/artifacts" \
  --host 127.0.0.1 --port "$port" --workers 1 > "$work/server.log" 2>&1 &
server=$!
export MLFLOW_TRACKING_URI="http://127.0.0.1:$port"
for _ in $(seq 1 240); do
  python3 -c "import urllib.request; urllib.request.urlopen('$MLFLOW_TRACKING_URI/health', timeout=1)" \
    2> /dev/null && break
  kill -0 "$server" 2> /dev/null || { cat "$work/server.log" >&2; fail "mlflow server exited"; }
  sleep 0.5
done
export MLFLOW_TRACKING_USERNAME=admin MLFLOW_TRACKING_PASSWORD=$password
read_back() { PYTHONWARNINGS=ignore "$venv/bin/python" "$here/read_mlflow.py" "$@"; }

# 1. Two processes, the main one killed after step 3 and the group restarted: one run, steps
#    0..7 once each, finished.
ACCEL_TIMEOUT=60 "$launcher" launch --num_processes 2 --max_restarts 1 "$writer" 8 3 0.001 \
  > "$work/restarted.out" 2>&1 || { cat "$work/restarted.out" >&2; fail "the restarted run failed"; }
expect_in "$work/restarted.out" "restart"
expect_in "$work/restarted.out" "accel: mlflow: 'phase' is text"
expect_in "$work/restarted.out" "accel: mlflow: metric 'bad=name' is left out: it holds '='"
expect_in "$work/restarted.out" "the value of param 'too_long' is 7000 characters"
run_id=$(read_back restarted accel-mlflow 8)
echo "restarted run $run_id: steps 0..7 once each, FINISHED"

# 2. A new launch is a new run; MLFLOW_EXPERIMENT_NAME chooses the experiment.
MLFLOW_EXPERIMENT_NAME=accel-mlflow-other "$writer" 2 -1 0.001 > "$work/other.out" 2>&1 ||
  { cat "$work/other.out" >&2; fail "the second run failed"; }
"$writer" 2 -1 0.001 > "$work/again.out" 2>&1 || { cat "$work/again.out" >&2; fail "third run"; }
read_back runs accel-mlflow-other 1
read_back runs accel-mlflow 2

# 3. MLFLOW_RUN_ID continues a run. A changed param is refused by the server (HTTP 400): a
#    warning naming the server, and the metrics still go in.
MLFLOW_RUN_ID=$run_id "$writer" 3 -1 0.5 > "$work/continued.out" 2>&1 ||
  { cat "$work/continued.out" >&2; fail "the continued run failed"; }
expect_in "$work/continued.out" "accel: mlflow: could not log 4 params at $MLFLOW_TRACKING_URI (HTTP 400"
read_back continued accel-mlflow "$run_id" 11

# 4. A wrong password (HTTP 401) and a server that is not there: the tracker is stopped with a
#    message naming the server, and the program finishes.
MLFLOW_TRACKING_PASSWORD=wrong "$writer" 2 -1 0.001 > "$work/unauthorized.out" 2>&1 ||
  { cat "$work/unauthorized.out" >&2; fail "the program stopped on a refused password"; }
expect_in "$work/unauthorized.out" "tracker 'mlflow' failed in init_trackers: accel: mlflow: $MLFLOW_TRACKING_URI experiments/get-by-name: HTTP 401"
down="http://127.0.0.1:$(free_port)"
MLFLOW_TRACKING_URI=$down "$writer" 2 -1 0.001 > "$work/down.out" 2>&1 ||
  { cat "$work/down.out" >&2; fail "the program stopped on a server that is down"; }
expect_in "$work/down.out" "tracker 'mlflow' failed in init_trackers: accel: mlflow: $down experiments/get-by-name: no answer"
echo "mlflow round trip: all checks passed"
