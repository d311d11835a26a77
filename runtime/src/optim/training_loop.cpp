#include "training_loop.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace accel {
namespace optim {

void OptimizerRegistry::remove(detail::OptimizerGate* gate) {
  gates_.erase(std::remove(gates_.begin(), gates_.end(), gate), gates_.end());
}

void OptimizerRegistry::close_all() {
  for (auto* gate : gates_) gate->close();
}

void OptimizerRegistry::open_all() {
  for (auto* gate : gates_) gate->open();
}

AllGatesOpen::AllGatesOpen(const OptimizerRegistry& optimizers) {
  for (auto* gate : optimizers.gates()) {
    opened_.push_back(std::make_unique<detail::OpenedGate>(*gate));
  }
}

void StepChecks::record_averaged(const torch::nn::Module& model, size_t index) {
  for (const auto& named : model.named_parameters()) {
    averaged_[named.value().unsafeGetTensorImpl()] =
        "model " + std::to_string(index) + ": " + named.key();
  }
}

std::string StepChecks::name_of(const at::Tensor& p, size_t position) const {
  const auto found = averaged_.find(p.unsafeGetTensorImpl());
  if (found != averaged_.end()) return found->second;
  std::ostringstream out;
  out << "the optimizer's parameter " << position << " (shape " << p.sizes() << ")";
  return out.str();
}

void StepChecks::check_averaged(const torch::optim::Optimizer& optimizer) const {
  if (!refuse_unaveraged_) return;
  int64_t count = 0;
  std::vector<std::string> shapes;
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& p : group.params()) {
      if (!p.requires_grad() || averaged_.count(p.unsafeGetTensorImpl()) > 0) continue;
      ++count;
      if (shapes.size() < 4) {
        std::ostringstream shape;
        shape << p.sizes();
        shapes.push_back(shape.str());
      }
    }
  }
  if (count == 0) return;
  std::string listed;
  for (const auto& shape : shapes) listed += (listed.empty() ? "" : ", ") + shape;
  if (count > static_cast<int64_t>(shapes.size())) listed += ", ...";
  TORCH_CHECK(false, "accel: this prepared optimizer trains ", count,
              " parameter(s) that no prepared model holds (shapes ", listed,
              "): nothing averages their gradients across the processes, so every process would "
              "train a different model. Prepare the model that holds them with "
              "accelerator.prepare(model) (before the first step); if they are meant to be each "
              "process's own, say so with AcceleratorOptions().allow_unprepared_parameters(true)");
}

void StatefulParts::replace(Kind kind, detail::StatefulPart* old_part,
                            detail::StatefulPart* new_part) {
  auto& parts = list(kind);
  std::replace(parts.begin(), parts.end(), old_part, new_part);
}

void StatefulParts::remove(Kind kind, detail::StatefulPart* part) {
  auto& parts = list(kind);
  parts.erase(std::remove(parts.begin(), parts.end(), part), parts.end());
}

}  // namespace optim

namespace detail {

void OptimizerGate::close() {
  if (closed_) return;
  held_params_.clear();
  for (auto& group : optimizer_->param_groups()) {
    held_params_.push_back(std::move(group.params()));
    group.params().clear();
  }
  closed_ = true;
}

void OptimizerGate::open() {
  if (!closed_) return;
  auto& groups = optimizer_->param_groups();
  // Groups added while closed (add_param_group) keep their own parameters.
  for (size_t i = 0; i < held_params_.size() && i < groups.size(); ++i) {
    auto& params = groups[i].params();
    held_params_[i].insert(held_params_[i].end(), params.begin(), params.end());
    params = std::move(held_params_[i]);
  }
  held_params_.clear();
  closed_ = false;
}

// ---- The links ----------------------------------------------------------------------------------

StatefulLink::StatefulLink(std::shared_ptr<TrainingLoop> loop, Kind kind, StatefulPart* part)
    : loop_(std::move(loop)), kind_(kind), part_(part) {
  TORCH_CHECK(loop_ != nullptr, "accel: a prepared object needs the Accelerator's training loop");
  loop_->stateful.add(kind_, part_);
}

StatefulLink::StatefulLink(StatefulLink&& other, StatefulPart* part)
    : loop_(other.loop_), kind_(other.kind_), part_(part) {
  loop_->stateful.replace(kind_, other.part_, part_);
  other.part_ = nullptr;
}

StatefulLink::~StatefulLink() {
  if (part_ != nullptr) loop_->stateful.remove(kind_, part_);
}

bool SchedulerLink::optimizer_stepped() const {
  return loop_->sync.sync_gradients() && !loop_->sync.step_was_skipped();
}

void LoaderLink::set_end_of_dataloader(bool end) { loop_->loader.set_end_of_dataloader(end); }
void LoaderLink::set_remainder(int64_t remainder) { loop_->loader.set_remainder(remainder); }
std::optional<bool> LoaderLink::even_batches_override() const {
  return loop_->loader.even_batches_override();
}

OptimizerLink::OptimizerLink(std::shared_ptr<TrainingLoop> loop, torch::optim::Optimizer* optimizer)
    : loop_(std::move(loop)), gate_(std::make_unique<OptimizerGate>(optimizer)) {
  TORCH_CHECK(loop_ != nullptr,
              "accel: a prepared optimizer needs the Accelerator's training loop");
  loop_->optimizers.add(gate_.get());
}

OptimizerLink::OptimizerLink(OptimizerLink&& other, torch::optim::Optimizer* optimizer)
    : loop_(other.loop_), gate_(std::move(other.gate_)) {
  // The gate keeps its place in the registry; only the optimizer it holds aside for moved.
  gate_->reseat(optimizer);
}

OptimizerLink::~OptimizerLink() {
  if (gate_ != nullptr) loop_->optimizers.remove(gate_.get());
}

bool OptimizerLink::sync_gradients() const { return loop_->sync.sync_gradients(); }
bool OptimizerLink::fused() const { return loop_->optimizers.fused(); }
GradScaler* OptimizerLink::scaler() const { return loop_->optimizers.scaler(); }

void OptimizerLink::check_parameters_averaged(const torch::optim::Optimizer& optimizer) const {
  loop_->checks.check_averaged(optimizer);
}

void OptimizerLink::after_step(const torch::optim::Optimizer& optimizer, bool stepped,
                               bool sharded) {
  loop_->sync.record_step(stepped);
  if (stepped && !sharded) loop_->checks.compare(optimizer);
}

}  // namespace detail
}  // namespace accel
