#!/usr/bin/env bash
# The progress bar in a real terminal: tmux runs `accel launch --num_processes 2 LOOP`
# (progress_loop.cpp) in a detached 120x30 pane; capture-pane reads the screen mid-run and at the
# end. One bar only (rank 1 is silent), redrawn in place on one line, with percentage, count,
# elapsed<remaining, rate and postfix; log lines printed once each, never inside the bar.
#   progress_in_terminal.sh ACCEL LOOP
set -euo pipefail
accel=${1:?usage: progress_in_terminal.sh ACCEL LOOP}
loop=${2:?usage: progress_in_terminal.sh ACCEL LOOP}
command -v tmux > /dev/null || { echo "tmux is not installed (scripts/install-deps.sh)"; exit 1; }
socket=accel-progress-$$
export TERM=xterm-256color LC_ALL=C.UTF-8
tmux_() { tmux -u -L "$socket" -f /dev/null "$@"; }
trap 'tmux_ kill-server 2> /dev/null || true' EXIT
tmux_ new-session -d -x 120 -y 30 -s progress \
  "'$accel' launch --num_processes 2 '$loop'; echo EXIT=\$?; sleep 60"
screen() { tmux_ capture-pane -p -t progress; }
fail() { echo "FAIL: $1"; echo "--- screen:"; echo "$2"; exit 1; }

bar='train: +[0-9]+%\|[^|]*\| +[0-9]+/16 \[[0-9:]+<[0-9:?]+, [0-9.]+(it/s|s/it)'
mid=""
for _ in $(seq 1 150); do
  now=$(screen)
  if grep -Eq "$bar, loss=" <<< "$now" && ! grep -q "100%" <<< "$now"; then mid=$now; break; fi
  sleep 0.1
done
[ -n "$mid" ] || fail "no bar was seen mid-run" "$(screen)"
[ "$(grep -c "train:" <<< "$mid")" -eq 1 ] || fail "more than one bar mid-run" "$mid"
grep -Eq "train: +[0-9]+%\|█" <<< "$mid" || grep -Eq "train: +[0-9]+%\| " <<< "$mid" ||
  fail "the bar's cells are not drawn" "$mid"

final=""
for _ in $(seq 1 300); do
  now=$(screen)
  if grep -q "^EXIT=" <<< "$now"; then final=$now; break; fi
  sleep 0.1
done
[ -n "$final" ] || fail "the job did not end within 30 s" "$(screen)"
grep -q "^EXIT=0" <<< "$final" || fail "the job failed" "$final"
[ "$(grep -c "train:" <<< "$final")" -eq 1 ] || fail "the bar was not redrawn in place" "$final"
grep -Eq "^train: 100%\|█+\| 16/16 \[[0-9:]+<00:00, [0-9.]+it/s, loss=0.0625\]" <<< "$final" ||
  fail "the finished bar is not 16/16 with its rate and postfix" "$final"
for line in "starting 16 batches" "halfway" "finished"; do
  [ "$(grep -c "$line" <<< "$final")" -eq 1 ] || fail "'$line' is not printed once" "$final"
  grep -Eq "^\[[0-9-]+ [0-9:]+\] \[rank 0\] \[info\] progress_loop: $line" <<< "$final" ||
    fail "'$line' does not start its own line" "$final"
done
# The log line written mid-bar came before the bar's final state, on a line of its own.
line_of() { grep -nE "$1" <<< "$final" | head -1 | cut -d: -f1; }
[ "$(line_of halfway)" -lt "$(line_of "^train:")" ] && [ "$(line_of "^train:")" -lt "$(line_of finished)" ] ||
  fail "the log lines did not land above and below the bar" "$final"
echo "progress bar in a terminal: ok"
echo "$final"
