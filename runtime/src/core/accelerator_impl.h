#pragma once

// The Accelerator's state, shared by core's source files that implement it. Private to core:
// the other subsystems are handed what they need (checkpoints::CheckpointInputs, the trackers).

#include <accel/accelerator.h>

#include "checkpoint/training_state.h"
#include "distributed/distributed_state.h"
#include "distributed/gradient_sync.h"
#include "sharding/optimizer_shards.h"
#include "tracking/trackers.h"

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace accel {
namespace detail {

class ReachedParameters;  // backward.cpp

struct PreparedModel {
  torch::nn::Module* module = nullptr;
  /// Null in a one-process job: nothing to synchronise, no hooks, no cost.
  std::unique_ptr<detail::GradientSynchronizer> sync;
  int no_sync_depth = 0;
  bool force_sync = false;
};

}  // namespace detail

struct Accelerator::Impl {
  ResolvedOptions options;
  std::shared_ptr<detail::DistributedState> dist;
  torch::Device device = torch::kCPU;
  std::shared_ptr<detail::GradientState> gradient_state = std::make_shared<detail::GradientState>();
  std::vector<detail::PreparedModel> models;
  bool trigger = false;
  /// resume_if_possible() loaded a checkpoint.
  bool resumed = false;
  /// Inside join_uneven_inputs: the models whose synchronising backwards count the processes
  /// still training.
  std::vector<const torch::nn::Module*> join_models;
  /// This process's synchronising backwards inside the join scope.
  int64_t join_backwards = 0;
  /// accumulate() calls so far (Accelerate's `step`); saved with the state.
  int64_t step = 0;
  /// Inside an accumulate_until() scope: the program counts its micro-steps and divides its loss.
  bool program_counts_accumulation = false;
  /// backward(loss_sum, num_items)'s count, for the backward it calls.
  std::optional<int64_t> pending_items;
  /// The accumulation window under way, as backward() sees it: whether its losses are sums over
  /// counted items, and how many this process has counted so far.
  checkpoints::ItemWindow item_window;
  /// The project configuration, whose iteration advances with each save_state().
  ProjectConfiguration project;
  /// The shards of the prepared optimizers, with a sharding strategy on several processes.
  std::vector<std::weak_ptr<detail::OptimizerShards>> shards;
  /// Objects registered with register_for_checkpointing, in registration order.
  std::vector<detail::CheckpointHooks> custom_objects;
  /// register_save_state_pre_hook / register_load_state_pre_hook's hooks, by handle number, in
  /// registration order.
  /// Shared with the handles, which may outlive the Accelerator.
  std::shared_ptr<std::map<int64_t, SaveStatePreHook>> save_state_pre_hooks =
      std::make_shared<std::map<int64_t, SaveStatePreHook>>();
  std::shared_ptr<std::map<int64_t, LoadStatePreHook>> load_state_pre_hooks =
      std::make_shared<std::map<int64_t, LoadStatePreHook>>();
  int64_t next_hook_id = 0;
  /// The run's trackers; the constructor says whether this is the main process.
  tracking::Trackers trackers{false};

  /// The prepared models, in preparation order.
  std::vector<torch::nn::Module*> prepared_modules() const {
    std::vector<torch::nn::Module*> modules;
    for (const auto& m : models) modules.push_back(m.module);
    return modules;
  }
  detail::PreparedModel* find(const torch::nn::Module* module) {
    for (auto& m : models) {
      if (m.module == module) return &m;
    }
    return nullptr;
  }
  /// The device mesh, with a parallelism config on several processes; null otherwise.
  const detail::DeviceMesh* mesh = nullptr;
  /// The group of `kind` on the mesh, or `fallback` without one.
  const c10::intrusive_ptr<c10d::ProcessGroup>& mesh_group(
      detail::MeshGroup kind, const c10::intrusive_ptr<c10d::ProcessGroup>& fallback) const {
    return mesh != nullptr ? mesh->group(kind) : fallback;
  }
  /// Where data-parallel gradients average: the mesh's dp_replicate × dp_shard × cp, else all.
  const c10::intrusive_ptr<c10d::ProcessGroup>& gradient_group() const {
    return mesh_group(detail::MeshGroup::gradient, dist->device_group());
  }
  /// The processes that read different batches: the mesh's data ranks, else all.
  int64_t data_parallel_size() const {
    return mesh != nullptr ? mesh->config().data_parallel_size() : dist->world_size();
  }
  int64_t data_rank() const { return mesh != nullptr ? mesh->data_rank() : dist->rank(); }
  /// Inside gather_for_metrics: gathers go over the data ranks only.
  bool gather_over_data_ranks = false;
  /// Where gather() and gather_together() go: the device group, or the mesh's data group inside
  /// gather_for_metrics.
  const c10::intrusive_ptr<c10d::ProcessGroup>& tensor_gather_group() const {
    return gather_over_data_ranks ? mesh_group(detail::MeshGroup::data, dist->device_group())
                                  : dist->device_group();
  }
  /// Where gather_object() goes: the host group, or the mesh's data group (whose Gloo backend
  /// takes CPU tensors) inside gather_for_metrics.
  const c10::intrusive_ptr<c10d::ProcessGroup>& object_gather_group() const {
    return gather_over_data_ranks ? mesh_group(detail::MeshGroup::data, dist->host_group())
                                  : dist->host_group();
  }
  /// Device tensors and the user's collectives (Gloo for CPU tensors, NCCL for CUDA ones).
  c10d::ProcessGroup& device_group() const { return *dist->device_group(); }
  /// The runtime's own CPU-side collectives: always Gloo.
  c10d::ProcessGroup& host_group() const { return *dist->host_group(); }
  bool distributed() const { return dist->world_size() > 1; }
  /// What the job's process groups are made with.
  detail::GroupSettings group_settings() const {
    return {options.cpu, options.timeout, options.debug};
  }
  /// A sharding strategy in effect: one, on several processes, or on one with CPU offload (which
  /// then moves the optimizer's side to the host).
  bool sharded() const {
    return (distributed() || options.fsdp_offload_params) &&
           options.sharding_strategy != ShardingStrategy::NoShard;
  }
  /// FULL_SHARD or HYBRID_SHARD in effect: the parameters are sharded too.
  bool shards_parameters() const {
    return sharded() && (options.sharding_strategy == ShardingStrategy::FullShard || hybrid());
  }
  /// HYBRID_SHARD in effect.
  bool hybrid() const {
    return sharded() && options.sharding_strategy == ShardingStrategy::HybridShard;
  }
  /// The processes among which the shards are cut: the mesh's dp_shard × cp; without a mesh,
  /// this machine's under HYBRID_SHARD, else all.
  const c10::intrusive_ptr<c10d::ProcessGroup>& shard_group() const {
    if (mesh != nullptr) return mesh->group(detail::MeshGroup::shard);
    if (hybrid()) return dist->hybrid_groups(group_settings()).shard;
    // One process has a group only to shard (CPU offload); null otherwise, as the job's groups.
    return distributed() || !sharded() ? dist->device_group()
                                       : dist->single_process_group(group_settings());
  }
  /// HYBRID_SHARD's replicas of this process's shards: the mesh's dp_replicate, or without a
  /// mesh one per machine; null otherwise.
  c10::intrusive_ptr<c10d::ProcessGroup> replicate_group() const {
    if (mesh != nullptr) return hybrid() ? mesh->group(detail::MeshGroup::dp_replicate) : nullptr;
    return hybrid() ? dist->hybrid_groups(group_settings()).replicate : nullptr;
  }
  // ---- The scopes' work (AccumulateScope, NoSyncGuard, JoinScope) ---------------------------

  /// Counts a micro-step; true when it skips synchronisation (the models enter no_sync).
  /// Opens a micro-step: `sync` given (accumulate_until), the program decides whether it
  /// synchronises; else the accumulation counter does.
  bool begin_accumulate(const std::vector<const torch::nn::Module*>& models,
                        std::optional<bool> sync);
  void end_accumulate(const std::vector<const torch::nn::Module*>& models, bool skipped_sync);
  void enter_no_sync(const torch::nn::Module* model);
  void exit_no_sync(const torch::nn::Module* model);
  void begin_join(const std::vector<const torch::nn::Module*>& models,
                  std::optional<bool> even_batches);
  /// Shadows the other processes' gradient all-reduces until every process has finished.
  void end_join(const std::vector<const torch::nn::Module*>& models);

  // ---- backward's steps (backward.cpp) -------------------------------------------------------

  /// Counts backward(loss_sum, num_items)'s items (none: a mean loss) into the window, refusing
  /// a window that mixes the two; true when this backward ends the window.
  bool count_items(std::optional<int64_t> items);
  /// The prepared models this backward synchronises: those outside no_sync and, with several,
  /// only those the loss reaches.
  std::vector<detail::PreparedModel*> models_to_sync(detail::ReachedParameters& reached);
  /// Under join_uneven_inputs: counts this process as still training, for the others to shadow.
  void count_join_backward(const std::vector<detail::PreparedModel*>& syncing);
  /// The sharded optimizers that take this backward's gradients (those the loss reaches).
  std::vector<std::shared_ptr<detail::OptimizerShards>> shards_to_arm(
      const std::vector<detail::PreparedModel*>& syncing, detail::ReachedParameters& reached);
  /// After autograd: the shards' reductions, the unused-parameter verdict (returned as the error
  /// to raise, or empty), and the buffers' broadcast when the graph is freed.
  std::string finish_sync(const std::vector<detail::PreparedModel*>& syncing,
                          const std::vector<std::shared_ptr<detail::OptimizerShards>>& sharded,
                          bool graph_freed);
  /// Multiplies every prepared model's and shard's gradients by `factor`.
  void scale_gradients(double factor);

  // ---- Sharding -----------------------------------------------------------------------------

  /// The sharded unit of each of `optimizer`'s parameters: FULL_SHARD's wrap policy (null: by
  /// size). Under find_unused_parameters or static_graph, every sharded strategy's, and with no
  /// wrap policy a unit per module (units_by_module), so that parameters used together are
  /// stepped together.
  detail::ShardUnitOf shard_units(const torch::optim::Optimizer& optimizer) const;
  /// The sharding strategy in effect: the option's, or NO_SHARD on one process without CPU
  /// offload.
  ShardingStrategy effective_sharding_strategy() const;
  /// The norm of this process's gradients of `parameters` as they are, unscaled (no collective).
  double local_grad_norm(const std::vector<torch::Tensor>& parameters, double norm_type) const;
  /// The gradients of `parameters` as this process holds them: the pieces of its optimizers'
  /// shards, and the whole gradients of the parameters no shard holds.
  std::pair<std::vector<torch::Tensor>, std::vector<torch::Tensor>> gradient_parts(
      const std::vector<torch::Tensor>& parameters);
  /// clip_grad_norm_ over gradients split across processes: sharded by a strategy, sliced by
  /// tensor parallelism, or both.
  double clip_split_grad_norm(const std::vector<torch::Tensor>& parameters, double max_norm,
                              double norm_type);

  /// save_state and load_state refuse SHARDED_STATE_DICT of tensor-parallel slices (`call`
  /// names which).
  void refuse_sharded_tensor_parallel_state(const char* call) const;
  /// What save_state and load_state read and restore of the run.
  checkpoints::CheckpointInputs checkpoint_inputs(Accelerator& accelerator);

  /// The live shards, in the order their optimizers were prepared.
  std::vector<std::shared_ptr<detail::OptimizerShards>> live_shards() const {
    std::vector<std::shared_ptr<detail::OptimizerShards>> live;
    for (const auto& weak : shards) {
      if (auto shard = weak.lock()) live.push_back(std::move(shard));
    }
    return live;
  }
};

}  // namespace accel
