#include "gradient_sync.h"

#include "collectives.h"
#include "compression_hook.h"
#include "util/torch_compat.h"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>
#include <torch/csrc/distributed/c10d/comm.hpp>

#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <unordered_set>

namespace accel {
namespace distributed {
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

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

/// Joined to a loss by prepare_for_backward. Its value is a zero (in the loss's dtype, so the
/// loss keeps its value and type); its backward gives `usage` this process's `flags` and each
/// parameter in `unreached` a zero gradient, whatever gradient reaches it.
struct UsageNode : public torch::autograd::Function<UsageNode> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& /*usage*/,
                            at::TensorList unreached, const at::Tensor& flags,
                            at::TensorOptions value_options) {
    ctx->saved_data["flags"] = flags;
    ctx->saved_data["unreached"] = unreached.vec();
    return at::zeros({}, value_options);
  }

  static variable_list backward(AutogradContext* ctx, variable_list /*output_gradients*/) {
    variable_list gradients{ctx->saved_data["flags"].toTensor()};
    for (const auto& parameter : ctx->saved_data["unreached"].toTensorVector()) {
      gradients.push_back(at::zeros_like(parameter));
    }
    gradients.emplace_back();  // the flags
    gradients.emplace_back();  // the value's options (every argument has a place)
    return gradients;
  }
};

/// What both unused-parameter errors advise.
constexpr const char* kUnusedParametersAdvice =
    "a model that does not use every trainable parameter in every step needs "
    "AcceleratorOptions().ddp(accel::DistributedDataParallelOptions()"
    ".find_unused_parameters(true)) (ACCEL_DDP_FIND_UNUSED_PARAMETERS=true, or "
    "ddp_find_unused_parameters: true in the config file), or freeze what it never uses with "
    "requires_grad(false)";

std::string names_of(const std::vector<std::string>& names, const std::vector<size_t>& which) {
  std::string joined;
  for (size_t i = 0; i < which.size(); ++i) {
    if (i == 8 && which.size() > 9) {
      joined += ", and " + std::to_string(which.size() - 8) + " more";
      break;
    }
    joined += (i == 0 ? "" : ", ") + names[which[i]];
  }
  return joined;
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
  // A tensor registered under two names (a submodule's weight registered again on its parent,
  // as austinvhuang/libtorch-experiments' NCA does) is one parameter: DDP keeps its first name
  // only. Twice in the reducer, its second entry would never be marked ready.
  std::unordered_set<const c10::TensorImpl*> seen;
  for (const auto& item : module.named_parameters()) {
    const auto& p = item.value();
    if (!seen.insert(p.unsafeGetTensorImpl()).second) continue;
    if (!p.is_meta()) states.push_back(p);
    if (p.requires_grad()) {
      parameters_.push_back(p);
      names_.push_back(item.key());
    }
  }
  for (const auto& b : module.buffers()) {
    if (!b.is_meta()) states.push_back(b);
    buffers_.push_back(b);
  }
  check_same_model(host_group, parameters_);
  host_group_ = c10::intrusive_ptr<c10d::ProcessGroup>::reclaim_copy(&host_group);
  find_unused_ = options.find_unused_parameters().value_or(false);
  static_graph_ = options.static_graph().value_or(false);
  {
    torch::NoGradGuard no_grad;
    if (!states.empty()) c10d::broadcast_coalesced(group_, states, kBroadcastBucketBytes, 0);
  }
  if (!needs_reached()) {
    // Which parameters each backward reaches, as it reaches them: a flag set by a hook on each,
    // in place of a walk of every loss's graph before its backward.
    reached_now_ = std::make_shared<std::vector<uint8_t>>(parameters_.size(), 0);
    for (size_t i = 0; i < parameters_.size(); ++i) {
      reach_hooks_.push_back(parameters_[i].register_hook(
          [flags = reached_now_, i](const at::Tensor&) { (*flags)[i] = 1; }));
    }
  }
  if (parameters_.empty() || !all_reduce_gradients) return;

  // Gradients of the parameters registered last are ready first in backward: bucket them in
  // reverse registration order so the small first bucket goes out as early as possible. After the
  // first synchronised backward the reducer rebuilds the buckets in the observed order.
  // The usage flags ride with the gradients, as the reducer's last parameter: its gradient is
  // ready first (the usage node is the last one the forward made), so it goes first.
  usage_ = torch::zeros({2 * static_cast<int64_t>(parameters_.size()) + 1},
                        torch::dtype(torch::kFloat).device(parameters_.front().device()))
               .requires_grad_(true);
  std::vector<torch::Tensor> reduced = parameters_;
  reduced.push_back(usage_);
  std::vector<torch::Tensor> ready_order(reduced.rbegin(), reduced.rend());
  std::vector<int64_t> indices(reduced.size());
  std::iota(indices.rbegin(), indices.rend(), 0);
  std::vector<std::vector<size_t>> buckets;
  std::tie(buckets, std::ignore) = c10d::compute_bucket_assignment_by_size(
      ready_order,
      {static_cast<size_t>(kFirstBucketBytes), static_cast<size_t>(options.bucket_cap_mb() << 20)},
      std::vector<bool>(reduced.size(), false), indices);
  reducer_ = util::make_reducer(std::move(reduced), std::move(buckets), group_,
                                options.bucket_cap_mb() << 20, kFirstBucketBytes,
                                options.gradient_as_bucket_view());
  gradients_are_views_ = options.gradient_as_bucket_view();
  const auto hook = options.comm_hook().value_or(DdpCommHook::No);
  if (hook != DdpCommHook::No) {
    compression_ = std::make_shared<CompressionBytes>();
    reducer_->register_comm_hook(std::make_unique<CompressionHook>(
        group_, hook == DdpCommHook::Bf16 ? at::kBFloat16 : at::kHalf, compression_));
  }
  // The reducer's constructor makes existing gradients bucket views already.
  finish_backward();
}

