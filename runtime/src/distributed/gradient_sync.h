#pragma once

// Data-parallel gradient averaging for one prepared model, on c10d's Reducer: gradients are copied
// into buckets (1 MiB first, then `bucket_cap_mb`, in the order gradients become ready), or are
// views of them, and each bucket's all-reduce starts from an autograd hook as soon as it is full,
// overlapping the rest of backward.

#include <accel/ddp_options.h>

#include <torch/nn/module.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <functional>
#include <memory>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

namespace c10d {
class Reducer;
}
namespace torch {
namespace autograd {
struct Node;
}
}  // namespace torch

namespace accel {
namespace distributed {

struct CompressionBytes;

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

  /// Whether prepare_for_backward needs the parameters the loss reaches (a walk of its graph):
  /// under find_unused_parameters or static_graph only, as DDP walks the graph only then.
  bool needs_reached() const { return find_unused_ || static_graph_; }
  /// Arms the reducer so that the backward of `loss` averages this model's gradients, and
  /// returns the loss to run that backward from: `loss` joined to a node whose backward gives the
  /// reducer this process's usage flags to average with the gradients (see check_usage) and,
  /// where `reached` is given (needs_reached(): those `loss` reaches), gives the parameters not
  /// in it a zero gradient, so that the reducer hears from every parameter and no process waits.
  /// With `reached_in_part` (the graph holds accel::checkpoint blocks, whose parameters backward
  /// reaches only when it runs them again) the parameters not in `reached` are left alone.
  /// Without `reached`, the parameters backward reaches are seen as it reaches them (a hook on
  /// each), and check_usage completes and names those it did not. `ends_window`: this backward
  /// is the accumulation window's last (with sync_each_batch, earlier micro-steps synchronise
  /// too, and what they used counts as used in the window).
  torch::Tensor prepare_for_backward(const torch::Tensor& loss,
                                     const std::unordered_set<const c10::TensorImpl*>* reached,
                                     bool reached_in_part, bool ends_window);
  /// What check_usage found.
  struct UsageVerdict {
    /// Under find_unused_parameters or static_graph: the parameters no process used in the
    /// accumulation window (left with an undefined gradient where the reducer averaged them).
    std::vector<torch::Tensor> unused;
    /// What is wrong, for the caller to raise once its own bookkeeping is done: without those
    /// options, the parameters this process's loss did not reach (given zero gradients first,
    /// so that every bucket went out and no process waits); under find_unused_parameters, none;
    /// under static_graph, those whose use changed since the first step. Empty when nothing is.
    std::string error;
  };
  /// After that backward completed. Under find_unused_parameters or static_graph, from the flags
  /// every process contributed (carried with the gradients by the reducer, or, for the sharded
  /// strategies, which have none, by an all-reduce of their own): every process reaches the same
  /// verdict. Without them, from the hooks of this process: no collective.
  UsageVerdict check_usage();
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
  /// Under a compression hook: the bytes of the buckets, and the bytes sent for them, so far.
  std::pair<int64_t, int64_t> compressed_bytes() const;
  /// Backwards that averaged (or shadowed) this model's gradients so far.
  int64_t synchronised_backwards() const { return reducer_ ? backwards_ : 0; }
  /// True when any of this model's trainable parameters is among `leaves`.
  bool uses_any(const std::unordered_set<const c10::TensorImpl*>& leaves) const;

 private:
  /// check_usage without needs_reached(): the parameters this backward did not reach, sent as
  /// zeros, and named (the error), or "".
  std::string check_reached();

  c10::intrusive_ptr<c10d::ProcessGroup> group_;
  std::vector<torch::Tensor> parameters_;
  std::vector<std::string> names_;  // parameters_'s module paths
  /// The reducer's last parameter: its gradient carries each process's usage flags, averaged
  /// with the gradients: [reached by the loss (P), used in the window (P), present (1)].
  torch::Tensor usage_;
  bool usage_armed_ = false;  // prepare_for_backward joined the usage node to this loss
  bool find_unused_ = false, static_graph_ = false;
  c10::intrusive_ptr<c10d::ProcessGroup> host_group_;  // the flags' collective, without a reducer
  torch::Tensor pending_flags_;       // without a reducer: this backward's flags, sent after it
  std::vector<bool> static_reached_;  // static_graph: the parameters the first step reached
  /// Parameters this process used in synchronising backwards of the window under way, before
  /// this one (sync_each_batch: the sharded strategies free the gradients they send).
  std::vector<bool> used_in_window_;
  std::shared_ptr<CompressionBytes> compression_;  // with a comm hook
  std::vector<torch::Tensor> buffers_;
  std::unique_ptr<c10d::Reducer> reducer_;
  /// Without needs_reached(): which parameters this backward has reached so far, set by a hook
  /// on each (shared with the hooks, which may outlive a moment of this object's destruction).
  std::shared_ptr<std::vector<uint8_t>> reached_now_;
  std::vector<unsigned> reach_hooks_;  // parameters_[i]'s hook
  bool watching_reach_ = false;        // prepare_for_backward armed the hooks for this backward
  bool gradients_are_views_ = false;   // gradient_as_bucket_view
  int64_t backwards_ = 0;              // synchronising backwards armed so far
};

/// The leaf tensors (parameters) that backward from `loss` would reach. `visit`, when given, sees
/// every node of the graph on the way.
std::unordered_set<const c10::TensorImpl*> autograd_leaves(
    const torch::Tensor& loss,
    const std::function<void(const torch::autograd::Node&)>& visit = nullptr);

}  // namespace distributed
}  // namespace accel
