#include <accel/detail/gradient_state.h>

#include <torch/optim/optimizer.h>

#include <algorithm>

namespace accel {
namespace detail {

OptimizerGate::OptimizerGate(GradientState* state, torch::optim::Optimizer* optimizer)
    : state_(state), optimizer_(optimizer) {
  state_->gates.push_back(this);
}

OptimizerGate::OptimizerGate(OptimizerGate&& other, torch::optim::Optimizer* optimizer)
    : state_(other.state_),
      optimizer_(optimizer),
      closed_(other.closed_),
      held_params_(std::move(other.held_params_)) {
  std::replace(state_->gates.begin(), state_->gates.end(), &other, this);
  other.state_ = nullptr;
}

OptimizerGate::~OptimizerGate() {
  if (state_ == nullptr) return;
  open();
  auto& gates = state_->gates;
  gates.erase(std::remove(gates.begin(), gates.end(), this), gates.end());
}

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

StatefulRegistration::StatefulRegistration(std::vector<StatefulPart*>* list, StatefulPart* part)
    : list_(list), part_(part) {
  list_->push_back(part_);
}

StatefulRegistration::StatefulRegistration(StatefulRegistration&& other, StatefulPart* part)
    : list_(other.list_), part_(part) {
  std::replace(list_->begin(), list_->end(), other.part_, part_);
  other.list_ = nullptr;
}

StatefulRegistration::~StatefulRegistration() {
  if (list_ == nullptr) return;
  list_->erase(std::remove(list_->begin(), list_->end(), part_), list_->end());
}

}  // namespace detail
}  // namespace accel
