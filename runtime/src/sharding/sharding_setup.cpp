#include "sharding_setup.h"

#include "wrap_policy.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <unordered_map>
#include <utility>

namespace accel {
namespace sharding {

bool ShardingSetup::sharded() const {
  return (settings_.distributed || settings_.offload) &&
         settings_.strategy != ShardingStrategy::NoShard;
}

bool ShardingSetup::shards_parameters() const {
  return sharded() && (settings_.strategy == ShardingStrategy::FullShard || hybrid());
}

bool ShardingSetup::hybrid() const {
  return sharded() && settings_.strategy == ShardingStrategy::HybridShard;
}

ShardingStrategy ShardingSetup::effective_strategy() const {
  return sharded() ? settings_.strategy : ShardingStrategy::NoShard;
}

std::shared_ptr<sharding::OptimizerShards> ShardingSetup::shard(
    torch::optim::Optimizer& optimizer, const std::vector<torch::nn::Module*>& models,
    const Placement& placement) {
  const bool full_shard = shards_parameters();
  const auto plan =
      sharding::ShardingPlan(placement.shard_group)
          .reduction(settings_.strategy == ShardingStrategy::ShardOptimizerState
                         ? sharding::GradientReduction::slice_all_reduced
                         : sharding::GradientReduction::reduce_scatter)
          // Gradients are sent in units as large as DDP's buckets.
          .unit_bytes(settings_.unit_bytes)
          .collectives(placement.gloo ? sharding::ShardCollectives::all_reduce
                                      : sharding::ShardCollectives::native)
          .shard_parameters(full_shard)
          .unit_of(units(optimizer, models))
          .replicate_group(placement.replicate_group)
          .offload_to_host(settings_.offload)
          .device_of_empty_weights(full_shard ? std::optional<torch::Device>(placement.device)
                                              : std::nullopt);
  auto shards = std::make_shared<sharding::OptimizerShards>(optimizer, plan);
  if (settings_.reduce_dtype) shards->set_reduce_dtype(*settings_.reduce_dtype);
  shards->set_prefetch(settings_.forward_prefetch, settings_.backward_prefetch);
  // Optimizers destroyed since leave expired entries; they go as new ones come.
  shards_.erase(std::remove_if(shards_.begin(), shards_.end(),
                               [](const auto& weak) { return weak.expired(); }),
                shards_.end());
  shards_.push_back(shards);
  return shards;
}

std::vector<std::shared_ptr<sharding::OptimizerShards>> ShardingSetup::live() const {
  std::vector<std::shared_ptr<sharding::OptimizerShards>> live;
  for (const auto& weak : shards_) {
    if (auto shard = weak.lock()) live.push_back(std::move(shard));
  }
  return live;
}

sharding::ShardUnitOf ShardingSetup::units(const torch::optim::Optimizer& optimizer,
                                           const std::vector<torch::nn::Module*>& models) const {
  // Each parameter's model: sharded parameters are served to every process's operators alike,
  // so they must be the same everywhere first, as prepare(model) makes them.
  std::unordered_map<const c10::TensorImpl*, int64_t> units;
  const auto& classes = settings_.wrap_classes;
  const int64_t min_num_params = settings_.min_num_params;
  const bool by_size = min_num_params > 0;
  // ZeRO-1 and -2 send gradients in runs of about a bucket, unless a unit's parameters must be
  // the ones a forward uses or leaves out together.
  const bool conditional = settings_.units_by_use;
  if (!shards_parameters() && !conditional) return nullptr;
  const bool by_module = classes.empty() && !by_size && conditional;
  const bool by_policy = !classes.empty() || by_size || by_module;
  int64_t next = 1;
  for (const auto* model : models) {
    if (!by_policy) {
      for (const auto& p : model->parameters()) units[p.unsafeGetTensorImpl()] = 0;
      continue;
    }
    const auto policy = by_module ? sharding::units_by_module(*model, next)
                        : by_size ? sharding::units_by_size(*model, min_num_params, next)
                                  : sharding::units_by_class(*model, classes, next);
    for (const auto& [param, unit] : policy) {
      units[param] = unit;
      next = std::max(next, unit + 1);
    }
  }
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& p : group.params()) {
      TORCH_CHECK(units.count(p.unsafeGetTensorImpl()) != 0, "accel: ", settings_.strategy,
                  " shards the parameters of prepared models: prepare the model before its "
                  "optimizer (an optimizer parameter belongs to no prepared model)");
    }
  }
  // Without a wrap policy, units are runs of parameters of about a bucket (OptimizerShards' own
  // rule).
  if (!by_policy) return nullptr;
  return [units = std::move(units)](const torch::Tensor& p) {
    return units.at(p.unsafeGetTensorImpl());
  };
}

}  // namespace sharding
}  // namespace accel
