#include <accel/detail/gradient_state.h>

#include <torch/optim/optimizer.h>

#include <c10/util/Exception.h>

#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

namespace accel {
namespace detail {

void check_parameters_averaged(const GradientState& state,
                               const torch::optim::Optimizer& optimizer) {
  if (!state.refuse_unaveraged) return;
  int64_t count = 0;
  std::vector<std::string> shapes;
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& p : group.params()) {
      if (!p.requires_grad() || state.averaged_parameters.count(p.unsafeGetTensorImpl()) > 0) {
        continue;
      }
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
