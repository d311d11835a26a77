#pragma once

// One optimizer step through ATen's fused kernels (at::_fused_adamw_, _fused_adam_, _fused_sgd_)
// on LibTorch's own optimizer state, for AcceleratedOptimizer::step. Each function does the
// whole step and returns true, or does nothing and returns false when some option, parameter or
// gradient has no exact fused equivalent; the caller then runs LibTorch's own step.

namespace torch {
namespace optim {
class Adam;
class AdamW;
class SGD;
}  // namespace optim
}  // namespace torch

namespace accel {
namespace detail {

bool fused_step(torch::optim::AdamW& optimizer);
bool fused_step(torch::optim::Adam& optimizer);
bool fused_step(torch::optim::SGD& optimizer);

}  // namespace detail
}  // namespace accel
