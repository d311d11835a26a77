// Optimizer steps through ATen's multi-tensor kernels, on LibTorch's own state.
//
// LibTorch's optimizers step parameter by parameter, about ten ATen ops each, every op a pass over
// the tensor (and, on a GPU, a kernel launch). The fused kernels PyTorch uses for `fused=True` do
// the whole update of every parameter in one pass; the foreach ops of `foreach=True` do LibTorch's
// arithmetic op by op over whole lists (one launch per op on a GPU, not one per op and tensor).
// Both take the state as lists of tensors, so the state stays LibTorch's AdamParamState /
// SGDParamState: save_state, load_state and optimizer.state() see what they always saw, and a
// checkpoint moves freely between these paths and LibTorch's. The one difference in form is the
// fused kernels' step count, a float tensor where LibTorch keeps an integer: it is handed over each
// step.

#include "accel/detail/multi_tensor_step.h"

#include "exact_cpu_step.h"
#include "exact_step_check.h"

#include <ATen/ops/_foreach_add.h>
#include <ATen/ops/_foreach_addcdiv.h>
#include <ATen/ops/_foreach_addcmul.h>
#include <ATen/ops/_foreach_div.h>
#include <ATen/ops/_foreach_maximum.h>
#include <ATen/ops/_foreach_mul.h>
#include <ATen/ops/_foreach_sqrt.h>
#include <ATen/ops/_fused_adam.h>
#include <ATen/ops/_fused_adamw.h>
#include <ATen/ops/_fused_sgd.h>
#include <c10/util/Exception.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>
#include <torch/types.h>

#include <cmath>
#include <map>
#include <memory>
#include <tuple>
#include <utility>
#include <vector>

