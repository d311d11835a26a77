#pragma once

// The Accelerator's state, shared by core's source files that implement it. Private to core:
// the other subsystems are handed what they need (checkpoints::CheckpointInputs, the trackers).
// Each job is a part with its own state: the prepared models, the accumulation window, the join,
// the sharding setup (sharding/), the checkpoint registrations and the trackers. What is left
// here is the run's identity (options, processes, device, mesh) and the groups derived from it.

#include <accel/accelerator.h>

#include "accumulation_window.h"
#include "checkpoint/training_state.h"
#include "checkpoint_registrations.h"
#include "distributed/distributed_state.h"
#include "optim/training_loop.h"
#include "prepared_models.h"
#include "sharding/sharding_setup.h"
#include "tracking/trackers.h"
#include "uneven_inputs_join.h"

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace accel {

struct Accelerator::Impl {
  /// Every part from the resolved options, once: joins (or starts) the process group; the mesh
  /// is formed after, by form_mesh(), where every process constructs its Accelerator.
  explicit Impl(ResolvedOptions resolved);

  ResolvedOptions options;
  std::shared_ptr<distributed::DistributedState> dist;
  torch::Device device;
  /// What the prepared optimizers, schedulers and loaders share with this Accelerator.
  std::shared_ptr<detail::TrainingLoop> loop = std::make_shared<detail::TrainingLoop>();
  /// The device mesh, with a parallelism config on several processes; null otherwise.
  const distributed::DeviceMesh* mesh = nullptr;

  core::PreparedModels models;
  core::AccumulationWindow window{options, *loop, models};
  core::UnevenInputsJoin join{loop->loader, models};
  sharding::ShardingSetup sharding;
  core::CheckpointRegistrations registrations;
  /// The project configuration, whose iteration advances with each save_state().
  ProjectConfiguration project;
  /// The run's trackers, which log on the main process.
  tracking::Trackers trackers;
  /// set_trigger() was called since the last check_trigger().
  bool trigger = false;
  /// resume_if_possible() loaded a checkpoint.
  bool resumed = false;
  /// Pipelines' models (their stages on this process), with the whole model's tensor names in
  /// its order.
  std::map<const torch::nn::Module*, std::vector<std::string>> pipelines;

  // ---- The run's groups ---------------------------------------------------------------------

  /// The group of `kind` on the mesh, or `fallback` without one.
  const c10::intrusive_ptr<c10d::ProcessGroup>& mesh_group(
      distributed::MeshGroup kind, const c10::intrusive_ptr<c10d::ProcessGroup>& fallback) const {
    return mesh != nullptr ? mesh->group(kind) : fallback;
  }
  /// Where data-parallel gradients average: the mesh's dp_replicate × dp_shard × cp, else all.
  const c10::intrusive_ptr<c10d::ProcessGroup>& gradient_group() const {
    return mesh_group(distributed::MeshGroup::gradient, dist->device_group());
  }
  /// The processes that read different batches: the mesh's data ranks, else all.
  int64_t data_parallel_size() const {
    return mesh != nullptr ? mesh->config().data_parallel_size() : dist->world_size();
  }
  int64_t data_rank() const { return mesh != nullptr ? mesh->data_rank() : dist->rank(); }
  /// Where a gather of tensors goes: the device group, or over data ranks the mesh's data group.
  const c10::intrusive_ptr<c10d::ProcessGroup>& tensor_gather_group(detail::GatherOver over) const {
    return over == detail::GatherOver::data_ranks
               ? mesh_group(distributed::MeshGroup::data, dist->device_group())
               : dist->device_group();
  }
  /// Where a gather of objects goes: the host group, or over data ranks the mesh's data group
  /// (whose Gloo backend takes CPU tensors).
  const c10::intrusive_ptr<c10d::ProcessGroup>& object_gather_group(detail::GatherOver over) const {
    return over == detail::GatherOver::data_ranks
               ? mesh_group(distributed::MeshGroup::data, dist->host_group())
               : dist->host_group();
  }
  /// Device tensors and the user's collectives (Gloo for CPU tensors, NCCL for CUDA ones).
  c10d::ProcessGroup& device_group() const { return *dist->device_group(); }
  /// The runtime's own CPU-side collectives: always Gloo.
  c10d::ProcessGroup& host_group() const { return *dist->host_group(); }
  /// The host group where there are other processes to reach; null on one process.
  c10d::ProcessGroup* other_processes() const { return distributed() ? &host_group() : nullptr; }
  bool distributed() const { return dist->world_size() > 1; }
  bool tensor_parallel() const { return mesh != nullptr && mesh->config().tp_enabled(); }
  /// What the job's process groups are made with.
  distributed::GroupSettings group_settings() const {
    return {options.cpu, options.timeout, options.debug};
  }
  /// The processes among which the shards are cut: the mesh's dp_shard × cp; without a mesh,
  /// this machine's under HYBRID_SHARD, else all.
  const c10::intrusive_ptr<c10d::ProcessGroup>& shard_group() const;
  /// HYBRID_SHARD's replicas of this process's shards: the mesh's dp_replicate, or without a
  /// mesh one per machine; null otherwise.
  c10::intrusive_ptr<c10d::ProcessGroup> replicate_group() const;

  // ---- Implemented beside the calls that use them ---------------------------------------------

  /// Forms the device mesh of options.parallelism_config (constructor).
  void form_mesh();
  /// This process's coordinate along a mesh dimension; throws, naming `method`, without a mesh.
  int64_t mesh_coordinate(distributed::MeshDim dim, const char* method) const;
  /// prepare(model)'s steps (accelerator.cpp names them in order): the model on the device;
  /// rank 0's tensors on every process; then checkpointing, the plan's split, FP8 and the
  /// gradients' averaging (`pipeline`: after the schedule, not in backward), and the model
  /// recorded as prepared.
  void place(torch::nn::Module& model);
  void broadcast_model(torch::nn::Module& model);
  void prepare_parts(torch::nn::Module& model, const TensorParallelPlan* plan, bool pipeline);
  /// The plan applied over the mesh's tp group, or (unless already `checked`) checked only.
  void apply_tensor_parallel(torch::nn::Module& model, const TensorParallelPlan& plan,
                             bool checked);
  /// A pipeline's stages after the schedule, on a synchronising step: their gradients averaged
  /// over each stage's data-parallel processes (or given to the sharded optimizers).
  void synchronise_gradients(torch::nn::Module& model);
  /// Whether data parallelism all-reduces the gradients (NO_SHARD, ZeRO-1); the other strategies
  /// reduce-scatter them onto their shards.
  bool all_reduces_gradients() const {
    return options.sharding_strategy == ShardingStrategy::NoShard ||
           options.sharding_strategy == ShardingStrategy::ShardOptimizerState;
  }
  /// mixed_precision fp16's loss scaler: where each process checks only part of the gradients
  /// (its shards, its stages), one whose found-inf is decided over every process.
  std::shared_ptr<GradScaler> make_fp16_scaler() const;
  /// Whether the mesh has a pipeline dimension.
  bool pipelined() const { return mesh != nullptr && mesh->config().pp_enabled(); }
  /// The whole model's tensors for get_state_dict of a pipeline's model: every stage's, gathered.
  NamedTensors gather_pipeline_tensors(const torch::nn::Module& module);
  /// What save_state and load_state need of a pipeline over several processes (collective).
  checkpoints::CheckpointInputs::Pipeline pipeline_checkpoint();
  /// Every optimizer's description with every stage's units, numbered by `global_indices`.
  nlohmann::json merged_optimizer_layouts(const std::vector<sharding::GlobalIndex>& global_indices);
  /// save_state and load_state refuse SHARDED_STATE_DICT of tensor-parallel slices (`call`
  /// names which).
  void refuse_sharded_tensor_parallel_state(const char* call) const;
  /// What save_state and load_state read and restore of the run.
  checkpoints::CheckpointInputs checkpoint_inputs(Accelerator& accelerator);
};

}  // namespace accel
