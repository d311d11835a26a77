#pragma once

// Optimizer steps in one pass over each parameter, on LibTorch's own optimizer state, for
// AcceleratedOptimizer::step: on the CPU accel's exact kernels (bit for bit LibTorch's step), on
// CUDA the fused kernels of PyTorch's `fused=True` (at::_fused_adamw_, _fused_adam_, _fused_sgd_)
// where every tensor suits them, else the at::_foreach_* ops of PyTorch's `foreach=True` (the same
// arithmetic as LibTorch's step, op by op, over lists). Anything none takes (sparse gradients,
// integer parameters, half parameters on the CPU) stays on LibTorch's own step.

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <vector>

namespace torch {
namespace optim {
class Adam;
class AdamW;
class Optimizer;
class SGD;
}  // namespace optim
}  // namespace torch

namespace accel {
namespace detail {

/// Which path an optimizer's step can take with the tensors it holds now.
enum class StepKernel {
  /// On the CPU: every CPU parameter is a contiguous float or double tensor (its gradient dense,
  /// any strides, same dtype) and this kind of update is proven bit for bit LibTorch's in this
  /// process; on CUDA: every parameter and gradient is dense and contiguous. Both at once for an
  /// optimizer whose parameters are on both.
  fused,
  /// Dense (strided) floating-point tensors, gradients of the same dtype and device, none on the
  /// CPU, but some not contiguous or on a device without the fused kernels.
  foreach,
  /// Something else (a sparse gradient, an integer parameter, a CPU tensor the exact kernels do
  /// not take, a kind of update they could not prove): LibTorch's own step.
  none,
};

StepKernel step_kernel(const torch::optim::Optimizer& optimizer);

/// LibTorch's integer step counts as ATen's fused Adam kernels read them: a float scalar tensor
/// each, on `device`. Made afresh each step (LibTorch's counts stay the truth).
std::vector<at::Tensor> step_tensors(const std::vector<int64_t>& counts, c10::Device device);

/// One step through `kernel` (fused or foreach), on gradients already unscaled. `fused` on the CPU
/// takes the exact kernels only where step_kernel() found them proven.
///
/// The fused kernels can also divide fp16 loss scaling out as they read (their `grad_scale`), as
/// PyTorch's GradScaler has them do. accel does not: the inf/nan check before the step still needs
/// a pass over the gradients, and the scaler's fused check-and-unscale kernel is that pass. On an
/// H200 the step with the division in the kernel took 1.47x (4 x 2048) and 2.19x (3 x 256) the
/// unscale pass and plain fused step together (scripts/gpu-check.sh at 0d2063e).
void multi_tensor_step(torch::optim::AdamW& optimizer, StepKernel kernel);
void multi_tensor_step(torch::optim::Adam& optimizer, StepKernel kernel);
void multi_tensor_step(torch::optim::SGD& optimizer, StepKernel kernel);

}  // namespace detail
}  // namespace accel
