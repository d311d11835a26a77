#pragma once

// clip_grad_norm_ and clip_grad_value_ over gradients as a process holds them: whole, cut into
// a sharded optimizer's pieces, or sliced by tensor parallelism. The Accelerator's clip calls
// synchronise and unscale first, then hand the gradients here.

#include "sharding/optimizer_shards.h"

#include <torch/types.h>

#include <memory>
#include <vector>

namespace accel {
namespace core {

/// The gradients of some parameters as this process holds them: the pieces of its optimizers'
/// shards, and the whole gradients of the parameters no shard holds.
struct HeldGradients {
  std::vector<torch::Tensor> pieces;
  std::vector<torch::Tensor> whole;
};
HeldGradients held_gradients(const std::vector<std::shared_ptr<sharding::OptimizerShards>>& shards,
                             const std::vector<torch::Tensor>& parameters);

/// The norm of this process's gradients of `parameters` as they are, divided by the loss scale
/// `scale` (no collective): what clip_grad_norm_ returns inside an accumulation window.
double local_grad_norm(const std::vector<torch::Tensor>& parameters, double norm_type,
                       const torch::Device& device, double scale);

/// Where split gradients' norm terms are combined.
struct SplitNormGroups {
  /// The processes a sharded strategy cuts the shards among; null where nothing is sharded.
  c10d::ProcessGroup* shard_group = nullptr;
  /// The tensor-parallel group; null without tensor parallelism.
  c10d::ProcessGroup* tp_group = nullptr;
  /// The pipeline's group, whose processes hold different stages; null without a pipeline.
  c10d::ProcessGroup* pp_group = nullptr;
};

/// clip_grad_norm_ over gradients split across processes: sharded by a strategy, sliced by
/// tensor parallelism, or both. Returns the total norm before clipping.
double clip_split_grad_norm(const std::vector<std::shared_ptr<sharding::OptimizerShards>>& shards,
                            const std::vector<torch::Tensor>& parameters, double max_norm,
                            double norm_type, const SplitNormGroups& groups,
                            const torch::Device& device);

}  // namespace core
}  // namespace accel
