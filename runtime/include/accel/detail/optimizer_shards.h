#pragma once

// ZeRO stages 1 and 2 for one prepared optimizer (sharding strategies SHARD_OPTIMIZER_STATE and
// SHARD_GRAD_OP), used by AcceleratedOptimizer and the Accelerator.
//
// The parameters of each parameter group are laid end to end in one flat buffer, padded to a
// multiple of the process count, and become views of it (FSDP's flat parameter); process r owns
// the r-th equal slice. The optimizer is handed that slice in place of the group's parameters: one
// flat tensor per group, the "shard", whose gradient is this process's slice of the averaged
// gradients and whose optimizer state (Adam's moments, SGD's momentum) exists only here, 1/N of
// it. A step updates the shard, and so this process's part of the parameters, in place; an
// all-gather then fills in the rest. Every process keeps the parameters whole (ZeRO-1 and -2 shard
// gradients and optimizer state, not parameters).
//
// Elementwise optimizers (SGD, Adam, AdamW, Adagrad, RMSprop) give the same update on a flat slice
// as on the parameters; LBFGS, which takes whole-model dot products, is refused.

#include <ATen/core/Tensor.h>
#include <c10/util/intrusive_ptr.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace c10d {
class ProcessGroup;
}
namespace torch {
namespace optim {
class Optimizer;
}
}  // namespace torch

namespace accel {
namespace detail {

class OptimizerShards {
 public:
  /// How the full gradients become this process's averaged slice.
  enum class Reduction {
    /// Backward all-reduced them already (ZeRO-1): the slice is cut out.
    slice_all_reduced,
    /// Backward left each process its own (ZeRO-2): one reduce-scatter per group, then the full
    /// gradients are freed.
    reduce_scatter,
  };

  /// Replaces the parameters of each of `optimizer`'s groups by this process's shard of them.
  OptimizerShards(torch::optim::Optimizer& optimizer, c10::intrusive_ptr<c10d::ProcessGroup> group,
                  Reduction reduction);
  ~OptimizerShards();
  OptimizerShards(const OptimizerShards&) = delete;
  OptimizerShards& operator=(const OptimizerShards&) = delete;

  /// Adds the full parameters' gradients, averaged over the processes, to the shards' and frees
  /// the full ones. Nothing to do (and no collective) when no full parameter has a gradient; every
  /// process runs the same program, so all agree. Before the first reduction, and after
  /// `refresh_from_parameters`, the shards are first set from the parameters.
  void reduce_gradients();
  /// After a step: the updated shards, all-gathered into the full parameters.
  void gather_parameters();
  /// The parameters will be checked for replaced data before the next use (after the model's
  /// weights were loaded).
  void refresh_from_parameters();
  /// Frees (or zeroes) the full parameters' gradients; the shards' are the optimizer's to clear.
  void zero_full_gradients(bool set_to_none);

  /// This process's parts of the gradients of those of `parameters` it shards (a view of the
  /// shard gradient per piece), for clipping; `rest` gets the parameters it does not hold.
  void shard_gradients_of(const std::vector<at::Tensor>& parameters,
                          std::vector<at::Tensor>& pieces, std::vector<at::Tensor>& rest);

 private:
  struct Group;
  void ensure_fresh();
  c10::intrusive_ptr<c10d::ProcessGroup> process_group_;
  Reduction reduction_;
  std::vector<Group> groups_;
  bool fresh_ = false;
};

}  // namespace detail
}  // namespace accel
