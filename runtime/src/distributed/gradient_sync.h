#pragma once

// Data-parallel gradient averaging for one prepared model, on c10d's Reducer: gradients are copied
// into buckets (1 MiB first, then `bucket_cap_mb`, in the order gradients become ready), or are
// views of them, and each bucket's all-reduce starts from an autograd hook as soon as it is full,
// overlapping the rest of backward.

#include <accel/options.h>

#include <torch/nn/module.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <memory>
#include <unordered_set>
#include <vector>

namespace c10d {
class Reducer;
}

namespace accel {
namespace detail {

/// The first bucket's cap, as torch DistributedDataParallel's: small, so that communication starts
/// early in backward.
constexpr int64_t kFirstBucketBytes = 1024 * 1024;

class GradientSynchronizer {
 public:
  /// Checks that every process built the same model (over `host_group`, on the CPU), copies rank
  /// 0's parameters and buffers to all processes and, with `all_reduce_gradients`, installs the
  /// reducer's hooks (over `device_group`, where the model lives). Without it (ZeRO-2, whose
  /// optimizer reduce-scatters the gradients after backward) backward leaves them alone.
  GradientSynchronizer(const torch::nn::Module& module,
                       c10::intrusive_ptr<c10d::ProcessGroup> device_group,
                       c10d::ProcessGroup& host_group,
                       const DistributedDataParallelOptions& options,
                       bool all_reduce_gradients = true);
  ~GradientSynchronizer();
  GradientSynchronizer(const GradientSynchronizer&) = delete;
  GradientSynchronizer& operator=(const GradientSynchronizer&) = delete;

  /// Arms the reducer so that the next backward averages this model's gradients.
  void prepare_for_backward();
  /// For a process that has run out of batches under join_uneven_inputs: takes part in the
  /// all-reduces another process's synchronising backward makes, bucket by bucket in the
  /// reducer's order, contributing zeros.
  void shadow_backward();
  /// After backward (also when it threw): gradients that are views of buckets become plain tensors
  /// over the same memory.
  void finish_backward();
  /// Copies rank 0's buffers (e.g. batch-norm statistics) to every process.
  void sync_buffers();
  /// Copies process `rank`'s parameters and buffers to every process.
  void broadcast_from(int64_t rank);
  bool has_buffers() const { return !buffers_.empty(); }
  /// Backwards that averaged (or shadowed) this model's gradients so far.
  int64_t synchronised_backwards() const { return reducer_ ? backwards_ : 0; }
  /// True when any of this model's trainable parameters is among `leaves`.
  bool uses_any(const std::unordered_set<const c10::TensorImpl*>& leaves) const;

 private:
  c10::intrusive_ptr<c10d::ProcessGroup> group_;
  std::vector<torch::Tensor> parameters_;
  std::vector<torch::Tensor> buffers_;
  std::unique_ptr<c10d::Reducer> reducer_;
  bool gradients_are_views_ = false;  // gradient_as_bucket_view
  int64_t backwards_ = 0;             // synchronising backwards armed so far
};

/// The leaf tensors (parameters) that backward from `loss` would reach.
std::unordered_set<const c10::TensorImpl*> autograd_leaves(const torch::Tensor& loss);

}  // namespace detail
}  // namespace accel
