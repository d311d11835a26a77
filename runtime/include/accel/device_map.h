#pragma once

// Where each part of a model goes: sizes, memory budgets and device maps, with Accelerate's
// semantics (infer_auto_device_map, get_balanced_memory, clean_device_map).

#include <accel/parse_size.h>

#include <torch/arg.h>
#include <torch/nn/module.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace accel {

/// Module, parameter or buffer name -> device: "cuda:N", "cpu" or "disk". A name covers
/// everything under it; "" is the whole model.
using DeviceMap = std::map<std::string, std::string>;

/// Device ("cuda:N", "cpu", "disk") -> bytes it may hold.
using MaxMemory = std::map<std::string, int64_t>;

/// Parses sizes such as {"cpu": "512MB", "cuda:0": "10GiB"} (see parse_size).
MaxMemory parse_max_memory(const std::map<std::string, std::string>& sizes);

/// Bytes of every parameter and buffer, and their sums for every module above them ("" is the
/// total). With `dtype`, floating-point tensors count at the smaller of their size and its.
/// Works on empty (meta) models. Tied weights count once.
std::map<std::string, int64_t> compute_module_sizes(
    const torch::nn::Module& model, std::optional<torch::ScalarType> dtype = std::nullopt);

struct DeviceMapOptions {
  /// Budgets; empty means what the machine has: each GPU's free memory and the CPU's available
  /// memory. A budget given is used as it is, as in Accelerate: a device it leaves out ("cpu"
  /// included) gets nothing, and what fits nowhere goes to "disk".
  TORCH_ARG(MaxMemory, max_memory);
  /// Module classes never split across devices (blocks with residual connections). A class
  /// matches by its name as Module::name() reports it, with or without namespace and "Impl".
  TORCH_ARG(std::vector<std::string>, no_split_module_classes);
  /// The dtype the weights will be loaded in.
  TORCH_ARG(std::optional<torch::ScalarType>, dtype) = std::nullopt;
  /// Merge entries whose submodules all went to one device.
  TORCH_ARG(bool, clean_result) = true;
};

/// `max_memory` checked, or, when empty, what the machine has (see DeviceMapOptions::max_memory).
MaxMemory get_max_memory(const MaxMemory& max_memory = {});

/// Budgets that spread the model evenly over the GPUs: every GPU but the last gets the model's
/// size divided among them plus 1.25 x the larger of the biggest unsplittable block and the mean
/// leaf module size, so layers are not pushed to the CPU by rounding; the last keeps its budget.
/// `low_zero` leaves GPU 0 as little as possible (for generation buffers).
MaxMemory get_balanced_memory(const torch::nn::Module& model, const DeviceMapOptions& options = {},
                              bool low_zero = false);

/// A device map filling the GPUs in order, then the CPU, then the disk, greedily in module order,
/// splitting a module into its children only when it does not fit. The first GPU and the CPU
/// keep room for the largest layer, which an offloaded layer needs when it runs there. Tied
/// weights stay on one device: a module goes together with the modules its weights are tied to
/// (a tied output layer joins its embedding), which are split to make room if need be.
DeviceMap infer_auto_device_map(const torch::nn::Module& model,
                                const DeviceMapOptions& options = {});

/// Groups entries that put every submodule of a module on one device under the module's name:
/// {a: cpu, b: cpu} -> {"": cpu}.
DeviceMap clean_device_map(DeviceMap device_map);

/// The device `device_map` gives the tensor or module `name` (its longest covering entry);
/// throws naming `name` when no entry covers it.
const std::string& device_for(const DeviceMap& device_map, const std::string& name);

}  // namespace accel
