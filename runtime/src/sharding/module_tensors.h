#pragma once

// A module's parameters and buffers by qualified name, as save_model and save_state write them.

#include <accel/safetensors.h>

#include "util/safetensors_dtypes.h"

#include <torch/nn/module.h>

#include <optional>

namespace accel {
namespace sharding {

/// Parameters, then buffers, in the module's order. A tensor registered under several names (tied
/// weights) appears once, under its first name: safetensors cannot store two views of one buffer.
NamedTensors module_tensors(const torch::nn::Module& module);

/// True when some parameter of `module` is a sharded parameter (FULL_SHARD) or a tensor-parallel
/// slice: its whole values need the other processes.
bool has_sharded_parameters(const torch::nn::Module& module);

/// module_tensors() with the values of sharded parameters and tensor-parallel slices gathered
/// whole, for writing (FULL_STATE_DICT). With either, every process must call it (each is gathered,
/// unit by unit); only those with `keep` get the tensors, copied to the CPU, so one whole copy
/// exists, on the writer's host.
NamedTensors module_tensors_to_save(const torch::nn::Module& module, bool keep);

/// Copies `tensors` (read from `path`) into `module`'s parameters and buffers. Every tensor the
/// module has must be there with its shape, except second names of tied weights; names the
/// module does not have are an error too, unless the module is `part` of the model the file
/// holds (a pipeline's stages). Errors name `path` and the tensor.
void load_module_tensors(torch::nn::Module& module,
                         const std::map<std::string, torch::Tensor>& tensors,
                         const std::string& path, bool part = false);

/// Checks, from its header alone, that the safetensors file at `path` holds `module`'s tensors by
/// name and shape and (unless `part`) nothing else; the errors name `path` and the tensor.
void check_module_file(const torch::nn::Module& module, const std::string& path, bool part = false);
/// load_module_tensors from a safetensors file, after check_module_file, reading each tensor's
/// bytes straight into the module's CPU tensor where dtype and layout allow (no mapping, no
/// intermediate copy): restoring a checkpoint runs at the speed of a plain read. With `part`,
/// only the module's own tensors are read.
void read_module_tensors(torch::nn::Module& module, const std::string& path, bool part = false);

}  // namespace sharding
}  // namespace accel
