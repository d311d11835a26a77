#include <accel/empty_weights.h>

#include "offload.h"

#include <torch/nn/module.h>

#include <set>

namespace accel {
namespace detail {
namespace {

/// Every parameter (and buffer, with `buffers`) of `module` becomes a meta tensor.
void empty_module(torch::nn::Module& module, bool buffers) {
  for (const auto& parameter : module.parameters()) {
    if (parameter.defined() && !parameter.is_meta()) big_model::empty_in_place(parameter);
  }
  if (!buffers) return;
  for (const auto& buffer : module.buffers()) {
    if (buffer.defined() && !buffer.is_meta()) big_model::empty_in_place(buffer);
  }
}

}  // namespace

void build_with_empty_weights(const std::function<torch::nn::Module&()>& build,
                              const EmptyWeightsOptions& options) {
  if (options.include_buffers()) {
    big_model::FactoryRouter everything_to_meta([](int64_t) { return true; },
                                                /*remember_results=*/false);
    empty_module(build(), /*buffers=*/true);
    return;
  }
  // First run, all meta: which factory calls made the parameters?
  std::set<int64_t> parameter_calls;
  {
    big_model::FactoryRouter probe([](int64_t) { return true; }, /*remember_results=*/true);
    torch::nn::Module& model = build();
    for (const auto& parameter : model.parameters()) {
      const int64_t call = probe.call_that_made(parameter);
      if (call >= 0) parameter_calls.insert(call);
    }
  }
  // Second run: only those go to meta; buffers and everything else are made for real.
  big_model::FactoryRouter parameters_to_meta(
      [&](int64_t call) { return parameter_calls.count(call) != 0; },
      /*remember_results=*/false);
  empty_module(build(), /*buffers=*/false);
}

}  // namespace detail
}  // namespace accel
