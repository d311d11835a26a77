#include "wrap_policy.h"

#include <c10/util/Exception.h>
#include <torch/nn/modules/container/moduledict.h>
#include <torch/nn/modules/container/modulelist.h>

#include <functional>
#include <set>
#include <unordered_set>

namespace accel {
namespace sharding {
namespace {

/// "ns::BlockImpl" -> "Block": the last component, without TORCH_MODULE's suffix.
std::string bare_class_name(const std::string& name) {
  std::string bare = name;
  const auto colon = bare.rfind("::");
  if (colon != std::string::npos) bare = bare.substr(colon + 2);
  const std::string suffix = "Impl";
  if (bare.size() > suffix.size() &&
      bare.compare(bare.size() - suffix.size(), suffix.size(), suffix) == 0) {
    bare.resize(bare.size() - suffix.size());
  }
  return bare;
}

}  // namespace

bool class_name_matches(const std::string& module_name, const std::string& wanted) {
  return module_name == wanted || bare_class_name(module_name) == bare_class_name(wanted);
}

std::unordered_map<const c10::TensorImpl*, int64_t> units_by_class(
    const torch::nn::Module& model, const std::vector<std::string>& classes, int64_t first_unit) {
  std::unordered_map<const c10::TensorImpl*, int64_t> units;
  for (const auto& p : model.parameters()) units[p.unsafeGetTensorImpl()] = 0;
  std::set<std::string> matched, seen;
  int64_t next = first_unit;
  // Pre-order: a module inside a matched one comes after it and takes its parameters.
  for (const auto& module : model.modules(/*include_self=*/false)) {
    seen.insert(module->name());
    for (const auto& wanted : classes) {
      if (!class_name_matches(module->name(), wanted)) continue;
      matched.insert(wanted);
      const int64_t unit = next++;
      for (const auto& p : module->parameters()) units[p.unsafeGetTensorImpl()] = unit;
      break;
    }
  }
  for (const auto& wanted : classes) {
    if (matched.count(wanted) != 0) continue;
    std::string names;
    for (const auto& name : seen) names += (names.empty() ? "" : ", ") + name;
    TORCH_CHECK(false, "accel: fsdp_transformer_layer_cls_to_wrap names '", wanted,
                "', which is the class of no submodule of the model (its classes: ",
                names.empty() ? "none" : names, ")");
  }
  return units;
}

std::unordered_map<const c10::TensorImpl*, int64_t> units_by_size(const torch::nn::Module& model,
                                                                  int64_t min_num_params,
                                                                  int64_t first_unit) {
  std::unordered_map<const c10::TensorImpl*, int64_t> units;
  for (const auto& p : model.parameters()) units[p.unsafeGetTensorImpl()] = 0;
  std::unordered_set<const c10::TensorImpl*> taken;
  int64_t next = first_unit;
  // The parameters under `module` that no unit has taken yet, after its children had their turn.
  std::function<std::vector<at::Tensor>(const torch::nn::Module&, bool)> unwrapped =
      [&](const torch::nn::Module& module, bool root) {
        std::vector<at::Tensor> left;
        for (const auto& child : module.children()) {
          for (auto& p : unwrapped(*child, false)) left.push_back(std::move(p));
        }
        for (const auto& p : module.parameters(/*recurse=*/false)) left.push_back(p);
        // A parameter reached twice (tied, or left by two children) counts once.
        std::vector<at::Tensor> unique;
        std::unordered_set<const c10::TensorImpl*> seen;
        int64_t count = 0;
        for (auto& p : left) {
          const auto* impl = p.unsafeGetTensorImpl();
          if (taken.count(impl) != 0 || !seen.insert(impl).second) continue;
          count += p.numel();
          unique.push_back(std::move(p));
        }
        const bool container = dynamic_cast<const torch::nn::ModuleListImpl*>(&module) != nullptr ||
                               dynamic_cast<const torch::nn::ModuleDictImpl*>(&module) != nullptr;
        if (root || container || unique.empty() || count < min_num_params) return unique;
        const int64_t unit = next++;
        for (const auto& p : unique) {
          units[p.unsafeGetTensorImpl()] = unit;
          taken.insert(p.unsafeGetTensorImpl());
        }
        return std::vector<at::Tensor>();
      };
  unwrapped(model, /*root=*/true);
  return units;
}

std::unordered_map<const c10::TensorImpl*, int64_t> units_by_module(const torch::nn::Module& model,
                                                                    int64_t first_unit) {
  std::unordered_map<const c10::TensorImpl*, int64_t> units;
  int64_t next = first_unit;
  const auto take = [&](const torch::nn::Module& module) {
    bool any = false;
    // A parameter shared by two modules goes to the first.
    for (const auto& p : module.parameters(/*recurse=*/false)) {
      any = units.emplace(p.unsafeGetTensorImpl(), next).second || any;
    }
    if (any) ++next;
  };
  take(model);
  for (const auto& module : model.modules(/*include_self=*/false)) take(*module);
  return units;
}

}  // namespace sharding
}  // namespace accel
