#pragma once

// How gradients reach an OptimizerShards' shards (its private part, gradient_pipeline.cpp):
// ZeRO-2's and -3's reduce-scatter of each unit as soon as backward has finished its gradients
// (hooks on the parameters' accumulators, a bounded number of units under way, each in a reused
// send buffer, in the reduce dtype), or a slice cut from gradients backward all-reduced whole
// (ZeRO-1); then averaged, summed over HYBRID_SHARD's replicas first. OptimizerShards owns one
// and keeps the units, the step and the gathers.

#include "optimizer_shards.h"

#include <torch/csrc/autograd/function.h>
#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

namespace accel {
namespace sharding {

class OptimizerShards::GradientPipeline {
 public:
  /// Over `units` (complete; they outlive the pipeline), as `plan` says; with reduce-scatter,
  /// hooks on every parameter's gradient accumulator. `units_in_flight`: send buffers.
  GradientPipeline(std::vector<Unit>& units, const ShardingPlan& plan, size_t units_in_flight);
  /// Removes the hooks and waits for what is under way (its buffers must outlive it).
  ~GradientPipeline();
  GradientPipeline(const GradientPipeline&) = delete;
  GradientPipeline& operator=(const GradientPipeline&) = delete;

  /// See OptimizerShards::arm, finish_backward, reduce_gradients and set_reduce_dtype.
  void arm();
  void finish_backward(bool completed);
  /// Gradients still whole, onto the shards (there is one, as the caller checked).
  void reduce_whole_gradients();
  void set_reduce_dtype(c10::ScalarType dtype);
  int64_t reduce_scattered_bytes() const { return reduce_scattered_bytes_; }

 private:
  void install_hooks();
  void gradient_ready(size_t unit, size_t param);
  /// Sends the next unit in launch order (waiting for the oldest when too many are under way).
  void send_next();
  /// Waits for the oldest unit under way and adds its slice to its shard's gradient.
  void collect_next();
  void launch(Unit& unit, const at::Tensor& buffer);
  void wait_and_deliver(Unit& unit);
  void deliver(Unit& unit, at::Tensor mine);

  std::vector<Unit>& units_;
  c10::intrusive_ptr<c10d::ProcessGroup> process_group_;
  c10::intrusive_ptr<c10d::ProcessGroup> replicate_group_;  // HYBRID_SHARD: the other machines
  GradientReduction reduction_;
  bool through_all_reduce_;           // ShardCollectives::all_reduce
  std::vector<size_t> launch_order_;  // units in the order their gradients are sent
  std::vector<std::pair<std::shared_ptr<torch::autograd::Node>, uintptr_t>> hooks_;
  std::vector<at::Tensor> send_buffers_;  // one per unit in flight, of the largest unit's size
  int64_t largest_unit_ = 0;
  std::optional<c10::ScalarType> reduce_dtype_;  // the parameters' dtype when unset
  int64_t reduce_scattered_bytes_ = 0;
  std::mutex mutex_;  // autograd may run hooks on its device threads
  bool armed_ = false;
  size_t next_launch_ = 0;   // launch_order_ index of the next unit to send
  size_t next_deliver_ = 0;  // ... and of the next whose result to collect
};

}  // namespace sharding
}  // namespace accel
