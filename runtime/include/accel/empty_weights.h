#pragma once

// Building a model without memory for its weights, to load a checkpoint into it afterwards.

#include <accel/detail/module_ref.h>

#include <torch/arg.h>

#include <functional>
#include <utility>

namespace accel {

struct EmptyWeightsOptions {
  /// Leave buffers empty too. Off (the default, as in Accelerate), buffers are built for real on
  /// the CPU with the values the constructor gives them (BatchNorm's running_var of ones, a
  /// causal mask), so a model whose checkpoint lacks them still runs.
  TORCH_ARG(bool, include_buffers) = false;
};

namespace detail {
/// Runs `build` (once, or twice when buffers are kept: see init_empty_weights) with tensor
/// factories routed to the meta device, and leaves the module it returns with meta parameters.
void build_with_empty_weights(const std::function<torch::nn::Module&()>& build,
                              const EmptyWeightsOptions& options);
}  // namespace detail

/// Returns what `build()` returns, a model whose parameters are meta tensors: right shapes and
/// dtypes, no storage, no initialisation cost. Building 7 billion parameters' worth of Linear
/// layers takes milliseconds and no memory. Fill it with load_checkpoint_and_dispatch.
///
///   auto model = accel::init_empty_weights([] { return Gpt(config); });
///
/// LibTorch has no switch that puts a module "on the meta device", so tensor factories called
/// while `build` runs are what goes to meta. To keep buffers real, `build` runs twice: a first,
/// all-meta run finds which factory calls made the parameters; the second sends just those to
/// meta. `build` must therefore build the same model each time and have no other side effects.
/// A parameter that is not a factory's direct result (`torch::randn(...) * 0.02`) is computed
/// for real and then emptied: correct, but not free.
template <typename F>
auto init_empty_weights(F&& build, const EmptyWeightsOptions& options = {}) -> decltype(build()) {
  using Model = decltype(build());
  Model model{nullptr};
  detail::build_with_empty_weights(
      [&]() -> torch::nn::Module& {
        model = build();
        return detail::module_ref(model);
      },
      options);
  return model;
}

/// True when `tensor` has no storage: a meta tensor from init_empty_weights, or a weight that
/// load_checkpoint_and_dispatch left offloaded.
bool is_empty_weight(const torch::Tensor& tensor);

}  // namespace accel
