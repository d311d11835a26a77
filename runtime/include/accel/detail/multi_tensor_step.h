#pragma once

// Optimizer steps through ATen's multi-tensor kernels, on LibTorch's own optimizer state, for
// AcceleratedOptimizer::step: the fused kernels of PyTorch's `fused=True` (at::_fused_adamw_,
// _fused_adam_, _fused_sgd_: one pass over each parameter) where every tensor suits them, else the
// at::_foreach_* ops of PyTorch's `foreach=True` (the same arithmetic as LibTorch's step, op by op,
// over lists). Anything neither takes (sparse gradients, integer parameters) stays on LibTorch's
// own step.

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <optional>
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
  /// Every parameter with a gradient is a dense, contiguous floating-point tensor on the CPU or a
  /// CUDA device, its gradient alike (same dtype and device).
  fused,
  /// Dense (strided) floating-point tensors, gradients of the same dtype and device, none on the
  /// CPU, but some not contiguous or on a device without the fused kernels.
  foreach,
  /// Something else (a sparse gradient, an integer parameter, a CPU tensor the fused kernel does
  /// not take): LibTorch's own step.
  none,
};

StepKernel step_kernel(const torch::optim::Optimizer& optimizer);

/// Whether fp16 loss scaling should be divided out by the fused kernel (its `grad_scale`) rather
/// than by the scaler's own unscale pass first: when every parameter is on a CUDA device, where the
/// division rides free in a memory-bound kernel and a write pass over the gradients is saved, as in
/// PyTorch's GradScaler with fused optimizers. On the CPU the separate pass is the faster (measured
/// by bench/optimizer_step.cpp: the kernel's division costs more than the pass it saves).
bool unscale_in_fused_kernel(const torch::optim::Optimizer& optimizer);

/// LibTorch's integer step counts as the fused Adam kernels read them: a float scalar tensor each,
/// on `device`. Made afresh each step (LibTorch's counts stay the truth).
std::vector<at::Tensor> step_tensors(const std::vector<int64_t>& counts, c10::Device device);

/// One step through `kernel` (fused or foreach). `grad_scale`, fused only, is fp16 loss scaling
/// left in the gradients: the kernel divides it out as it reads each gradient and writes the
/// unscaled gradient back, as a separate unscale pass would have.
void multi_tensor_step(torch::optim::AdamW& optimizer, StepKernel kernel,
                       std::optional<double> grad_scale = std::nullopt);
void multi_tensor_step(torch::optim::Adam& optimizer, StepKernel kernel,
                       std::optional<double> grad_scale = std::nullopt);
void multi_tensor_step(torch::optim::SGD& optimizer, StepKernel kernel,
                       std::optional<double> grad_scale = std::nullopt);

}  // namespace detail
}  // namespace accel
