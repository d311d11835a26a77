#!/usr/bin/env bash
# Pipeline checkpoints on any layout: one AdamW run of the GPT Sequential passed along a chain of
# layouts by save_state / load_state, with no option for the change — 1 process, pp 2 x tp 2,
# pp 2 x dp_shard 2 (FULL_SHARD of each stage; its checkpoint also resumed on 1 process), pp 2
# with two virtual stages each
# (Interleaved1F1B: each process's optimizer holds two runs of the model's parameters), 1 process
# — every run's weights as loaded and as left equal to plain LibTorch's after as many steps
# (PipelineCheckpoint.Stage in pipeline_test.cpp).
#   pipeline_checkpoints.sh ACCEL TESTS
set -euo pipefail
accel=${1:?usage: pipeline_checkpoints.sh ACCEL TESTS}
tests=${2:?usage: pipeline_checkpoints.sh ACCEL TESTS}
work=$(mktemp -d "${TMPDIR:-/tmp}/accel-pipeline-checkpoints.XXXXXX")
trap 'rm -rf "$work"' EXIT

# stage NAME FROM TO LOAD SAVE PROCESSES SCHEDULE STAGES_PER_PROCESS [MESH FLAGS...]
# shellcheck source=checkpoint_chain.sh
source "$(dirname "${BASH_SOURCE[0]}")/checkpoint_chain.sh"
stage() {
  ACCEL_TEST_SCHEDULE=$7 ACCEL_TEST_STAGES_PER_PROCESS=$8 \
    chain_stage "$1" "$2" "$3" "$4" "$5" "$6" PipelineCheckpoint.Stage "${@:9}"
}

stage one 0 2 "" "$work/a" 1 1F1B 1
stage pp_x_tp 2 3 "$work/a" "$work/b" 4 1F1B 1 \
  --parallelism_config_pp_size 2 --parallelism_config_tp_size 2
stage pp_x_dp_shard 3 4 "$work/b" "$work/c" 4 GPipe 1 \
  --parallelism_config_pp_size 2 --parallelism_config_dp_shard_size 2
stage one_from_sharded 4 5 "$work/c" "" 1 1F1B 1
stage interleaved 4 5 "$work/c" "$work/d" 2 Interleaved1F1B 2 --parallelism_config_pp_size 2
stage one_again 5 6 "$work/d" "" 1 1F1B 1
echo "one run through 1 process, pp 2 x tp 2, pp 2 x dp_shard 2, pp 2 interleaved, 1 process:" \
  "plain LibTorch's weights at every hand-over"
