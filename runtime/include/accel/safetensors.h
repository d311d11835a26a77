#pragma once

#include <torch/types.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace accel {

/// Named tensors in a fixed order (the order a module lists its parameters and buffers).
using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

/// Writes `tensors` as a safetensors file: an 8-byte little-endian header length, a JSON header
/// naming each tensor's dtype, shape and byte range (and `metadata` under "__metadata__"), padded
/// with spaces so the data starts 8-byte aligned, then the tensors' bytes in name order. The file
/// appears at `path` complete or not at all (written to a temporary sibling, fsynced, renamed).
/// Throws when a tensor's dtype has no safetensors name or two names share storage.
void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {});

/// Bytes `save_safetensors` writes for `tensors`' data (the sum of their sizes).
int64_t safetensors_data_bytes(const NamedTensors& tensors);

/// Reads a safetensors file. The file is memory-mapped and every tensor is a CPU view of the
/// mapping, copied only where its offset is not aligned for its dtype; the mapping lives as long
/// as any of the tensors. Writes to a tensor stay private to this process (copy-on-write).
/// The header is checked strictly; errors (`c10::Error`) name the file and the tensor.
std::map<std::string, torch::Tensor> load_safetensors(const std::string& path);

}  // namespace accel