std::pair<int64_t, int64_t> GradientSynchronizer::compressed_bytes() const {
  if (!compression_) return {0, 0};
  return {compression_->buckets.load(), compression_->sent.load()};
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

GradientSynchronizer::~GradientSynchronizer() {
  for (size_t i = 0; i < reach_hooks_.size(); ++i) parameters_[i].remove_hook(reach_hooks_[i]);
}

torch::Tensor GradientSynchronizer::prepare_for_backward(
    const torch::Tensor& loss, const std::unordered_set<const c10::TensorImpl*>* reached,
    bool reached_in_part, bool ends_window) {
  if (parameters_.empty()) return loss;
  const size_t count = parameters_.size();
  used_in_window_.resize(count, false);
  auto flags = torch::zeros({2 * static_cast<int64_t>(count) + 1}, torch::kFloat);
  float* flag = flags.data_ptr<float>();
  std::vector<torch::Tensor> unreached;
  std::vector<size_t> unknown;
  if (reached == nullptr) {
    // Every parameter counts as reached here; the hooks tell check_usage which were.
    TORCH_INTERNAL_ASSERT(reached_now_, "the reach hooks are missing");
    std::fill(reached_now_->begin(), reached_now_->end(), 0);
    std::fill(flag, flag + 2 * count, 1.0f);
    watching_reach_ = true;
  }
  for (size_t i = 0; reached != nullptr && i < count; ++i) {
    const auto& p = parameters_[i];
    bool hit = reached->count(p.unsafeGetTensorImpl()) > 0;
    if (!hit && reached_in_part) {
      // Perhaps inside an accel::checkpoint block: backward will tell, by running it again.
      unknown.push_back(i);
      hit = true;
    }
    flag[i] = hit ? 1.0f : 0.0f;
    const bool used = hit || p.grad().defined() || used_in_window_[i];
    flag[count + i] = used ? 1.0f : 0.0f;
    used_in_window_[i] = used && !ends_window;
    if (!hit) unreached.push_back(p);
  }
  flag[2 * count] = 1.0f;
  TORCH_CHECK(unknown.empty() || !(find_unused_ || static_graph_),
              "accel: find_unused_parameters (or static_graph) cannot tell whether ",
              names_of(names_, unknown),
              " are unused or used inside an accel::checkpoint block, whose parameters backward "
              "reaches only when it runs the block again; checkpoint by "
              "fsdp_activation_checkpointing or CheckpointWrapper, or leave the option off if "
              "the model uses every parameter");
  usage_armed_ = true;
  if (!reducer_) {
    // The sharded strategies send a unit's gradients whether or not all came: the flags go by
    // a collective of their own, after backward, where a verdict needs every process's.
    if (reached != nullptr) pending_flags_ = flags;
    return loss;
  }
  // Collective when due (once, after the first synchronised backward); every process reaches it
  // at the same step.
  reducer_->rebuild_buckets();
  reducer_->prepare_for_backward({});
  ++backwards_;
  {
    torch::NoGradGuard no_grad;
    if (usage_.grad().defined()) usage_.mutable_grad().zero_();  // a backward that threw
  }
  return loss + UsageNode::apply(usage_, at::TensorList(unreached), flags.to(usage_.device()),
                                 loss.options());
}

std::string GradientSynchronizer::check_reached() {
  watching_reach_ = false;
  std::vector<size_t> missed;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    if ((*reached_now_)[i] == 0) missed.push_back(i);
  }
  if (missed.empty()) return "";
  if (reducer_) {
    // Their buckets never went out: zero gradients send them, as find_unused_parameters would
    // have, so that a process whose loss reached them is not left waiting and the reducer
    // finishes this backward.
    torch::AutoGradMode grad_mode(true);
    torch::Tensor zero;
    for (auto i : missed) {
      auto term = (parameters_[i] * 0).sum();
      zero = zero.defined() ? zero + term : term;
    }
    zero.backward();
    finish_backward();
  }
  return "accel: " + names_of(names_, missed) + " got no gradient in this step on process " +
         std::to_string(host_group_->getRank()) +
         " (its loss does not reach them; they were given zeros); " + kUnusedParametersAdvice;
}

