#pragma once

// save_state / load_state: everything a resumed run needs, written as one folder that replaces
// the previous one only when complete, and checked against the run before anything loads. The
// Accelerator hands over what it holds (CheckpointInputs); nothing here sees the Accelerator.

#include <accel/checkpointing.h>
#include <accel/safetensors.h>
#include <accel/sharding_strategy.h>
#include "optim/training_loop.h"
#include "sharding/optimizer_resharding.h"
#include "sharding/optimizer_shards.h"

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace accel::checkpoints {

/// backward(loss_sum, num_items)'s accumulation window, as a checkpoint keeps it: whether the
/// window under way sums its losses over counted items, and how many this process has counted.
struct ItemWindow {
  bool open = false;
  bool counts_items = false;
  int64_t items = 0;
};

/// The accumulation window's counters a checkpoint keeps: accumulate() calls, the micro-steps
/// since the last synchronisation, and backward(loss_sum, num_items)'s window.
struct WindowCounters {
  int64_t step = 0;
  int64_t micro_step = 0;
  ItemWindow items;
};

/// What save_state and load_state read of the run and, on load, restore.
struct CheckpointInputs {
  // Where this process stands in the job.
  int64_t process_index = 0;
  int64_t num_processes = 1;
  bool main_process = true;
  bool local_main_process = true;
  /// Every process reaches it before any goes on (the Accelerator's wait_for_everyone).
  std::function<void()> wait_for_everyone;

  // What the run trains: the prepared models in preparation order, the prepared optimizers
  // (with the fp16 scaler), schedulers and data loaders, the optimizers' shards, and the
  // registered objects and pre-hooks.
  std::vector<torch::nn::Module*> models;
  const optim::OptimizerRegistry* optimizers = nullptr;
  const optim::StatefulParts* stateful = nullptr;
  std::vector<std::shared_ptr<sharding::OptimizerShards>> shards;
  const std::vector<detail::CheckpointHooks>* custom_objects = nullptr;
  const std::map<int64_t, SaveStatePreHook>* save_pre_hooks = nullptr;
  const std::map<int64_t, LoadStatePreHook>* load_pre_hooks = nullptr;
  /// Moves a loaded optimizer's state to the parameters' devices.
  std::function<void(torch::optim::Optimizer&)> move_optimizer_state;
  int64_t gradient_accumulation_steps = 1;

  // How the run is cut: the strategy in effect (NO_SHARD on one process without offload),
  // whether the optimizers are sharded, and with SHARDED_STATE_DICT the processes its models'
  // shards are cut among (under HYBRID_SHARD, this machine's) and whether this process writes
  // them (HYBRID_SHARD's first machine).
  ShardingStrategy sharding_strategy = ShardingStrategy::NoShard;
  bool sharded_optimizers = false;
  struct ShardedStateDict {
    int64_t rank = 0, processes = 1;
    bool writes = true;
  };
  std::optional<ShardedStateDict> sharded_state_dict;
  /// The device mesh (all 1 and not `configured` without a parallelism config), and this
  /// process's part among the tensor-parallel processes.
  struct Mesh {
    int64_t dp_replicate = 1, dp_shard = 1, cp = 1, tp = 1, pp = 1;
    bool configured = false;
    bool operator==(const Mesh& other) const {
      return dp_replicate == other.dp_replicate && dp_shard == other.dp_shard && cp == other.cp &&
             tp == other.tp && pp == other.pp;
    }
  };
  Mesh mesh;
  int64_t tp_rank = 0;

  /// A pipeline over several processes (mesh.pp > 1): what its stages need of a checkpoint.
  struct Pipeline {
    /// The models that are this process's stages of a pipeline: saved from `whole_tensors`
    /// (every stage's, gathered: a collective), loaded from the whole file by their names.
    std::vector<const torch::nn::Module*> stage_models;
    std::function<NamedTensors(const torch::nn::Module&)> whole_tensors;
    /// Each optimizer's parameters' places in the whole model's groups (by optimizer index).
    std::vector<sharding::GlobalIndex> global_indices;
    /// Every optimizer's description with every stage's units (describe_optimizers' form,
    /// gathered from the stages: computed on every process, written by the coordinator).
    nlohmann::json optimizer_layouts;
  };
  std::optional<Pipeline> pipeline;

  // Where checkpoints go and how many are kept (the caller advances its iteration after a
  // save_state), and what the checkpoint saves of the accumulation window's counters and hands
  // back on load.
  const ProjectConfiguration* project = nullptr;
  WindowCounters window;
  /// Inside an accumulation window (this micro-step does not synchronise): its gradients are kept.
  bool in_window = false;
  std::function<void(const WindowCounters&, bool in_window)> restore_window;
};

/// Writes the run's state into `requested_dir` (or the next numbered folder, the project's
/// iteration; the caller advances it after) and returns it. A collective: every process calls it.
std::string save_state(const CheckpointInputs& run, const std::string& requested_dir);

/// Restores the run's state from `requested_dir` (or the newest numbered folder: returns its
/// number + 1, where the project's numbering continues). A collective.
std::optional<int64_t> load_state(const CheckpointInputs& run, const std::string& requested_dir,
                                  const LoadStateOptions& options);

}  // namespace accel::checkpoints
