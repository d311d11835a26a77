#include "module_tensors.h"

#include <c10/util/Exception.h>
#include <torch/utils.h>

#include <set>

namespace accel {
namespace detail {
namespace {

/// Every name with its tensor, tied duplicates included.
NamedTensors all_named_tensors(const torch::nn::Module& module) {
  NamedTensors out;
  for (const auto& p : module.named_parameters(/*recurse=*/true)) out.emplace_back(p.key(), p.value());
  for (const auto& b : module.named_buffers(/*recurse=*/true)) out.emplace_back(b.key(), b.value());
  return out;
}

bool same_view(const torch::Tensor& a, const torch::Tensor& b) {
  return a.unsafeGetTensorImpl() == b.unsafeGetTensorImpl() ||
         (a.has_storage() && b.has_storage() && a.numel() > 0 && a.data_ptr() == b.data_ptr() &&
          a.sizes() == b.sizes() && a.strides() == b.strides());
}

}  // namespace

NamedTensors module_tensors(const torch::nn::Module& module) {
  NamedTensors out;
  for (auto& entry : all_named_tensors(module)) {
    bool tied = false;
    for (const auto& kept : out) tied = tied || same_view(kept.second, entry.second);
    if (!tied) out.push_back(std::move(entry));
  }
  return out;
}

void load_module_tensors(torch::nn::Module& module,
                         const std::map<std::string, torch::Tensor>& tensors,
                         const std::string& path) {
  torch::NoGradGuard no_grad;
  std::set<std::string> used;
  NamedTensors loaded;
  for (auto& entry : all_named_tensors(module)) {
    auto it = tensors.find(entry.first);
    if (it == tensors.end()) {
      bool tied = false;
      for (const auto& done : loaded) tied = tied || same_view(done.second, entry.second);
      TORCH_CHECK(tied, "accel: ", path, " has no tensor '", entry.first, "', which the model has");
      continue;
    }
    TORCH_CHECK(it->second.sizes() == entry.second.sizes(), "accel: ", path, ": tensor '",
                entry.first, "' has shape ", it->second.sizes(), ", the model's has ",
                entry.second.sizes());
    entry.second.copy_(it->second);
    used.insert(entry.first);
    loaded.push_back(std::move(entry));
  }
  for (const auto& entry : tensors) {
    TORCH_CHECK(used.count(entry.first) != 0, "accel: ", path, " has a tensor '", entry.first,
                "', which the model does not have");
  }
}

}  // namespace detail
}  // namespace accel
