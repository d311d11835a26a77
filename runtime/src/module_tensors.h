#pragma once

// A module's parameters and buffers by qualified name, as save_model and save_state write them.

#include <accel/safetensors.h>

#include <torch/nn/module.h>

namespace accel {
namespace detail {

/// Parameters, then buffers, in the module's order. A tensor registered under several names (tied
/// weights) appears once, under its first name: safetensors cannot store two views of one buffer.
NamedTensors module_tensors(const torch::nn::Module& module);

/// Copies `tensors` (read from `path`) into `module`'s parameters and buffers. Every tensor the
/// module has must be there with its shape, except second names of tied weights; names the
/// module does not have are an error too. Errors name `path` and the tensor.
void load_module_tensors(torch::nn::Module& module, const std::map<std::string, torch::Tensor>& tensors,
                         const std::string& path);

}  // namespace detail
}  // namespace accel
