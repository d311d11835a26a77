#include "optimizer_state_tensors.h"

#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>

namespace accel {
namespace sharding {

std::optional<std::vector<torch::Tensor*>> elementwise_state(
    torch::optim::OptimizerParamState& state) {
  if (auto* adam = dynamic_cast<torch::optim::AdamParamState*>(&state)) {
    return std::vector<torch::Tensor*>{&adam->exp_avg(), &adam->exp_avg_sq(),
                                       &adam->max_exp_avg_sq()};
  }
  if (auto* adamw = dynamic_cast<torch::optim::AdamWParamState*>(&state)) {
    return std::vector<torch::Tensor*>{&adamw->exp_avg(), &adamw->exp_avg_sq(),
                                       &adamw->max_exp_avg_sq()};
  }
  if (auto* sgd = dynamic_cast<torch::optim::SGDParamState*>(&state)) {
    return std::vector<torch::Tensor*>{&sgd->momentum_buffer()};
  }
  if (auto* adagrad = dynamic_cast<torch::optim::AdagradParamState*>(&state)) {
    return std::vector<torch::Tensor*>{&adagrad->sum()};
  }
  if (auto* rmsprop = dynamic_cast<torch::optim::RMSpropParamState*>(&state)) {
    return std::vector<torch::Tensor*>{&rmsprop->square_avg(), &rmsprop->momentum_buffer(),
                                       &rmsprop->grad_avg()};
  }
  return std::nullopt;
}

}  // namespace sharding
}  // namespace accel