namespace accel {
namespace detail {
namespace {

bool is_floating(torch::ScalarType type) {
  return type == torch::kFloat || type == torch::kDouble || type == torch::kHalf ||
         type == torch::kBFloat16;
}

/// The foreach ops take dense tensors of any strides; each gradient must match its parameter in
/// dtype and device, as LibTorch's arithmetic would otherwise promote or move it. A parameter
/// without a gradient is skipped by every path, but is judged too: it will have one soon.
bool suits_foreach(const torch::Tensor& param) {
  if (!is_floating(param.scalar_type()) || param.layout() != torch::kStrided) return false;
  const auto& grad = param.grad();
  return !grad.defined() ||
         (grad.layout() == torch::kStrided && grad.scalar_type() == param.scalar_type() &&
          grad.device() == param.device());
}

/// ATen's fused kernels run on CUDA and walk each tensor as one contiguous block. On the CPU the
/// step is accel's exact kernels' (exact_cpu_step.h): float or double parameters, contiguous;
/// their gradients may have any strides (a contiguous copy is read).
bool suits_fused(const torch::Tensor& param) {
  if (!param.is_contiguous()) return false;
  if (param.device().is_cpu()) return optim::exact_cpu_dtype(param.scalar_type());
  if (!param.device().is_cuda()) return false;
  const auto& grad = param.grad();
  return !grad.defined() || grad.is_contiguous();
}

/// A state tensor as the exact kernels write it: contiguous (LibTorch's SGD clones a strided
/// gradient's layout into its buffer; a loaded state may have any). The values are unchanged.
torch::Tensor contiguous_state(const torch::Tensor& state) {
  return state.is_contiguous() ? state : state.contiguous();
}

optim::AtenRounding cpu_rounding(const torch::Tensor& param) {
  const auto rounding = optim::aten_rounding(param.scalar_type());
  TORCH_CHECK(rounding,
              "accel: internal error: the exact CPU step was taken where ATen's "
              "rounding is unknown");
  return *rounding;
}

/// Which kernel call a parameter goes in: its device (type and index) and dtype.
using DeviceAndType = std::tuple<torch::DeviceType, torch::DeviceIndex, torch::ScalarType>;
DeviceAndType bucket_of(const torch::Tensor& t) {
  return {t.device().type(), t.device().index(), t.scalar_type()};
}

std::vector<c10::Scalar> scalars(const std::vector<double>& values) {
  return {values.begin(), values.end()};
}

/// One kernel call's lists for Adam and AdamW.
struct AdamLists {
  std::vector<torch::Tensor> params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs;
  std::vector<int64_t> steps;  // LibTorch's counts, after this step's increment
};

/// LibTorch's Adam/AdamW update (torch/csrc/api/src/optim/adam.cpp, adamw.cpp) as foreach ops.
template <typename Options>
void foreach_adam(AdamLists& lists, const Options& options, bool decoupled_weight_decay) {
  const auto [beta1, beta2] = options.betas();
  const double lr = options.lr(), weight_decay = options.weight_decay();
  auto grads = lists.grads;
  if (weight_decay != 0) {
    if (decoupled_weight_decay) {
      at::_foreach_mul_(lists.params, 1 - lr * weight_decay);
    } else {
      grads = at::_foreach_add(grads, lists.params, weight_decay);
    }
  }
  at::_foreach_mul_(lists.exp_avgs, beta1);
  at::_foreach_add_(lists.exp_avgs, grads, 1 - beta1);
  at::_foreach_mul_(lists.exp_avg_sqs, beta2);
  at::_foreach_addcmul_(lists.exp_avg_sqs, grads, grads, 1 - beta2);
  // Step counts differ between parameters that joined or skipped steps, so bias corrections are
  // per tensor.
  std::vector<double> correction2_sqrt, negative_step_size;
  for (const int64_t step : lists.steps) {
    correction2_sqrt.push_back(std::sqrt(1 - std::pow(beta2, step)));
    negative_step_size.push_back(-lr / (1 - std::pow(beta1, step)));
  }
  std::vector<torch::Tensor> denominators;
  if (options.amsgrad()) {
    at::_foreach_maximum_(lists.max_exp_avg_sqs, lists.exp_avg_sqs);
    denominators = at::_foreach_sqrt(lists.max_exp_avg_sqs);
  } else {
    denominators = at::_foreach_sqrt(lists.exp_avg_sqs);
  }
  at::_foreach_div_(denominators, scalars(correction2_sqrt));
  at::_foreach_add_(denominators, options.eps());
  at::_foreach_addcdiv_(lists.params, lists.exp_avgs, denominators, scalars(negative_step_size));
}

/// Adam and AdamW: AdamWParamState mirrors AdamParamState in layout, so one template serves both.
template <typename Optimizer, typename Options, typename State, typename Kernel>
void adam_family_step(Optimizer& optimizer, StepKernel kernel, bool decoupled_weight_decay,
                      Kernel fused_kernel) {
  TORCH_CHECK(kernel != StepKernel::none,
              "accel: internal error: a multi-tensor step was asked of the wrong path");
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
      if (kernel == StepKernel::fused && param.device().is_cpu()) {
        state.exp_avg(contiguous_state(state.exp_avg()));
        state.exp_avg_sq(contiguous_state(state.exp_avg_sq()));
        if (options.amsgrad()) state.max_exp_avg_sq(contiguous_state(state.max_exp_avg_sq()));
        const auto [beta1, beta2] = options.betas();
        optim::exact_adam_update(
            param, param.grad(), state.exp_avg(), state.exp_avg_sq(), state.max_exp_avg_sq(),
            state.step(),
            optim::AdamUpdate{options.lr(), beta1, beta2, options.eps(), options.weight_decay(),
                              options.amsgrad(), decoupled_weight_decay},
            cpu_rounding(param));
        continue;
      }
      auto& lists = buckets[bucket_of(param)];
      lists.params.push_back(param);
      lists.grads.push_back(param.grad());
      lists.exp_avgs.push_back(state.exp_avg());
      lists.exp_avg_sqs.push_back(state.exp_avg_sq());
      if (options.amsgrad()) lists.max_exp_avg_sqs.push_back(state.max_exp_avg_sq());
      lists.steps.push_back(state.step());
    }
    const auto [beta1, beta2] = options.betas();
    for (auto& [key, lists] : buckets) {
      if (kernel == StepKernel::foreach) {
        foreach_adam(lists, options, decoupled_weight_decay);
        continue;
      }
      const torch::Device device = lists.params.front().device();
      const auto steps = step_tensors(lists.steps, device);
      fused_kernel(lists.params, lists.grads, lists.exp_avgs, lists.exp_avg_sqs,
                   lists.max_exp_avg_sqs, steps, options.lr(), beta1, beta2, options.weight_decay(),
                   options.eps(), options.amsgrad(), /*maximize=*/false,
                   /*grad_scale=*/std::nullopt, /*found_inf=*/std::nullopt);
    }
  }
}

/// LibTorch's SGD update (torch/csrc/api/src/optim/sgd.cpp) as foreach ops. `first` marks the
/// parameters whose momentum buffer was made this step: LibTorch starts it as a copy of d_p.
void foreach_sgd(std::vector<torch::Tensor>& params, const std::vector<torch::Tensor>& grads,
                 std::vector<torch::Tensor>& buffers, const std::vector<bool>& first,
                 const torch::optim::SGDOptions& options) {
  auto d_p = grads;
  if (options.weight_decay() != 0) d_p = at::_foreach_add(d_p, params, options.weight_decay());
  if (options.momentum() != 0) {
    std::vector<torch::Tensor> carried, carried_d_p;
    for (size_t i = 0; i < buffers.size(); ++i) {
      if (first[i]) {
        buffers[i].copy_(d_p[i]);
      } else {
        carried.push_back(buffers[i]);
        carried_d_p.push_back(d_p[i]);
      }
    }
    if (!carried.empty()) {
      at::_foreach_mul_(carried, options.momentum());
      at::_foreach_add_(carried, carried_d_p, 1 - options.dampening());
    }
    d_p = options.nesterov() ? at::_foreach_add(d_p, buffers, options.momentum()) : buffers;
  }
  at::_foreach_add_(params, d_p, -options.lr());
}

bool has_cpu_parameter(const torch::optim::Optimizer& optimizer) {
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& param : group.params()) {
      if (param.device().is_cpu()) return true;
    }
  }
  return false;
}

}  // namespace

