// The optimizer's shards: units cut from its parameter groups, the step on them and the
// all-gather after it (ZeRO-1 and -2), and the layout a checkpoint reads. See
// optimizer_shards.h; gradients reach the shards through gradient_pipeline.h, FULL_SHARD's
// parameters are gathered in unit_gather.cpp.

#include "optimizer_shards.h"

#include "gradient_pipeline.h"
#include "optimizer_state_tensors.h"
#include "shard_unit.h"
#include "sharded_parameter.h"
#include "unit_gather.h"
#include "util/collective_label.h"

#include <c10/util/Exception.h>
#include <torch/optim/lbfgs.h>
#include <torch/optim/optimizer.h>
#include <torch/types.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <algorithm>
#include <map>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <utility>

namespace accel {
namespace sharding {

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// Reduce-scatters under way at once during backward, each in its own send buffer: with
/// SHARD_GRAD_OP two, one sending while the next unit's gradients are computed. FULL_SHARD
/// bounds the gradients alive in backward to two units, the unit being computed (its parameters'
/// gradients) and the unit being sent: one in flight.
size_t units_in_flight(bool shard_parameters) { return shard_parameters ? 1 : 2; }

/// A group's parameters share one dtype and device, are dense, and are not another optimizer's
/// already.
void check_group_shardable(const std::vector<torch::Tensor>& params) {
  for (const auto& p : params) {
    const auto& first = params.front();
    TORCH_CHECK(p.scalar_type() == first.scalar_type() && p.device() == first.device(),
                "accel: sharding needs the parameters of each optimizer parameter group to "
                "share one dtype and device; this group mixes ",
                first.scalar_type(), " on ", first.device(), " with ", p.scalar_type(), " on ",
                p.device());
    TORCH_CHECK(p.layout() == torch::kStrided,
                "accel: sharding needs dense parameters (a parameter has layout ", p.layout(), ")");
    TORCH_CHECK(!is_sharded(p),
                "accel: a parameter is sharded already (by another prepared "
                "optimizer); one optimizer per parameter with FULL_SHARD");
  }
}

/// A group's parameters by unit, as places in `params`: `unit_of`'s numbering (units in order of
/// their first parameter), or runs of consecutive parameters up to `unit_bytes` (one at least).
std::vector<std::vector<size_t>> units_of_group(const std::vector<torch::Tensor>& params,
                                                const ShardUnitOf& unit_of, int64_t unit_bytes) {
  std::vector<std::vector<size_t>> members;
  if (unit_of) {
    std::map<int64_t, size_t> index;
    for (size_t i = 0; i < params.size(); ++i) {
      const auto found = index.emplace(unit_of(params[i]), members.size());
      if (found.second) members.emplace_back();
      members[found.first->second].push_back(i);
    }
    return members;
  }
  int64_t bytes = unit_bytes;
  for (size_t i = 0; i < params.size(); ++i) {
    if (bytes >= unit_bytes) {
      members.emplace_back();
      bytes = 0;
    }
    members.back().push_back(i);
    bytes += params[i].nbytes();
  }
  return members;
}

}  // namespace

OptimizerShards::Unit OptimizerShards::make_unit(int64_t group_index,
                                                 const std::vector<torch::Tensor>& params,
                                                 const std::vector<size_t>& members) {
  const int64_t processes = process_group_->getSize();
  Unit unit;
  unit.group = group_index;
  for (const size_t i : members) {
    unit.params.push_back(params[i]);
    unit.indices.push_back(static_cast<int64_t>(i));
    unit.offsets.push_back(unit.total);
    unit.total += params[i].numel();
  }
  unit.shard_size = ceil_div(unit.total, processes);
  unit.ready.assign(unit.params.size(), false);
  unit.compute = unit.params.front().options().requires_grad(false);
  // A model built with empty weights: the shards start as zeros on the device, for a load to
  // fill (no process ever holds the whole model).
  const bool empty = unit.params.front().is_meta();
  if (empty) {
    TORCH_CHECK(shard_parameters_ && device_of_empty_,
                "accel: the model's parameters are empty (init_empty_weights): only FULL_SHARD "
                "can shard them as they are; otherwise load its weights before prepare()");
    unit.compute = unit.compute.device(*device_of_empty_);
    // Nothing to cut the shard from: it is allocated alone, never the whole unit.
    unit.shard = torch::zeros({unit.shard_size}, unit.compute);
  } else {
    unit.flat = torch::zeros({unit.shard_size * processes}, unit.compute);
    for (size_t i = 0; i < unit.params.size(); ++i) unit.bind(i);
    unit.shard = unit.own_slice(process_group_->getRank()).detach();
  }
  if (offload_) {
    // Pinned host memory when the parameters are on a GPU: the copies each step makes between
    // the two then go at the link's full speed.
    const bool pin = !unit.compute.device().is_cpu();
    auto host =
        torch::empty({unit.shard_size}, unit.compute.device(torch::kCPU).pinned_memory(pin));
    host.copy_(unit.shard);
    unit.shard = host;
  }
  if (shard_parameters_) shard_unit_parameters(unit, empty);
  unit.shard.requires_grad_(true);
  return unit;
}

OptimizerShards::OptimizerShards(torch::optim::Optimizer& optimizer, const ShardingPlan& plan)
    : process_group_(plan.group()),
      reduction_(plan.reduction()),
      through_all_reduce_(plan.collectives() == ShardCollectives::all_reduce),
      shard_parameters_(plan.shard_parameters()),
      offload_(plan.offload_to_host()),
      device_of_empty_(plan.device_of_empty_weights()) {
  TORCH_CHECK(!shard_parameters_ || reduction_ == GradientReduction::reduce_scatter,
              "accel: sharded parameters need their gradients reduce-scattered");
  TORCH_CHECK(!plan.replicate_group() || reduction_ == GradientReduction::reduce_scatter,
              "accel: replicated shards need their gradients reduce-scattered");
  if (shard_parameters_) window_ = std::make_shared<GatherWindow>();
  TORCH_CHECK(dynamic_cast<torch::optim::LBFGS*>(&optimizer) == nullptr,
              "accel: LBFGS cannot be sharded: its step takes dot products over every parameter "
              "at once; use sharding_strategy NO_SHARD with it");
  TORCH_CHECK(optimizer.state().empty(),
              "accel: a sharded optimizer must be prepared before its first step (its state "
              "would have to be cut into shards)");
  torch::NoGradGuard no_grad;
  for (size_t group_index = 0; group_index < optimizer.param_groups().size(); ++group_index) {
    auto& param_group = optimizer.param_groups()[group_index];
    const auto& params = param_group.params();
    check_group_shardable(params);
    std::vector<torch::Tensor> shards;
    for (const auto& members : units_of_group(params, plan.unit_of(), plan.unit_bytes())) {
      units_.push_back(make_unit(static_cast<int64_t>(group_index), params, members));
      shards.push_back(units_.back().shard);
    }
    param_group.params() = shards;
  }
  gradients_ = std::make_unique<GradientPipeline>(units_, plan, units_in_flight(shard_parameters_));
}

OptimizerShards::~OptimizerShards() {
  gradients_.reset();  // its hooks and collectives refer to the units
}

void OptimizerShards::ensure_bound() {
  // Sharded parameters take new values through their sources (copy_ into them).
  if (bound_ || shard_parameters_) return;
  torch::NoGradGuard no_grad;
  const int64_t rank = process_group_->getRank();
  for (auto& unit : units_) {
    for (size_t i = 0; i < unit.params.size(); ++i) unit.bind(i);
    // CPU offload: the host shard is the value the optimizer steps; it takes the device's.
    if (offload_) unit.shard.detach().copy_(unit.own_slice(rank));
  }
  bound_ = true;
}

void OptimizerShards::refresh_from_parameters() { bound_ = false; }

void OptimizerShards::leave_unstepped(const std::vector<torch::Tensor>& unused) {
  unstepped_.clear();
  if (unused.empty()) return;
  std::unordered_set<const c10::TensorImpl*> idle;
  for (const auto& p : unused) idle.insert(p.unsafeGetTensorImpl());
  const int64_t rank = process_group_->getRank();
  for (size_t u = 0; u < units_.size(); ++u) {
    auto& unit = units_[u];
    std::vector<size_t> members;
    for (size_t i = 0; i < unit.params.size(); ++i) {
      if (idle.count(unit.params[i].unsafeGetTensorImpl()) > 0) members.push_back(i);
    }
    if (members.empty()) continue;
    if (members.size() == unit.params.size()) {
      // The zeros the reduction gave: none, and the optimizer passes the shard by.
      unit.shard.mutable_grad().reset();
      continue;
    }
    Unstepped entry;
    entry.unit = u;
    const int64_t begin = rank * unit.shard_size;
    for (size_t i : members) {
      const auto [in_param, in_shard, length] = unit.overlap(i, begin, begin + unit.shard_size);
      if (length > 0) entry.ranges.emplace_back(in_shard, length);
    }
    if (!entry.ranges.empty()) unstepped_.push_back(std::move(entry));
  }
}

void OptimizerShards::before_step(torch::optim::Optimizer& optimizer) {
  torch::NoGradGuard no_grad;
  for (auto& entry : unstepped_) {
    const auto& shard = units_[entry.unit].shard;
    entry.values.clear();
    entry.state.clear();
    for (const auto& [at, length] : entry.ranges) {
      entry.values.push_back(shard.detach().narrow(0, at, length).clone());
    }
    auto found = optimizer.state().find(shard.unsafeGetTensorImpl());
    entry.had_state = found != optimizer.state().end();
    if (!entry.had_state) continue;
    const auto tensors = elementwise_state(*found->second);
    if (!tensors) continue;
    for (const auto* tensor : *tensors) {
      entry.state.emplace_back();
      if (!tensor->defined()) continue;
      for (const auto& [at, length] : entry.ranges) {
        entry.state.back().push_back(tensor->narrow(0, at, length).clone());
      }
    }
  }
}

void OptimizerShards::after_step(torch::optim::Optimizer& optimizer) {
  torch::NoGradGuard no_grad;
  for (auto& entry : unstepped_) {
    const auto& shard = units_[entry.unit].shard;
    for (size_t r = 0; r < entry.ranges.size() && r < entry.values.size(); ++r) {
      shard.detach()
          .narrow(0, entry.ranges[r].first, entry.ranges[r].second)
          .copy_(entry.values[r]);
    }
    auto found = optimizer.state().find(shard.unsafeGetTensorImpl());
    if (found == optimizer.state().end()) continue;
    const auto tensors = elementwise_state(*found->second);
    if (!tensors) continue;
    for (size_t t = 0; t < tensors->size(); ++t) {
      auto* tensor = (*tensors)[t];
      if (!tensor->defined()) continue;
      for (size_t r = 0; r < entry.ranges.size(); ++r) {
        auto place = tensor->narrow(0, entry.ranges[r].first, entry.ranges[r].second);
        // State this step created starts from zero where nothing was used, as a parameter's
        // first state does.
        if (entry.had_state && t < entry.state.size() && r < entry.state[t].size()) {
          place.copy_(entry.state[t][r]);
        } else {
          place.zero_();
        }
      }
    }
  }
  unstepped_.clear();
}

void OptimizerShards::gather_parameters() {
  if (shard_parameters_) {
    // Each unit is gathered when an operator next uses it.
    window_->drop_all();
    return;
  }
  torch::NoGradGuard no_grad;
  const int64_t rank = process_group_->getRank();
  // Every unit's collective is started before any is waited for.
  std::vector<std::pair<c10::intrusive_ptr<c10d::Work>, torch::Tensor>> under_way;
  for (auto& unit : units_) {
    // The step updated this process's slice of `flat` in place (under CPU offload, the host
    // shard: it is copied back first); the others come from their owners.
    if (offload_) unit.own_slice(rank).copy_(unit.shard.detach());
    util::CollectiveLabel collective_label("parameter all-gather of unit", &unit - units_.data());
    if (through_all_reduce_) {
      // Everything but this process's slice zeroed, then summed: x + 0 + ... + 0 is x exactly.
      unit.flat.narrow(0, 0, rank * unit.shard_size).zero_();
      const int64_t after = (rank + 1) * unit.shard_size;
      unit.flat.narrow(0, after, unit.flat.numel() - after).zero_();
      std::vector<torch::Tensor> tensors{unit.flat};
      under_way.emplace_back(process_group_->allreduce(tensors), torch::Tensor());
      continue;
    }
    // The input is a copy: an all-gather's input may not overlap its output.
    auto mine = unit.own_slice(rank).clone();
    under_way.emplace_back(process_group_->_allgather_base(unit.flat, mine), mine);
  }
  for (auto& [work, input] : under_way) work->wait();
}

std::vector<OptimizerShards::UnitLayout> OptimizerShards::unit_layouts() const {
  std::vector<UnitLayout> layouts;
  for (const auto& unit : units_) {
    layouts.push_back({unit.params, unit.offsets, unit.shard, unit.group, unit.indices, unit.total,
                       process_group_->getRank(), process_group_->getSize()});
  }
  return layouts;
}

void OptimizerShards::zero_full_gradients(bool set_to_none) {
  for (auto& unit : units_) {
    for (auto& p : unit.params) {
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

bool OptimizerShards::holds_any(const std::unordered_set<const c10::TensorImpl*>& leaves) const {
  for (const auto& unit : units_) {
    for (const auto& p : unit.params) {
      if (leaves.count(p.unsafeGetTensorImpl()) > 0) return true;
    }
  }
  return false;
}

void OptimizerShards::shard_gradients_of(const std::vector<torch::Tensor>& parameters,
                                         std::vector<torch::Tensor>& pieces,
                                         std::vector<torch::Tensor>& rest) {
  std::unordered_map<const c10::TensorImpl*, std::pair<size_t, size_t>> where;
  for (size_t u = 0; u < units_.size(); ++u) {
    for (size_t i = 0; i < units_[u].params.size(); ++i) {
      where[units_[u].params[i].unsafeGetTensorImpl()] = {u, i};
    }
  }
  const int64_t begin_of_mine = process_group_->getRank();
  for (const auto& p : parameters) {
    auto found = where.find(p.unsafeGetTensorImpl());
    if (found == where.end()) {
      rest.push_back(p);
      continue;
    }
    auto& unit = units_[found->second.first];
    const int64_t begin = begin_of_mine * unit.shard_size, end = begin + unit.shard_size;
    const auto [in_param, in_shard, length] = unit.overlap(found->second.second, begin, end);
    const auto& grad = unit.shard.grad();
    if (length > 0 && grad.defined()) pieces.push_back(grad.narrow(0, in_shard, length));
  }
}

}  // namespace sharding
}  // namespace accel
