#include "window_gradients.h"

#include <c10/util/Exception.h>
#include <torch/types.h>

#include <unordered_set>
#include <utility>

namespace accel {
namespace checkpoints {
namespace {

/// Every parameter that can hold a window gradient, under its checkpoint name.
std::vector<std::pair<std::string, torch::Tensor>> gradient_holders(
    const std::vector<torch::nn::Module*>& models,
    const std::vector<torch::optim::Optimizer*>& optimizers) {
  std::vector<std::pair<std::string, torch::Tensor>> holders;
  std::unordered_set<const c10::TensorImpl*> seen;
  for (size_t i = 0; i < models.size(); ++i) {
    for (const auto& p : models[i]->named_parameters()) {
      if (!seen.insert(p.value().unsafeGetTensorImpl()).second) continue;  // tied
      holders.emplace_back("model_" + std::to_string(i) + "." + p.key(), p.value());
    }
  }
  for (size_t i = 0; i < optimizers.size(); ++i) {
    const auto& groups = optimizers[i]->param_groups();
    for (size_t g = 0; g < groups.size(); ++g) {
      const auto& params = groups[g].params();
      for (size_t k = 0; k < params.size(); ++k) {
        if (!seen.insert(params[k].unsafeGetTensorImpl()).second) continue;
        holders.emplace_back(
            "optimizer_" + std::to_string(i) + "." + std::to_string(g) + "." + std::to_string(k),
            params[k]);
      }
    }
  }
  return holders;
}

}  // namespace

std::string window_gradients_file(int64_t process) {
  return "window_gradients_" + std::to_string(process) + ".safetensors";
}

NamedTensors window_gradients(const std::vector<torch::nn::Module*>& models,
                              const std::vector<torch::optim::Optimizer*>& optimizers) {
  NamedTensors gradients;
  for (const auto& holder : gradient_holders(models, optimizers)) {
    const auto& grad = holder.second.grad();
    if (grad.defined()) gradients.emplace_back(holder.first, grad.detach());
  }
  return gradients;
}

void restore_window_gradients(const std::vector<torch::nn::Module*>& models,
                              const std::vector<torch::optim::Optimizer*>& optimizers,
                              const std::map<std::string, torch::Tensor>& saved,
                              const std::string& path) {
  auto holders = gradient_holders(models, optimizers);
  std::map<std::string, torch::Tensor*> by_name;
  for (auto& holder : holders) by_name.emplace(holder.first, &holder.second);
  // Checked first, so a mismatch changes nothing.
  for (const auto& entry : saved) {
    auto found = by_name.find(entry.first);
    TORCH_CHECK(found != by_name.end(), "accel: ", path, " holds a gradient for '", entry.first,
                "', which this run does not have; prepare the same models and optimizers as "
                "the saved run");
    TORCH_CHECK(found->second->sizes() == entry.second.sizes(), "accel: ", path,
                ": the gradient of '", entry.first, "' has shape ", entry.second.sizes(),
                " and the parameter has ", found->second->sizes());
  }
  torch::NoGradGuard no_grad;
  for (auto& holder : holders) {
    auto& grad = holder.second.mutable_grad();
    auto found = saved.find(holder.first);
    if (found == saved.end()) {
      grad.reset();
      continue;
    }
    // A tensor of its own, not a view of the file's mapping: the next backward adds into it.
    const auto& p = holder.second;
    const auto& value = found->second;
    grad = value.to(value.options().device(p.device()), /*non_blocking=*/false, /*copy=*/true);
  }
}

}  // namespace checkpoints
}  // namespace accel
