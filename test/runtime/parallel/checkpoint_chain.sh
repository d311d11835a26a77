# One run passed along a chain of layouts by save_state / load_state: sourced by
# mesh_checkpoints.sh and pipeline_checkpoints.sh, which set $accel, $tests and $work.
#
# chain_stage NAME FROM TO LOAD SAVE PROCESSES CASE [LAUNCH FLAGS...]
#   runs the test CASE on PROCESSES processes with ACCEL_TEST_FROM/TO/LOAD/SAVE set (the steps it
#   trains, the checkpoint it loads, the one it writes), fails the script with its log unless the
#   case passed, and shows its "weights ..." lines. Other ACCEL_TEST_* variables given before the
#   call reach the case too.
chain_stage() {
  local name=$1 from=$2 to=$3 load=$4 save=$5 processes=$6 case=$7
  shift 7
  echo "== $name: steps $from..$to on $processes process(es) $*"
  ACCEL_TEST_FROM=$from ACCEL_TEST_TO=$to ACCEL_TEST_LOAD=$load ACCEL_TEST_SAVE=$save \
    "$accel" launch --num_processes "$processes" --grace_period 2 "$@" \
    "$tests" --gtest_filter="$case" > "$work/$name.log" 2>&1 ||
    { cat "$work/$name.log"; echo "FAIL: $name"; exit 1; }
  grep -q "\[  PASSED  \] 1 test" "$work/$name.log" ||
    { cat "$work/$name.log"; echo "FAIL: $name did not run the stage"; exit 1; }
  grep -h "^weights" "$work/$name.log" || true
}
