#pragma once

// What a save_state folder holds, as one table: each kind of object (models, optimizers,
// schedulers, data loaders, the fp16 scaler, registered objects) is a Part, made by its own
// factory, that says how many there are, their files, and how each is saved, checked and loaded.
// save_state and load_state both walk the table, so the folder's layout is written down once.

#include <accel/checkpointing.h>
#include <accel/safetensors.h>
#include "optim/training_loop.h"
#include "sharding/optimizer_shards.h"

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace accel::checkpoints {

/// One kind of object a checkpoint holds.
struct Part {
  using FileIo = std::function<void(const std::filesystem::path&, size_t)>;

  /// Its entry in accel_state.json: how many were saved (for a flag, whether there was one).
  const char* key;
  /// What it is called in errors ("data loaders").
  const char* what;
  size_t count;
  /// Its i-th file in the folder.
  std::function<std::string(size_t)> file;
  FileIo save;
  FileIo load;
  /// Checks the i-th file against the run before anything is loaded (none: nothing to check).
  FileIo check = nullptr;
  /// A flag part is saved as true/false; its absence in the run is named by `used_with`.
  bool flag = false;
  const char* used_with = "";
  /// Saved by every process into its own file (per_process_file), not by the main one.
  bool per_process = false;
  /// For a per-process part: the number in this process's file names (-1: its process index),
  /// and whether this process writes them (HYBRID_SHARD's other machines hold the same shards).
  int64_t file_rank = -1;
  bool writes = true;
  /// Its objects' state may be laid out otherwise than this run's and re-split on load
  /// (optimizer_resharding.h): the optimizers.
  bool resplits = false;

  /// The number in this part's file names for process `process`.
  int64_t file_rank_of(int64_t process) const { return file_rank >= 0 ? file_rank : process; }
};

/// SHARDED_STATE_DICT in effect: every process saves its shards of the models (under
/// HYBRID_SHARD, the processes of the first machine: the others hold the same shards).
struct ShardedModels {
  std::vector<std::shared_ptr<sharding::OptimizerShards>> shards;
  int64_t rank = 0, processes = 1;  // among the processes the shards are cut among
  bool writes = true;
};

/// How the models are written and read.
struct ModelsLayout {
  /// The models' whole tensors to write (save_state gathers them; empty for a load), unless
  /// `sharded` is given.
  std::vector<NamedTensors> gathered;
  std::optional<ShardedModels> sharded;
  /// For a load: whether the checkpoint holds its models as SHARDED_STATE_DICT. A sharded model
  /// loads into a whole one and the other way round, on any process count.
  std::optional<bool> saved_sharded;
  /// Models that are this process's stages of a pipeline: they load their own tensors of the
  /// whole model's file.
  std::vector<const torch::nn::Module*> stage_models;
};

Part model_part(const std::vector<torch::nn::Module*>& models, const ModelsLayout& layout);
/// `on_loaded` runs after each optimizer's state is loaded (it moves the state to the device);
/// `sharded`: each process saves its own shard.
Part optimizer_part(const optim::OptimizerRegistry& optimizers,
                    std::function<void(torch::optim::Optimizer&)> on_loaded, bool sharded);
/// The schedulers' or the data loaders' part.
Part stateful_part(const optim::StatefulParts& stateful, optim::StatefulParts::Kind kind);
Part scaler_part(const optim::OptimizerRegistry& optimizers);
Part custom_objects_part(const std::vector<detail::CheckpointHooks>& objects);

/// The table, in the order the folder lists its parts. `models` and `layout` must outlive it.
std::vector<Part> checkpoint_parts(
    const std::vector<torch::nn::Module*>& models, const ModelsLayout& layout,
    const optim::OptimizerRegistry& optimizers, const optim::StatefulParts& stateful,
    const std::vector<detail::CheckpointHooks>& custom_objects,
    std::function<void(torch::optim::Optimizer&)> on_optimizer_loaded, bool sharded_optimizers);

}  // namespace accel::checkpoints
