#pragma once

// SHARDED_STATE_DICT: a FULL_SHARD model saved by save_state as each process's shards, with no
// gather. Process r writes model_shard_<r>.safetensors holding its slice of each unit
// ("unit.<k>", flat); process 0's file also holds the tensors no unit shards (buffers, parameters
// no optimizer holds) under their names, and process 0 writes the index, model.shards.json:
//
//   {"format": "accel-sharded-state-dict", "num_processes": N,
//    "files": ["model_shard_0.safetensors", ...],
//    "units": [{"key": "unit.0", "shard_elements": S, "dtype": "F32",
//               "parameters": [{"name": "fc.weight", "shape": [4, 3], "offset": 0}, ...]}, ...],
//    "whole": ["bn.running_mean", ...], "order": [every name, in the model's order]}
//
// A unit's flat range is its parameters end to end (at their offsets), padded to N x S elements;
// process r holds elements [r S, (r + 1) S). `accel merge-weights` reads only this (no LibTorch).
// Each parameter's name, global shape and place are in the index, so a load on M processes, or
// into a run that holds the model whole, cuts its own slices from the saved ones (DCP's
// resharding on load).

#include "optimizer_shards.h"

#include <torch/nn/module.h>

#include <memory>
#include <string>
#include <vector>

namespace accel {
namespace sharding {

/// The index's file name beside a model's weights file ("model.safetensors" ->
/// "model.shards.json").
std::string sharded_index_name(const std::string& weights_file);

/// Writes this process's part of `module` into `file` (and, on process 0, the index
/// `index_file`, naming `files`, every process's file, relative to its folder). `shards` are the
/// live optimizer shards; those whose units hold `module`'s parameters are written.
void save_sharded_model(const torch::nn::Module& module,
                        const std::vector<std::shared_ptr<OptimizerShards>>& shards,
                        const std::string& file, const std::string& index_file,
                        const std::vector<std::string>& files, int64_t rank, int64_t processes);

/// Checks, before anything is read, that the SHARDED_STATE_DICT model described by `index_file`
/// holds `module`'s tensors by name and shape, and no others.
void check_sharded_model(const torch::nn::Module& module, const std::string& index_file);

/// Reads this process's shards of `module`, and its whole tensors, from the SHARDED_STATE_DICT
/// model described by `index_file` (the files beside it). The saved model may have been sharded
/// over another number of processes or into other units: each slice is assembled from the saved
/// slices that hold its elements, and only those are read.
void load_sharded_model(torch::nn::Module& module,
                        const std::vector<std::shared_ptr<OptimizerShards>>& shards,
                        const std::string& index_file);

/// Reads `module`, whole (a run without sharded parameters), from the SHARDED_STATE_DICT model
/// described by `index_file`.
void load_whole_from_sharded_model(torch::nn::Module& module, const std::string& index_file);

}  // namespace sharding
}  // namespace accel
