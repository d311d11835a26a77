// ZeRO stages 1 and 2: see accel/detail/optimizer_shards.h for the layout.

#include "accel/detail/optimizer_shards.h"

#include "optimizer_state_tensors.h"
#include "sharded_parameter.h"
#include "unit_gather.h"
#include "util/collective_label.h"

#include <c10/util/Exception.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>
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
namespace detail {

struct OptimizerShards::Unit {
  std::vector<torch::Tensor> params;   // consecutive parameters of one group, whole, in order
  std::vector<int64_t> offsets;        // where each starts in the unit's flat range
  int64_t group = 0;                   // the optimizer parameter group it belongs to
  std::vector<int64_t> indices;        // each parameter's place in that group, as prepared
  int64_t total = 0;                   // elements of all of them
  int64_t shard_size = 0;              // elements each process owns (padding included)
  torch::Tensor flat;                  // the parameters' storage: shard_size x processes elements
  torch::Tensor shard;                 // the optimizer's parameter: this process's slice of `flat`
                                       // (a host copy of it under CPU offload)
  torch::TensorOptions compute;        // the parameters' dtype and device
  std::shared_ptr<Gathered> gathered;  // FULL_SHARD: no `flat`; the unit gathered on demand

  // A reduce-scatter under way: the gradients sent (one flat copy) and this process's sum.
  std::vector<bool> ready;  // parameters whose gradient this backward has finished
  size_t ready_count = 0;
  c10::intrusive_ptr<c10d::Work> work;
  torch::Tensor sent, received;

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
  /// The shard's dtype and device (the host's under CPU offload).
  torch::TensorOptions options() const { return shard.options().requires_grad(false); }
  /// This process's slice of `flat` (ZeRO-1 and -2).
  torch::Tensor own_slice(int64_t rank) const {
    return flat.narrow(0, rank * shard_size, shard_size);
  }
  bool any_gradient() const {
    return std::any_of(params.begin(), params.end(),
                       [](const torch::Tensor& p) { return p.grad().defined(); });
  }
};

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
                                                const OptimizerShards::UnitOf& unit_of,
                                                int64_t unit_bytes) {
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
  if (shard_parameters_) {
    // The shard takes its slice away; the whole buffer goes, and each parameter becomes a sharded
    // parameter served from the unit.
    if (!offload_ && !empty) unit.shard = unit.shard.clone();
    unit.flat = torch::Tensor();
    unit.gathered = std::make_shared<Gathered>(process_group_, through_all_reduce_, unit.shard,
                                               unit.compute, window_);
    // fp32 parameters under autocast are gathered in its dtype (FSDP's MixedPrecision
    // param_dtype); the shards, their gradients and the optimizer stay fp32.
    std::shared_ptr<Gathered> as_bf16, as_fp16;
    if (unit.compute.dtype() == torch::kFloat) {
      as_bf16 = std::make_shared<Gathered>(process_group_, through_all_reduce_, unit.shard,
                                           unit.compute.dtype(torch::kBFloat16), window_);
      as_fp16 = std::make_shared<Gathered>(process_group_, through_all_reduce_, unit.shard,
                                           unit.compute.dtype(torch::kHalf), window_);
    }
    for (size_t i = 0; i < unit.params.size(); ++i) {
      shard_in_place(unit.params[i],
                     std::make_shared<UnitParameter>(unit.gathered, as_bf16, as_fp16,
                                                     unit.offsets[i], unit.params[i].sizes().vec()),
                     unit.compute.device());
    }
  }
  unit.shard.requires_grad_(true);
  return unit;
}