StepKernel step_kernel(const torch::optim::Optimizer& optimizer) {
  bool fused = true, foreach = true;
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& param : group.params()) {
      if (!suits_foreach(param)) return StepKernel::none;
      fused = fused && suits_fused(param);
      // On the CPU the foreach ops loop over the tensors one by one, and their list-wide
      // temporaries cost more than LibTorch's per-parameter ones: 1.25-1.5x LibTorch's AdamW step
      // on 16.8M parameters (bench/optimizer_step.cpp). They pay where an op is a kernel launch.
      foreach
        = foreach && !param.device().is_cpu();
    }
  }
  // The CPU's exact kernels, where this process's ATen rounds as they know and the whole step
  // has been proven against LibTorch's (exact_step_check.h); else LibTorch's own step.
  if (fused && has_cpu_parameter(optimizer) && !optim::exact_cpu_step_proven(optimizer)) {
    return StepKernel::none;
  }
  if (fused) return StepKernel::fused;
  return foreach ? StepKernel::foreach : StepKernel::none;
}

// Written on the host in one buffer and moved in one copy (pinned and asynchronous to a GPU),
// then split into views: one transfer a step, not a fill kernel per parameter.
std::vector<torch::Tensor> step_tensors(const std::vector<int64_t>& counts, torch::Device device) {
  const bool to_gpu = !device.is_cpu();
  auto host = torch::empty({static_cast<int64_t>(counts.size())},
                           torch::dtype(torch::kFloat).pinned_memory(to_gpu));
  auto* out = host.data_ptr<float>();
  for (size_t i = 0; i < counts.size(); ++i) out[i] = static_cast<float>(counts[i]);
  if (to_gpu) host = host.to(device, /*non_blocking=*/true);
  return host.unbind(0);
}

void multi_tensor_step(torch::optim::AdamW& optimizer, StepKernel kernel) {
  adam_family_step<torch::optim::AdamW, torch::optim::AdamWOptions, torch::optim::AdamWParamState>(
      optimizer, kernel, /*decoupled_weight_decay=*/true,
      [](auto&&... args) { at::_fused_adamw_(args...); });
}

void multi_tensor_step(torch::optim::Adam& optimizer, StepKernel kernel) {
  adam_family_step<torch::optim::Adam, torch::optim::AdamOptions, torch::optim::AdamParamState>(
      optimizer, kernel, /*decoupled_weight_decay=*/false,
      [](auto&&... args) { at::_fused_adam_(args...); });
}

void multi_tensor_step(torch::optim::SGD& optimizer, StepKernel kernel) {
  TORCH_CHECK(kernel != StepKernel::none,
              "accel: internal error: a multi-tensor step was asked of the wrong path");
  torch::NoGradGuard no_grad;
  for (auto& group : optimizer.param_groups()) {
    auto& options = static_cast<torch::optim::SGDOptions&>(group.options());
    const bool momentum = options.momentum() != 0;
    struct Lists {
      std::vector<torch::Tensor> params, grads, buffers;
      std::vector<bool> first;
    };
    // The fused kernel's first step (is_first_step) sets each buffer to d_p, as LibTorch does
    // when a parameter has no state yet, so for it parameters with and without buffers go in
    // separate calls; the foreach path handles both in one list.
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
        auto& state = static_cast<torch::optim::SGDParamState&>(*slot);
        if (kernel == StepKernel::fused && param.device().is_cpu()) {
          state.momentum_buffer(contiguous_state(state.momentum_buffer()));
        }
        buffer = state.momentum_buffer();
      }
      if (kernel == StepKernel::fused && param.device().is_cpu()) {
        optim::exact_sgd_update(
            param, param.grad(), buffer, first,
            optim::SgdUpdate{options.lr(), options.momentum(), options.dampening(),
                             options.weight_decay(), options.nesterov()},
            cpu_rounding(param));
        continue;
      }
      auto& lists = buckets[{bucket_of(param), kernel == StepKernel::fused && first}];
      lists.params.push_back(param);
      lists.grads.push_back(param.grad());
      if (momentum) lists.buffers.push_back(buffer);
      lists.first.push_back(first);
    }
    for (auto& [key, lists] : buckets) {
      if (kernel == StepKernel::foreach) {
        foreach_sgd(lists.params, lists.grads, lists.buffers, lists.first, options);
        continue;
      }
      at::_fused_sgd_(lists.params, lists.grads, lists.buffers, options.weight_decay(),
                      options.momentum(), options.lr(), options.dampening(), options.nesterov(),
                      /*maximize=*/false, /*is_first_step=*/key.second,
                      /*grad_scale=*/std::nullopt, /*found_inf=*/std::nullopt);
    }
  }
}

}  // namespace detail
}  // namespace accel
