#pragma once

// What a prepared optimizer asks of its sharding around a step. Sharding strategies (ZeRO stages
// 1 to 3, CPU offload) replace the optimizer's parameters by this process's shards of them; the
// runtime's sharding/optimizer_shards.h holds how. AcceleratedOptimizer keeps it behind these five
// calls, so the layout, the collectives and their options stay out of the public headers.

namespace torch {
namespace optim {
class Optimizer;
}
}  // namespace torch

namespace accel {

class Accelerator;

namespace detail {

class ShardedStep {
 public:
  virtual ~ShardedStep() = default;
  /// Gradients still whole (ZeRO-1, or a backward not through accelerator.backward) are averaged
  /// over the processes onto the shards' gradients, and freed.
  virtual void reduce_gradients() = 0;
  /// Around the optimizer's own step on the shards: what must not step (parameters no process
  /// used) is kept before and put back after.
  virtual void before_step(torch::optim::Optimizer& optimizer) = 0;
  virtual void after_step(torch::optim::Optimizer& optimizer) = 0;
  /// After a step that ran: the updated shards reach the model's parameters (all-gathered, or
  /// gathered again when next used under FULL_SHARD).
  virtual void gather_parameters() = 0;
  /// zero_grad() for the whole parameters' gradients; the shards' are the optimizer's to clear.
  virtual void zero_full_gradients(bool set_to_none) = 0;
};

/// Who may hand a prepared optimizer its sharding, or look at it: the Accelerator's prepare(),
/// and the runtime's own code and tests through ShardedStepAccess (sharding/optimizer_shards.h).
/// A program cannot make one.
class ShardedStepKey {
  ShardedStepKey() = default;
  friend class accel::Accelerator;
  friend struct ShardedStepAccess;
};

}  // namespace detail
}  // namespace accel