OptimizerShards::OptimizerShards(torch::optim::Optimizer& optimizer,
                                 c10::intrusive_ptr<c10d::ProcessGroup> group, Reduction reduction,
                                 int64_t unit_bytes, Collectives collectives, bool shard_parameters,
                                 const UnitOf& unit_of,
                                 c10::intrusive_ptr<c10d::ProcessGroup> replicate_group,
                                 bool offload_to_host,
                                 std::optional<c10::Device> device_of_empty_weights)
    : process_group_(std::move(group)),
      replicate_group_(std::move(replicate_group)),
      reduction_(reduction),
      through_all_reduce_(collectives == Collectives::all_reduce),
      shard_parameters_(shard_parameters),
      offload_(offload_to_host),
      device_of_empty_(device_of_empty_weights) {
  TORCH_CHECK(!shard_parameters || reduction == Reduction::reduce_scatter,
              "accel: sharded parameters need their gradients reduce-scattered");
  TORCH_CHECK(!replicate_group_ || reduction == Reduction::reduce_scatter,
              "accel: replicated shards need their gradients reduce-scattered");
  if (shard_parameters_) window_ = std::make_shared<GatherWindow>();
  TORCH_CHECK(dynamic_cast<torch::optim::LBFGS*>(&optimizer) == nullptr,
              "accel: LBFGS cannot be sharded: its step takes dot products over every parameter "
              "at once; use sharding_strategy NO_SHARD with it");
  TORCH_CHECK(optimizer.state().empty(),
              "accel: a sharded optimizer must be prepared before its first step (its state "
              "would have to be cut into shards)");
  const int64_t processes = process_group_->getSize();
  torch::NoGradGuard no_grad;
  for (size_t group_index = 0; group_index < optimizer.param_groups().size(); ++group_index) {
    auto& param_group = optimizer.param_groups()[group_index];
    const auto& params = param_group.params();
    check_group_shardable(params);
    std::vector<torch::Tensor> shards;
    for (const auto& members : units_of_group(params, unit_of, unit_bytes)) {
      units_.push_back(make_unit(static_cast<int64_t>(group_index), params, members));
      shards.push_back(units_.back().shard);
    }
    param_group.params() = shards;
  }
  for (const auto& unit : units_) {
    largest_unit_ = std::max(largest_unit_, unit.shard_size * processes);
  }

  send_buffers_.resize(units_in_flight(shard_parameters_));
  // Backward finishes the last parameters first: their units are sent first.
  for (size_t u = units_.size(); u-- > 0;) launch_order_.push_back(u);
  if (reduction_ == Reduction::reduce_scatter) install_hooks();
}

OptimizerShards::~OptimizerShards() {
  for (auto& [node, key] : hooks_) node->del_post_hook(key);
  for (auto& unit : units_) {
    if (unit.work) unit.work->wait();
  }
}

void OptimizerShards::install_hooks() {
  for (size_t u = 0; u < units_.size(); ++u) {
    for (size_t i = 0; i < units_[u].params.size(); ++i) {
      // The accumulator is held: the variable keeps it only weakly, and a new one would not
      // carry the hook.
      auto node = torch::autograd::impl::grad_accumulator(units_[u].params[i]);
      const auto key = node->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
          [this, u, i](const torch::autograd::variable_list& outputs,
                       const torch::autograd::variable_list&) {
            gradient_ready(u, i);
            return outputs;
          }));
      hooks_.emplace_back(std::move(node), key);
    }
  }
}

void OptimizerShards::arm() {
  if (reduction_ != Reduction::reduce_scatter) return;
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& unit : units_) {
    std::fill(unit.ready.begin(), unit.ready.end(), false);
    unit.ready_count = 0;
  }
  next_launch_ = next_deliver_ = 0;
  armed_ = true;
}

void OptimizerShards::gradient_ready(size_t u, size_t i) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!armed_) return;
  auto& unit = units_[u];
  if (!unit.ready[i]) {
    unit.ready[i] = true;
    ++unit.ready_count;
  }
  // In one order on every process (collectives are matched by order): a unit finished early
  // waits for those before it.
  while (next_launch_ < launch_order_.size()) {
    const auto& next = units_[launch_order_[next_launch_]];
    if (next.ready_count < next.params.size()) break;
    send_next();
  }
  // Units whose reduce-scatter is done give back their buffer now, not when the next needs it.
  while (next_deliver_ < next_launch_ && units_[launch_order_[next_deliver_]].work->isCompleted()) {
    collect_next();
  }
}

