// ZeRO stages 1 and 2: see accel/detail/optimizer_shards.h for the layout.

#include "accel/detail/optimizer_shards.h"

#include <c10/util/Exception.h>
#include <torch/optim/lbfgs.h>
#include <torch/optim/optimizer.h>
#include <torch/types.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <algorithm>
#include <unordered_map>
#include <utility>

namespace accel {
namespace detail {

struct OptimizerShards::Group {
  std::vector<torch::Tensor> params;  // the group's parameters, whole, in order
  std::vector<int64_t> offsets;       // where each starts in the group's flat range
  int64_t total = 0;                  // elements of all of them
  int64_t shard_size = 0;             // elements each process owns (padding included)
  torch::Tensor flat;                 // the parameters' storage: shard_size x processes elements
  torch::Tensor shard;                // the optimizer's parameter now: this process's slice of it

  /// Parameter i's place in `flat`, shaped as the parameter.
  torch::Tensor slot(size_t i) const {
    return flat.narrow(0, offsets[i], params[i].numel()).view(params[i].sizes());
  }
  /// Makes parameter i's data its slot in `flat` (FSDP's flat parameter): the optimizer's step
  /// on the shard then updates this process's part of the parameters in place, and the
  /// all-gather writes the rest, with no second copy of the parameters. When something replaced
  /// a parameter's data since (model->to(), a load that assigns), its values are the newer ones:
  /// they are copied into the slot first.
  void bind(size_t i) {
    auto& param = params[i];
    auto place = slot(i);
    if (param.data_ptr() == place.data_ptr() && param.sizes() == place.sizes()) return;
    place.copy_(param.detach());
    param.set_data(place);
  }

