#pragma once

// Which sharding strategy a run is under, and the OptimizerShards each prepared optimizer gets
// from it: the plan (reduction, unit size, collectives, the wrap policy's units, offload), the
// reduce dtype and prefetch. Core's Accelerator owns one, gives it the process groups it formed,
// and asks it for the live shards in backward, clipping and checkpoints.

#include "optimizer_shards.h"

#include <accel/sharding_strategy.h>

#include <c10/core/ScalarType.h>

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace accel {
namespace sharding {

/// What the run's options say about sharding (core fills it from its ResolvedOptions).
struct ShardingSettings {
  ShardingStrategy strategy = ShardingStrategy::NoShard;
  /// The job has several processes.
  bool distributed = false;
  /// fsdp_offload_params: the optimizer's side lives on the host.
  bool offload = false;
  /// FULL_SHARD's wrap policy: units by layer class, or by size (0: not set).
  std::vector<std::string> wrap_classes;
  int64_t min_num_params = 0;
  /// find_unused_parameters or static_graph: a unit's parameters must be used or left out
  /// together, so every strategy shards by units.
  bool units_by_use = false;
  /// Gradients are sent in units of about this many bytes (DDP's bucket_cap_mb).
  int64_t unit_bytes = 25 << 20;
  /// fsdp_reduce_dtype; none: the parameters' own.
  std::optional<c10::ScalarType> reduce_dtype;
  bool forward_prefetch = false, backward_prefetch = false;
};

class ShardingSetup {
 public:
  ShardingSetup() = default;
  explicit ShardingSetup(ShardingSettings settings) : settings_(std::move(settings)) {}

  /// A strategy in effect: one, on several processes, or on one with CPU offload (which then
  /// moves the optimizer's side to the host).
  bool sharded() const;
  /// FULL_SHARD or HYBRID_SHARD in effect: the parameters are sharded too.
  bool shards_parameters() const;
  /// HYBRID_SHARD in effect.
  bool hybrid() const;
  /// The option's strategy, or NO_SHARD where none is in effect.
  ShardingStrategy effective_strategy() const;

  /// Where an optimizer's shards live and travel.
  struct Placement {
    /// The processes the shards are cut among, and HYBRID_SHARD's replicas of them (or null).
    c10::intrusive_ptr<c10d::ProcessGroup> shard_group;
    c10::intrusive_ptr<c10d::ProcessGroup> replicate_group;
    /// Gloo has no reduce-scatter: the shards' collectives are all-reduces then.
    bool gloo = true;
    /// Where empty (init_empty_weights) parameters are materialised under FULL_SHARD.
    torch::Device device = torch::kCPU;
  };
  /// This process's shards of `optimizer`'s parameters (those of `models`, the prepared ones),
  /// which then replace them in it. Only where sharded().
  std::shared_ptr<sharding::OptimizerShards> shard(torch::optim::Optimizer& optimizer,
                                                   const std::vector<torch::nn::Module*>& models,
                                                   const Placement& placement);
  /// The live shards, in the order their optimizers were prepared.
  std::vector<std::shared_ptr<sharding::OptimizerShards>> live() const;

 private:
  /// The sharded unit of each of `optimizer`'s parameters: FULL_SHARD's wrap policy (null: by
  /// size). Under find_unused_parameters or static_graph, every sharded strategy's, and with no
  /// wrap policy a unit per module, so that parameters used together are stepped together.
  sharding::ShardUnitOf units(const torch::optim::Optimizer& optimizer,
                              const std::vector<torch::nn::Module*>& models) const;

  ShardingSettings settings_;
  std::vector<std::weak_ptr<sharding::OptimizerShards>> shards_;
};

}  // namespace sharding
}  // namespace accel