void OptimizerShards::send_next() {
  // At most units_in_flight() units are under way, each in its own send buffer: backward waits for
  // the oldest rather than hold every unit's gradients twice (FSDP limits its in-flight
  // collectives alike), and the buffers are reused step after step rather than allocated afresh.
  if (next_launch_ - next_deliver_ >= send_buffers_.size()) collect_next();
  auto& buffer = send_buffers_[next_launch_ % send_buffers_.size()];
  if (!buffer.defined()) {
    buffer = torch::empty({largest_unit_},
                          units_.front().compute.dtype(reduce_dtype_.value_or(
                              c10::typeMetaToScalarType(units_.front().compute.dtype()))));
  }
  launch(units_[launch_order_[next_launch_++]], buffer);
}

void OptimizerShards::collect_next() { wait_and_deliver(units_[launch_order_[next_deliver_++]]); }

void OptimizerShards::launch(Unit& unit, const torch::Tensor& buffer) {
  torch::NoGradGuard no_grad;
  const int64_t processes = process_group_->getSize();
  // This process's gradients laid out flat (zeros for parameters without one, and for the
  // padding), summed slice by slice onto their owners; the full gradients are freed as soon as
  // they are copied.
  unit.sent = buffer.narrow(0, 0, unit.shard_size * processes);
  unit.sent.narrow(0, unit.total, unit.sent.numel() - unit.total).zero_();
  for (size_t i = 0; i < unit.params.size(); ++i) {
    auto& grad = unit.params[i].mutable_grad();
    auto place = unit.sent.narrow(0, unit.offsets[i], unit.params[i].numel());
    if (!grad.defined()) {
      place.zero_();
      continue;
    }
    place.copy_(grad.reshape(-1));
    grad.reset();
  }
  reduce_scattered_bytes_ += static_cast<int64_t>(unit.sent.nbytes());
  CollectiveLabel collective_label("gradient reduce-scatter of unit", &unit - units_.data());
  if (through_all_reduce_) {
    std::vector<torch::Tensor> tensors{unit.sent};
    unit.work = process_group_->allreduce(tensors);
    return;
  }
  unit.received = torch::empty({unit.shard_size}, unit.sent.options());
  c10d::ReduceScatterOptions options;
  options.reduceOp = c10d::ReduceOp::SUM;
  unit.work = process_group_->_reduce_scatter_base(unit.received, unit.sent, options);
}

void OptimizerShards::deliver(Unit& unit, torch::Tensor mine) {
  torch::NoGradGuard no_grad;
  if (mine.device() != unit.shard.device()) {
    // CPU offload: the averaged slice goes to the host, where the optimizer steps.
    auto host = torch::empty({unit.shard_size}, unit.options().pinned_memory(true));
    host.copy_(mine);
    mine = std::move(host);
  }
  auto& shard_grad = unit.shard.mutable_grad();
  if (shard_grad.defined()) {
    shard_grad.add_(mine);
  } else {
    shard_grad = std::move(mine);
  }
}

void OptimizerShards::wait_and_deliver(Unit& unit) {
  unit.work->wait();
  unit.work.reset();
  if (through_all_reduce_) {
    // The whole sum came back: this process's slice is its reduce-scatter.
    unit.received =
        unit.sent.narrow(0, process_group_->getRank() * unit.shard_size, unit.shard_size).clone();
  }
  unit.sent = torch::Tensor();
  auto mine = std::move(unit.received);
  // Summed in the reduce dtype; averaged in the shard's.
  if (mine.scalar_type() != unit.shard.scalar_type()) mine = mine.to(unit.shard.scalar_type());
  int64_t processes = process_group_->getSize();
  if (replicate_group_) {
    // The same slice's sums on the other machines: a small collective (1/N of the unit) after the
    // machine's own, as FSDP's hybrid strategy does.
    std::vector<torch::Tensor> tensors{mine};
    replicate_group_->allreduce(tensors)->wait();
    processes *= replicate_group_->getSize();
  }
  mine.div_(processes);
  deliver(unit, std::move(mine));
}

