#!/usr/bin/env bash
# Checkpoints on any layout: one training run of Gpt passed along a chain of meshes by
# save_state / load_state, with no option for the change — 1 process, dp_shard 2 x tp 2
# (FULL_SHARD of the tensor-parallel slices), tp 2 x cp 2, tp 4, dp_shard 4 (FULL_SHARD),
# 1 process —
# each run's weights as loaded and as left equal to the one-process run's (MeshCheckpoint.Stage
# in parallelism_test.cpp). Then the refusals: a checkpoint taken inside an accumulation window
# on one mesh does not load on another; SHARDED_STATE_DICT of tensor-parallel slices is not
# written.
#   mesh_checkpoints.sh ACCEL TESTS
set -euo pipefail
accel=${1:?usage: mesh_checkpoints.sh ACCEL TESTS}
tests=${2:?usage: mesh_checkpoints.sh ACCEL TESTS}
work=$(mktemp -d "${TMPDIR:-/tmp}/accel-mesh-checkpoints.XXXXXX")
trap 'rm -rf "$work"' EXIT

# stage NAME FROM TO LOAD SAVE PROCESSES [MESH FLAGS...]
# shellcheck source=checkpoint_chain.sh
source "$(dirname "${BASH_SOURCE[0]}")/checkpoint_chain.sh"
stage() { chain_stage "$1" "$2" "$3" "$4" "$5" "$6" MeshCheckpoint.Stage "${@:7}"; }

stage one 0 2 "" "$work/a" 1
stage dp_shard_x_tp 2 3 "$work/a" "$work/b" 4 \
  --parallelism_config_dp_shard_size 2 --parallelism_config_tp_size 2
stage tp_x_cp 3 4 "$work/b" "$work/c" 4 \
  --parallelism_config_tp_size 2 --parallelism_config_cp_size 2
stage tp 4 5 "$work/c" "$work/d" 4 --parallelism_config_tp_size 4
stage dp_shard 5 6 "$work/d" "$work/e" 4 --parallelism_config_dp_shard_size 4
stage one_again 6 7 "$work/e" "" 1
echo "one run through 1 process, dp_shard 2 x tp 2, tp 2 x cp 2, tp 4, dp_shard 4, 1 process:" \
  "the one-process run's weights at every hand-over"

ACCEL_TEST_WINDOW=1 stage window 0 1 "" "$work/window" 4 \
  --parallelism_config_tp_size 2 --parallelism_config_cp_size 2
ACCEL_TEST_REFUSAL="was taken inside a gradient accumulation window on a mesh of dp_replicate 1 x dp_shard 1 x cp 2 x tp 2 and this run has a mesh of dp_replicate 1 x dp_shard 2 x cp 1 x tp 2" \
  stage window_refused 0 0 "$work/window" "" 4 \
  --parallelism_config_dp_shard_size 2 --parallelism_config_tp_size 2
echo "a window's checkpoint on one mesh is refused on another, naming both"
ACCEL_TEST_REFUSAL="save_state of a tensor-parallel model with fsdp_state_dict_type SHARDED_STATE_DICT is not supported" \
  stage sharded_state_dict_refused 0 0 "" "$work/sharded" 4 --fsdp_state_dict_type SHARDED_STATE_DICT \
  --parallelism_config_dp_shard_size 2 --parallelism_config_tp_size 2
echo "SHARDED_STATE_DICT of tensor-parallel slices is refused, naming FULL_STATE_DICT"