  /// The part of parameter i inside [begin, end) of the flat range: {start in the parameter,
  /// start in the range, length}; length 0 when they do not meet.
  std::tuple<int64_t, int64_t, int64_t> overlap(size_t i, int64_t begin, int64_t end) const {
    const int64_t first = std::max(offsets[i], begin);
    const int64_t last = std::min(offsets[i] + params[i].numel(), end);
    if (last <= first) return {0, 0, 0};
    return {first - offsets[i], first - begin, last - first};
  }
};

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

OptimizerShards::OptimizerShards(torch::optim::Optimizer& optimizer,
                                 c10::intrusive_ptr<c10d::ProcessGroup> group, Reduction reduction)
    : process_group_(std::move(group)), reduction_(reduction) {
  TORCH_CHECK(dynamic_cast<torch::optim::LBFGS*>(&optimizer) == nullptr,
              "accel: LBFGS cannot be sharded: its step takes dot products over every parameter "
              "at once; use sharding_strategy NO_SHARD with it");
  TORCH_CHECK(optimizer.state().empty(),
              "accel: a sharded optimizer must be prepared before its first step (its state "
              "would have to be cut into shards)");
  const int64_t processes = process_group_->getSize();
  for (auto& param_group : optimizer.param_groups()) {
    Group group;
    group.params = param_group.params();
    for (const auto& p : group.params) {
      const auto& first = group.params.front();
      TORCH_CHECK(p.scalar_type() == first.scalar_type() && p.device() == first.device(),
                  "accel: sharding needs the parameters of each optimizer parameter group to "
                  "share one dtype and device; this group mixes ",
                  first.scalar_type(), " on ", first.device(), " with ", p.scalar_type(), " on ",
                  p.device());
      TORCH_CHECK(p.layout() == torch::kStrided,
                  "accel: sharding needs dense parameters (a parameter has layout ", p.layout(),
                  ")");
      group.offsets.push_back(group.total);
      group.total += p.numel();
    }
    group.shard_size = ceil_div(group.total, processes);
    const auto options = group.params.empty() ? torch::TensorOptions(torch::kFloat)
                                              : group.params.front().options().requires_grad(false);
    group.flat = torch::zeros({group.shard_size * processes}, options);
    {
      torch::NoGradGuard no_grad;
      for (size_t i = 0; i < group.params.size(); ++i) group.bind(i);
    }
    group.shard =
        group.flat.narrow(0, process_group_->getRank() * group.shard_size, group.shard_size)
            .detach()
            .requires_grad_(true);
    param_group.params() = {group.shard};
    groups_.push_back(std::move(group));
  }
}

OptimizerShards::~OptimizerShards() = default;

void OptimizerShards::ensure_fresh() {
  if (fresh_) return;
  torch::NoGradGuard no_grad;
  for (auto& group : groups_) {
    for (size_t i = 0; i < group.params.size(); ++i) group.bind(i);
  }
  fresh_ = true;
}

void OptimizerShards::refresh_from_parameters() { fresh_ = false; }

void OptimizerShards::reduce_gradients() {
  bool any = false;
  for (const auto& group : groups_) {
    for (const auto& p : group.params) any = any || p.grad().defined();
  }
  if (!any) return;
  ensure_fresh();
  torch::NoGradGuard no_grad;
  const int64_t processes = process_group_->getSize();
  const int64_t begin_of_mine = process_group_->getRank();
  for (auto& group : groups_) {
    if (group.total == 0) continue;
    torch::Tensor mine;
    const auto grad_options = group.shard.options().requires_grad(false);
    if (reduction_ == Reduction::reduce_scatter) {
      // Every process's gradients laid out flat (zeros for parameters without one), summed
      // slice by slice onto their owners.
      auto flat = torch::zeros({group.shard_size * processes}, grad_options);
      for (size_t i = 0; i < group.params.size(); ++i) {
        const auto& grad = group.params[i].grad();
        if (!grad.defined()) continue;
        flat.narrow(0, group.offsets[i], grad.numel()).copy_(grad.reshape(-1));
      }
      mine = torch::empty({group.shard_size}, grad_options);
      c10d::ReduceScatterOptions options;
      options.reduceOp = c10d::ReduceOp::SUM;
      process_group_->_reduce_scatter_base(mine, flat, options)->wait();
      mine.div_(processes);
    } else {
      const int64_t begin = begin_of_mine * group.shard_size, end = begin + group.shard_size;
      mine = torch::zeros({group.shard_size}, grad_options);
      for (size_t i = 0; i < group.params.size(); ++i) {
        const auto& grad = group.params[i].grad();
        const auto [in_param, in_shard, length] = group.overlap(i, begin, end);
        if (!grad.defined() || length == 0) continue;
        mine.narrow(0, in_shard, length).copy_(grad.reshape(-1).narrow(0, in_param, length));
      }
    }
    auto& shard_grad = group.shard.mutable_grad();
    if (shard_grad.defined()) {
      shard_grad.add_(mine);
    } else {
      shard_grad = mine;
    }
    for (auto& p : group.params) p.mutable_grad().reset();
  }
}

void OptimizerShards::gather_parameters() {
  torch::NoGradGuard no_grad;
  for (auto& group : groups_) {
    if (group.total == 0) continue;
    // The step updated this process's slice of `flat` in place; the others come from their
    // owners. The input is a copy: an all-gather's input may not overlap its output.
    auto mine = group.shard.detach().clone();
    process_group_->_allgather_base(group.flat, mine)->wait();
  }
}

void OptimizerShards::zero_full_gradients(bool set_to_none) {
  for (auto& group : groups_) {
    for (auto& p : group.params) {
      auto& grad = p.mutable_grad();
      if (!grad.defined()) continue;
      if (set_to_none) {
        grad.reset();
      } else {
        grad.detach_();
        grad.zero_();
      }
    }
  }
}

void OptimizerShards::shard_gradients_of(const std::vector<torch::Tensor>& parameters,
                                         std::vector<torch::Tensor>& pieces,
                                         std::vector<torch::Tensor>& rest) {
  std::unordered_map<const c10::TensorImpl*, std::pair<size_t, size_t>> where;
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (size_t i = 0; i < groups_[g].params.size(); ++i) {
      where[groups_[g].params[i].unsafeGetTensorImpl()] = {g, i};
    }
  }
  const int64_t begin_of_mine = process_group_->getRank();
  for (const auto& p : parameters) {
    auto found = where.find(p.unsafeGetTensorImpl());
    if (found == where.end()) {
      rest.push_back(p);
      continue;
    }
    auto& group = groups_[found->second.first];
    const int64_t begin = begin_of_mine * group.shard_size, end = begin + group.shard_size;
    const auto [in_param, in_shard, length] = group.overlap(found->second.second, begin, end);
    const auto& grad = group.shard.grad();
    if (length > 0 && grad.defined()) pieces.push_back(grad.narrow(0, in_shard, length));
  }
}

}  // namespace detail
}  // namespace accel
