// Optimizer steps through ATen's fused kernels, on LibTorch's own state.
//
// LibTorch's optimizers step parameter by parameter, about ten ATen ops each, every op a pass over
// the tensor (and, on a GPU, a kernel launch). The fused kernels PyTorch uses for
// `fused=True` do the whole update of every parameter in one pass. They take the state as lists
// of tensors, so the state stays LibTorch's AdamParamState / SGDParamState: save_state,
// load_state and optimizer.state() see what they always saw, and a checkpoint moves freely between
// the fused and the per-parameter path. The one difference in form is the step count, an integer
// in LibTorch and a float tensor for the kernel: it is handed over each step.

#include "accel/detail/fused_step.h"

#include <ATen/ops/_fused_adam.h>
#include <ATen/ops/_fused_adamw.h>
#include <ATen/ops/_fused_sgd.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>
#include <torch/types.h>

#include <map>
#include <memory>
#include <tuple>
#include <utility>
#include <vector>

namespace accel {
namespace detail {
namespace {

/// The kernels take lists whose tensors share one device and dtype, dense and strided, with
/// contiguous, with gradients of the same dtype; anything else (sparse gradients, complex or
/// integer parameters) stays on LibTorch's step.
bool fusable(const torch::Tensor& param) {
  const auto& grad = param.grad();
  if (!grad.defined()) return true;  // skipped, as LibTorch skips it
  const auto type = param.scalar_type();
  const bool floating = type == torch::kFloat || type == torch::kDouble || type == torch::kHalf ||
                        type == torch::kBFloat16;
  const bool device = param.device().is_cpu() || param.device().is_cuda();
  return floating && device && param.layout() == torch::kStrided &&
         grad.layout() == torch::kStrided && grad.scalar_type() == type &&
         grad.device() == param.device() && param.is_contiguous() && grad.is_contiguous();
}

bool all_fusable(const torch::optim::Optimizer& optimizer) {
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& param : group.params()) {
      if (!fusable(param)) return false;
    }
  }
  return true;
}

/// Which kernel call a parameter goes in: its device (type and index) and dtype.
using DeviceAndType = std::tuple<torch::DeviceType, torch::DeviceIndex, torch::ScalarType>;
DeviceAndType bucket_of(const torch::Tensor& t) {
  return {t.device().type(), t.device().index(), t.scalar_type()};
}

/// One kernel call's lists for Adam and AdamW.
struct AdamLists {
  std::vector<torch::Tensor> params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps;
};

/// Adam and AdamW: LibTorch's AdamParamState is the same class for both in layout (AdamWParamState
/// mirrors it), so one template serves them.
template <typename Optimizer, typename Options, typename State, typename Kernel>
bool fused_adam_family(Optimizer& optimizer, Kernel kernel) {
  if (!all_fusable(optimizer)) return false;
  torch::NoGradGuard no_grad;
  for (auto& group : optimizer.param_groups()) {
    auto& options = static_cast<Options&>(group.options());
    std::map<DeviceAndType, AdamLists> buckets;
    for (auto& param : group.params()) {
      if (!param.grad().defined()) continue;
      auto& slot = optimizer.state()[param.unsafeGetTensorImpl()];
      if (!slot) {
        auto state = std::make_unique<State>();
        state->step(0);
        state->exp_avg(torch::zeros_like(param, torch::MemoryFormat::Preserve));
        state->exp_avg_sq(torch::zeros_like(param, torch::MemoryFormat::Preserve));
        if (options.amsgrad()) {
          state->max_exp_avg_sq(torch::zeros_like(param, torch::MemoryFormat::Preserve));
        }
        slot = std::move(state);
      }
      auto& state = static_cast<State&>(*slot);
      state.step(state.step() + 1);
      auto& lists = buckets[bucket_of(param)];
      lists.params.push_back(param);
      lists.grads.push_back(param.grad());
      lists.exp_avgs.push_back(state.exp_avg());
      lists.exp_avg_sqs.push_back(state.exp_avg_sq());
      if (options.amsgrad()) lists.max_exp_avg_sqs.push_back(state.max_exp_avg_sq());
      lists.steps.push_back(torch::full({}, static_cast<double>(state.step()),
                                        torch::dtype(torch::kFloat).device(param.device())));
    }
    const auto [beta1, beta2] = options.betas();
    for (auto& [key, lists] : buckets) {
      kernel(lists.params, lists.grads, lists.exp_avgs, lists.exp_avg_sqs, lists.max_exp_avg_sqs,
             lists.steps, options.lr(), beta1, beta2, options.weight_decay(), options.eps(),
             options.amsgrad(), /*maximize=*/false, std::nullopt, std::nullopt);
    }
  }
  return true;
}

}  // namespace

bool fused_step(torch::optim::AdamW& optimizer) {
  return fused_adam_family<torch::optim::AdamW, torch::optim::AdamWOptions,
                           torch::optim::AdamWParamState>(
      optimizer, [](auto&&... args) { at::_fused_adamw_(args...); });
}

bool fused_step(torch::optim::Adam& optimizer) {
  return fused_adam_family<torch::optim::Adam, torch::optim::AdamOptions,
                           torch::optim::AdamParamState>(
      optimizer, [](auto&&... args) { at::_fused_adam_(args...); });
}

bool fused_step(torch::optim::SGD& optimizer) {
  if (!all_fusable(optimizer)) return false;
  torch::NoGradGuard no_grad;
  for (auto& group : optimizer.param_groups()) {
    auto& options = static_cast<torch::optim::SGDOptions&>(group.options());
    const bool momentum = options.momentum() != 0;
    // The kernel's first step (is_first_step) sets each buffer to the gradient, as LibTorch does
    // when a parameter has no state yet; parameters with and without buffers go in separate calls.
    struct Lists {
      std::vector<torch::Tensor> params, grads, buffers;
    };
    std::map<std::pair<DeviceAndType, bool>, Lists> buckets;
    for (auto& param : group.params()) {
      if (!param.grad().defined()) continue;
      bool first = false;
      torch::Tensor buffer;
      if (momentum) {
        auto& slot = optimizer.state()[param.unsafeGetTensorImpl()];
        if (!slot) {
          auto state = std::make_unique<torch::optim::SGDParamState>();
          state->momentum_buffer(torch::empty_like(param, torch::MemoryFormat::Preserve));
          slot = std::move(state);
          first = true;
        }
        buffer = static_cast<torch::optim::SGDParamState&>(*slot).momentum_buffer();
      }
      auto& lists = buckets[{bucket_of(param), first}];
      lists.params.push_back(param);
      lists.grads.push_back(param.grad());
      if (momentum) lists.buffers.push_back(buffer);
    }
    for (auto& [key, lists] : buckets) {
      at::_fused_sgd_(lists.params, lists.grads, lists.buffers, options.weight_decay(),
                      options.momentum(), options.lr(), options.dampening(), options.nesterov(),
                      /*maximize=*/false, /*is_first_step=*/key.second, std::nullopt, std::nullopt);
    }
  }
  return true;
}

}  // namespace detail
}  // namespace accel
