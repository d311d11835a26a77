#include "wrap_policy.h"

#include <c10/util/Exception.h>

#include <set>

namespace accel {
namespace detail {
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

}  // namespace detail
}  // namespace accel
