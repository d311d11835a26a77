#pragma once

// What the Accelerator checks around a prepared optimizer's step on several processes, through
// the GradientState the optimizers share: which parameters prepared models average (the first
// step refuses others, detail::check_parameters_averaged), and with ACCEL_DEBUG, that every
// process holds the same parameters after each step.

#include <accel/detail/gradient_state.h>

#include <memory>

namespace torch {
namespace nn {
class Module;
}  // namespace nn
}  // namespace torch

namespace accel {
namespace distributed {
class DistributedState;
}  // namespace distributed

namespace core {

/// Lists `model`'s parameters as averaged, named "model `index`: name".
void record_averaged_parameters(detail::GradientState& state, const torch::nn::Module& model,
                                size_t index);

/// ACCEL_DEBUG's comparison after each step: a hash of each parameter a non-sharded prepared
/// optimizer holds (whole, as NO_SHARD keeps them), compared across the processes of `dist`'s
/// host group; a difference throws on every process, naming the first parameter that differs.
std::function<void(const detail::GradientState&, const torch::optim::Optimizer&)>
parameter_comparison(std::shared_ptr<distributed::DistributedState> dist);

}  // namespace core
}  // namespace accel
