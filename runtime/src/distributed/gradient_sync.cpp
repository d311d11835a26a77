#include "gradient_sync.h"

#include "collectives.h"
#include "util/torch_compat.h"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>
#include <torch/csrc/distributed/c10d/comm.hpp>

#include <c10/util/Exception.h>

#include <algorithm>
#include <numeric>

namespace accel {
namespace detail {
namespace {

// As DistributedDataParallel's broadcast of module states at construction.
constexpr size_t kBroadcastBucketBytes = 250 * 1024 * 1024;

void check_same_model(c10d::ProcessGroup& group, const std::vector<torch::Tensor>& parameters) {
  int64_t elements = 0;
  for (const auto& p : parameters) elements += p.numel();
  auto mine = torch::tensor({static_cast<int64_t>(parameters.size()), elements}, torch::kInt64);
  auto all = all_gather(group, mine);
  for (size_t r = 1; r < all.size(); ++r) {
    if (torch::equal(all[r], all[0])) continue;
    TORCH_CHECK(false,
                "accel: prepare(model) was given different models on different processes: "
                "rank 0 has ",
                all[0][0].item<int64_t>(), " parameters (", all[0][1].item<int64_t>(),
                " elements), rank ", r, " has ", all[r][0].item<int64_t>(), " (",
                all[r][1].item<int64_t>(), " elements)");
  }
}

}  // namespace

GradientSynchronizer::GradientSynchronizer(const torch::nn::Module& module,
                                           c10::intrusive_ptr<c10d::ProcessGroup> device_group,
                                           c10d::ProcessGroup& host_group,
                                           const DistributedDataParallelOptions& options,
                                           bool all_reduce_gradients)
    : group_(std::move(device_group)) {
  // Every process starts from rank 0's values (FSDP's sync_module_states); empty (meta)
  // tensors of a model built with init_empty_weights have none, and a load fills them alike
  // everywhere.
  std::vector<torch::Tensor> states;
  for (const auto& p : module.parameters()) {
    if (!p.is_meta()) states.push_back(p);
    if (p.requires_grad()) parameters_.push_back(p);
  }
  for (const auto& b : module.buffers()) {
    if (!b.is_meta()) states.push_back(b);
    buffers_.push_back(b);
  }
  check_same_model(host_group, parameters_);
  {
    torch::NoGradGuard no_grad;
    if (!states.empty()) c10d::broadcast_coalesced(group_, states, kBroadcastBucketBytes, 0);
  }
  if (parameters_.empty() || !all_reduce_gradients) return;

  // Gradients of the parameters registered last are ready first in backward: bucket them in
  // reverse registration order so the small first bucket goes out as early as possible. After the
  // first synchronised backward the reducer rebuilds the buckets in the observed order.
  std::vector<torch::Tensor> ready_order(parameters_.rbegin(), parameters_.rend());
  std::vector<int64_t> indices(parameters_.size());
  std::iota(indices.rbegin(), indices.rend(), 0);
  std::vector<std::vector<size_t>> buckets;
  std::tie(buckets, std::ignore) = c10d::compute_bucket_assignment_by_size(
      ready_order,
      {static_cast<size_t>(kFirstBucketBytes), static_cast<size_t>(options.bucket_cap_mb() << 20)},
      std::vector<bool>(parameters_.size(), false), indices);
  reducer_ = make_reducer(parameters_, std::move(buckets), group_, options.bucket_cap_mb() << 20,
                          kFirstBucketBytes, options.gradient_as_bucket_view());
  gradients_are_views_ = options.gradient_as_bucket_view();
  // The reducer's constructor makes existing gradients bucket views already.
  finish_backward();
}

void GradientSynchronizer::finish_backward() {
  // With gradient_as_bucket_view the reducer leaves each gradient an autograd view of its bucket,
  // and LibTorch's Optimizer::zero_grad calls detach_(), which throws on a view. A tensor set_()
  // to the same memory is not a view: it still aliases the bucket, so the reducer goes on using it
  // in place, and every zero_grad works on it.
  if (!gradients_are_views_) return;
  torch::NoGradGuard no_grad;
  for (auto& p : parameters_) {
    auto& grad = p.mutable_grad();
    if (!grad.defined() || !grad.is_view()) continue;
    auto alias = torch::empty({0}, grad.options());
    alias.set_(grad.storage(), grad.storage_offset(), grad.sizes(), grad.strides());
    grad = alias;
  }
}

GradientSynchronizer::~GradientSynchronizer() = default;

void GradientSynchronizer::prepare_for_backward() {
  if (!reducer_) return;
  // Collective when due (once, after the first synchronised backward); every process reaches it
  // at the same step.
  reducer_->rebuild_buckets();
  reducer_->prepare_for_backward({});
  ++backwards_;
}

void GradientSynchronizer::shadow_backward() {
  if (!reducer_) return;
  // As prepare_for_backward on the processes that train: the bucket rebuild is a collective once a
  // backward has recorded the order in which gradients become ready, that is from the job's second
  // synchronising backward on (at the first, every process's rebuild does nothing). A process that
  // has only shadowed recorded no order; any will do, as the main process's assignment is the one
  // every process adopts. (Recording does nothing once an order is recorded or the buckets are
  // rebuilt.)
  if (backwards_ > 0) {
    reducer_->push_rebuilt_params_for_all_indices();
    reducer_->rebuild_buckets();
  }
  ++backwards_;
  std::vector<c10::intrusive_ptr<c10::ivalue::Future>> pending;
  for (auto& bucket : reducer_->get_grad_buckets(/*return_zero_tensors=*/true)) {
    pending.push_back(reducer_->run_comm_hook(bucket));
  }
  for (auto& future : pending) future->wait();
}

void GradientSynchronizer::broadcast_from(int64_t rank) {
  std::vector<torch::Tensor> states = parameters_;
  states.insert(states.end(), buffers_.begin(), buffers_.end());
  if (states.empty()) return;
  torch::NoGradGuard no_grad;
  c10d::broadcast_coalesced(group_, states, kBroadcastBucketBytes, static_cast<int>(rank));
}

void GradientSynchronizer::sync_buffers() {
  if (buffers_.empty()) return;
  torch::NoGradGuard no_grad;
  c10d::broadcast_coalesced(group_, buffers_, kBroadcastBucketBytes, 0);
}

bool GradientSynchronizer::uses_any(
    const std::unordered_set<const c10::TensorImpl*>& leaves) const {
  return std::any_of(parameters_.begin(), parameters_.end(), [&](const torch::Tensor& p) {
    return leaves.count(p.unsafeGetTensorImpl()) > 0;
  });
}

std::unordered_set<const c10::TensorImpl*> autograd_leaves(const torch::Tensor& loss) {
  std::unordered_set<const c10::TensorImpl*> leaves;
  if (!loss.grad_fn()) {
    if (loss.requires_grad()) leaves.insert(loss.unsafeGetTensorImpl());
    return leaves;
  }
  std::vector<torch::autograd::Node*> stack{loss.grad_fn().get()};
  std::unordered_set<torch::autograd::Node*> seen{stack.back()};
  while (!stack.empty()) {
    auto* node = stack.back();
    stack.pop_back();
    if (auto* accumulate = dynamic_cast<torch::autograd::AccumulateGrad*>(node)) {
      leaves.insert(accumulate->variable.unsafeGetTensorImpl());
    }
    for (const auto& edge : node->next_edges()) {
      auto* next = edge.function.get();
      if (next != nullptr && seen.insert(next).second) stack.push_back(next);
    }
  }
  return leaves;
}

}  // namespace detail
}  // namespace accel