GradientSynchronizer::UsageVerdict GradientSynchronizer::check_usage() {
  UsageVerdict verdict;
  if (!usage_armed_) return verdict;
  usage_armed_ = false;
  if (watching_reach_) {
    verdict.error = check_reached();
    if (reducer_) {
      torch::NoGradGuard no_grad;
      usage_.mutable_grad().zero_();
    }
    return verdict;
  }
  torch::NoGradGuard no_grad;
  const float processes = static_cast<float>(host_group_->getSize());
  torch::Tensor flags;
  if (reducer_) {
    auto& averaged = usage_.mutable_grad();
    TORCH_INTERNAL_ASSERT(averaged.defined(), "the usage flags were not reduced");
    flags = averaged.to(torch::kCPU, torch::kFloat, /*non_blocking=*/false, /*copy=*/true);
    averaged.zero_();
  } else {
    flags = std::move(pending_flags_);
    all_reduce(*host_group_, flags, Reduction::Sum);
    flags.div_(processes);
  }
  const size_t count = parameters_.size();
  const float* flag = flags.data_ptr<float>();
  // Each flag is averaged over the processes: 1/N per process that set it. Processes shadowing
  // a backward under join_uneven_inputs contribute zeros to all, "present" included.
  const float half = 0.5f / processes;
  const float present = flag[2 * count];
  std::vector<size_t> missed;
  std::vector<bool> everywhere(count);
  for (size_t i = 0; i < count; ++i) {
    everywhere[i] = flag[i] > present - half;
    if (!everywhere[i]) missed.push_back(i);
    if ((find_unused_ || static_graph_) && flag[count + i] < half) {
      verdict.unused.push_back(parameters_[i]);
      // Their gradients are the zeros the usage node gave: none, as on one process.
      if (reducer_) parameters_[i].mutable_grad() = torch::Tensor();
    }
  }
  if (static_graph_) {
    if (static_reached_.empty()) {
      static_reached_ = everywhere;
      return verdict;
    }
    std::vector<size_t> changed;
    for (size_t i = 0; i < count; ++i) {
      if (everywhere[i] != static_reached_[i]) changed.push_back(i);
    }
    if (changed.empty()) return verdict;
    verdict.error =
        "accel: static_graph is set, and the use of " + names_of(names_, changed) +
        " changed since the first step (a parameter used by every process then is not now, or "
        "the other way round); a model whose set of used parameters changes needs "
        "DistributedDataParallelOptions().find_unused_parameters(true) in place of "
        "static_graph (ACCEL_DDP_FIND_UNUSED_PARAMETERS=true)";
    return verdict;
  }
  if (find_unused_ || missed.empty()) return verdict;
  // Where they were missed: on every process (the loss reaches none of them anywhere), or on
  // some only (the flags say how many reached each).
  const bool nowhere =
      std::all_of(missed.begin(), missed.end(), [&](size_t i) { return flag[i] < half; });
  verdict.error = "accel: " + names_of(names_, missed) + " got no gradient in this step " +
                  (nowhere ? std::string("on any process") : std::string("on some processes")) +
                  " (its loss does not reach them); " + kUnusedParametersAdvice;
  return verdict;
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

std::unordered_set<const c10::TensorImpl*> autograd_leaves(
    const torch::Tensor& loss, const std::function<void(const torch::autograd::Node&)>& visit) {
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
    if (visit) visit(*node);
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

}  // namespace distributed
}  // namespace accel
