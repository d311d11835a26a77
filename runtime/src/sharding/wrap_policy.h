#pragma once

// FULL_SHARD's units: which parameters are gathered together (FSDP's auto-wrap policies).

#include <torch/nn/module.h>

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace accel {
namespace sharding {

/// FSDP's transformer auto-wrap policy over `model`: every submodule whose class is one of
/// `classes` is a unit (the innermost one wins for a parameter inside two); the model's other
/// parameters make unit 0. Units are numbered from `first_unit` (>= 1) in module order; the
/// result maps each parameter to its unit. A class name that matches no submodule is an error
/// listing the model's classes.
std::unordered_map<const c10::TensorImpl*, int64_t> units_by_class(
    const torch::nn::Module& model, const std::vector<std::string>& classes, int64_t first_unit);

/// FSDP's size-based auto-wrap policy over `model`: from the leaves up, a submodule whose
/// parameters not yet in a unit number `min_num_params` or more becomes a unit of them
/// (ModuleList and ModuleDict, which only hold other modules, never do); what is left makes
/// unit 0. Units are numbered from `first_unit` (>= 1) in that order; a parameter shared by
/// two modules goes to the first unit that takes it.
std::unordered_map<const c10::TensorImpl*, int64_t> units_by_size(const torch::nn::Module& model,
                                                                  int64_t min_num_params,
                                                                  int64_t first_unit);

/// A unit per module holding parameters of its own (a Linear's weight and bias), numbered from
/// `first_unit` in module order: the parameters a forward uses or leaves out together share a
/// unit (the sharded strategies' units under find_unused_parameters, with no wrap policy).
std::unordered_map<const c10::TensorImpl*, int64_t> units_by_module(const torch::nn::Module& model,
                                                                    int64_t first_unit);

/// True when `module_name` (Module::name(): "ns::BlockImpl") names the class `wanted`, given with
/// or without its namespace and TORCH_MODULE's "Impl" suffix.
bool class_name_matches(const std::string& module_name, const std::string& wanted);

}  // namespace sharding
}  // namespace accel