void OptimizerShards::finish_backward(bool completed) {
  if (reduction_ != Reduction::reduce_scatter) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (!armed_) return;
  armed_ = false;
  if (!completed) {
    // Backward threw: the collectives under way finish (their buffers must outlive them), the
    // gradients they carried are dropped.
    for (auto& unit : units_) {
      if (!unit.work) continue;
      unit.work->wait();
      unit.work.reset();
      unit.sent = unit.received = torch::Tensor();
    }
    return;
  }
  // Units some of whose parameters got no gradient are sent now, in the same order.
  while (next_launch_ < launch_order_.size()) send_next();
  while (next_deliver_ < launch_order_.size()) collect_next();
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

void OptimizerShards::reduce_gradients() {
  ensure_bound();
  const bool any = std::any_of(units_.begin(), units_.end(),
                               [](const Unit& unit) { return unit.any_gradient(); });
  if (!any) return;
  torch::NoGradGuard no_grad;
  if (reduction_ == Reduction::reduce_scatter) {
    // Gradients left whole: backward did not go through accelerator.backward (or accumulated
    // on micro-steps and was never armed). All units, in the hooks' order.
    next_launch_ = next_deliver_ = 0;
    while (next_launch_ < launch_order_.size()) send_next();
    while (next_deliver_ < launch_order_.size()) collect_next();
    return;
  }
  // Backward all-reduced (and averaged) the gradients: this process's slice is cut out.
  const int64_t begin_of_mine = process_group_->getRank();
  for (auto& unit : units_) {
    const int64_t begin = begin_of_mine * unit.shard_size, end = begin + unit.shard_size;
    auto mine = torch::zeros({unit.shard_size}, unit.options());
    for (size_t i = 0; i < unit.params.size(); ++i) {
      auto& grad = unit.params[i].mutable_grad();
      if (!grad.defined()) continue;
      const auto [in_param, in_shard, length] = unit.overlap(i, begin, end);
      if (length > 0) {
        mine.narrow(0, in_shard, length).copy_(grad.reshape(-1).narrow(0, in_param, length));
      }
      grad.reset();
    }
    deliver(unit, std::move(mine));
  }
}

void OptimizerShards::scale_gradients(double factor) {
  torch::NoGradGuard no_grad;
  for (auto& unit : units_) {
    auto& grad = unit.shard.mutable_grad();
    if (grad.defined()) grad.mul_(factor);
  }
}

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
    CollectiveLabel collective_label("parameter all-gather of unit", &unit - units_.data());
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

void OptimizerShards::set_prefetch(bool forward, bool backward) {
  if (!window_) return;
  std::lock_guard<std::mutex> lock(window_->mutex);
  window_->prefetch_forward = forward;
  window_->prefetch_backward = backward;
}

void OptimizerShards::set_reduce_dtype(c10::ScalarType dtype) {
  TORCH_CHECK(c10::isFloatingType(dtype),
              "accel: gradients are reduce-scattered in a floating "
              "dtype, not ",
              dtype);
  std::lock_guard<std::mutex> lock(mutex_);
  reduce_dtype_ = dtype;
  for (auto& buffer : send_buffers_) buffer = torch::Tensor();  // made anew in the new dtype
}

OptimizerShards::GatherStatistics OptimizerShards::gather_statistics() const {
  GatherStatistics statistics;
  if (!window_) return statistics;
  std::lock_guard<std::mutex> lock(window_->mutex);
  statistics.gathers = window_->gathers;
  statistics.alive_bytes = window_->alive_bytes();
  statistics.peak_bytes = window_->peak_bytes;
  statistics.gathered_bytes = window_->gathered_bytes;
  statistics.prefetches = window_->prefetches;
  statistics.gather_wait_seconds = window_->wait_seconds;
  for (const auto& unit : units_) {
    const int64_t element = static_cast<int64_t>(unit.compute.dtype().itemsize());
    statistics.largest_unit_bytes = std::max(statistics.largest_unit_bytes,
                                             unit.shard_size * process_group_->getSize() * element);
    statistics.largest_shard_bytes =
        std::max(statistics.largest_shard_bytes, unit.shard_size * element);
  }
  return statistics;
}

void OptimizerShards::reset_gather_peak() {
  if (!window_) return;
  std::lock_guard<std::mutex> lock(window_->mutex);
  window_->peak_bytes = window_->alive_bytes();
}

void OptimizerShards::set_units_whole(size_t units) {
  TORCH_CHECK(units >= 1, "accel: at least one unit must be whole to run its operators");
  if (!window_) return;
  std::lock_guard<std::mutex> lock(window_->mutex);
  window_->units_whole = units;
  window_->make_room(0);
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

}  // namespace detail
}  // namespace accel
