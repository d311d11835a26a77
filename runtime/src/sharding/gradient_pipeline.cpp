// Gradients onto the shards (gradient_pipeline.h): ZeRO-2's reduce-scatter of each unit as soon
// as backward has finished its gradients, or a slice of gradients backward all-reduced whole
// (ZeRO-1); then averaged, summed over HYBRID_SHARD's replicas first.

#include "gradient_pipeline.h"

#include "shard_unit.h"
#include "util/collective_label.h"

#include <c10/util/Exception.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/types.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <algorithm>
#include <mutex>
#include <utility>

namespace accel {
namespace sharding {

OptimizerShards::GradientPipeline::GradientPipeline(std::vector<Unit>& units,
                                                    const ShardingPlan& plan,
                                                    size_t units_in_flight)
    : units_(units),
      process_group_(plan.group()),
      replicate_group_(plan.replicate_group()),
      reduction_(plan.reduction()),
      through_all_reduce_(plan.collectives() == ShardCollectives::all_reduce) {
  for (const auto& unit : units_) {
    largest_unit_ = std::max(largest_unit_, unit.shard_size * process_group_->getSize());
  }
  send_buffers_.resize(units_in_flight);
  // Backward finishes the last parameters first: their units are sent first.
  for (size_t u = units_.size(); u-- > 0;) launch_order_.push_back(u);
  if (reduction_ == GradientReduction::reduce_scatter) install_hooks();
}

OptimizerShards::GradientPipeline::~GradientPipeline() {
  for (auto& [node, key] : hooks_) node->del_post_hook(key);
  for (auto& unit : units_) {
    if (unit.work) unit.work->wait();
  }
}

void OptimizerShards::GradientPipeline::install_hooks() {
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

void OptimizerShards::GradientPipeline::arm() {
  if (reduction_ != GradientReduction::reduce_scatter) return;
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& unit : units_) {
    std::fill(unit.ready.begin(), unit.ready.end(), false);
    unit.ready_count = 0;
  }
  next_launch_ = next_deliver_ = 0;
  armed_ = true;
}

void OptimizerShards::GradientPipeline::gradient_ready(size_t u, size_t i) {
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

void OptimizerShards::GradientPipeline::send_next() {
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

void OptimizerShards::GradientPipeline::collect_next() {
  wait_and_deliver(units_[launch_order_[next_deliver_++]]);
}

void OptimizerShards::GradientPipeline::launch(Unit& unit, const torch::Tensor& buffer) {
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
  util::CollectiveLabel collective_label("gradient reduce-scatter of unit", &unit - units_.data());
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

void OptimizerShards::GradientPipeline::deliver(Unit& unit, torch::Tensor mine) {
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

void OptimizerShards::GradientPipeline::wait_and_deliver(Unit& unit) {
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

void OptimizerShards::GradientPipeline::finish_backward(bool completed) {
  if (reduction_ != GradientReduction::reduce_scatter) return;
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

void OptimizerShards::reduce_gradients() {
  ensure_bound();
  const bool any = std::any_of(units_.begin(), units_.end(),
                               [](const Unit& unit) { return unit.any_gradient(); });
  if (any) gradients_->reduce_whole_gradients();
}

void OptimizerShards::GradientPipeline::reduce_whole_gradients() {
  torch::NoGradGuard no_grad;
  if (reduction_ == GradientReduction::reduce_scatter) {
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

void OptimizerShards::arm() { gradients_->arm(); }
void OptimizerShards::finish_backward(bool completed) { gradients_->finish_backward(completed); }
void OptimizerShards::set_reduce_dtype(c10::ScalarType dtype) {
  gradients_->set_reduce_dtype(dtype);
}
int64_t OptimizerShards::reduce_scattered_bytes() const {
  return gradients_->reduce_scattered_bytes();
}

void OptimizerShards::scale_gradients(double factor) {
  torch::NoGradGuard no_grad;
  for (auto& unit : units_) {
    auto& grad = unit.shard.mutable_grad();
    if (grad.defined()) grad.mul_(factor);
  }
}

void OptimizerShards::GradientPipeline::set_reduce_dtype(c10::ScalarType dtype) {
  TORCH_CHECK(c10::isFloatingType(dtype),
              "accel: gradients are reduce-scattered in a floating "
              "dtype, not ",
              dtype);
  std::lock_guard<std::mutex> lock(mutex_);
  reduce_dtype_ = dtype;
  for (auto& buffer : send_buffers_) buffer = torch::Tensor();  // made anew in the new dtype
}

}  // namespace sharding
}  // namespace accel
