#include "module_tensors.h"

#include "accel_common/safetensors_header.h"
#include "parallel/tensor_parallel.h"
#include "sharded_parameter.h"
#include "util/positional_file.h"

#include <c10/util/Exception.h>
#include <torch/utils.h>

#include <set>

namespace accel {
namespace sharding {
namespace {

/// Every name with its tensor, tied duplicates included.
NamedTensors all_named_tensors(const torch::nn::Module& module) {
  NamedTensors out;
  for (const auto& p : module.named_parameters(/*recurse=*/true))
    out.emplace_back(p.key(), p.value());
  for (const auto& b : module.named_buffers(/*recurse=*/true)) out.emplace_back(b.key(), b.value());
  return out;
}

bool same_view(const torch::Tensor& a, const torch::Tensor& b) {
  if (a.unsafeGetTensorImpl() == b.unsafeGetTensorImpl()) return true;
  // A sharded parameter has no data of its own to compare.
  if (is_sharded(a) || is_sharded(b)) return false;
  return (a.has_storage() && b.has_storage() && a.numel() > 0 && a.data_ptr() != nullptr &&
          a.data_ptr() == b.data_ptr() && a.sizes() == b.sizes() && a.strides() == b.strides());
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

bool has_sharded_parameters(const torch::nn::Module& module) {
  for (const auto& p : module.parameters()) {
    if (is_sharded(p) || parallel::is_tensor_parallel_slice(p)) return true;
  }
  return false;
}

NamedTensors module_tensors_to_save(const torch::nn::Module& module, bool keep) {
  NamedTensors out;
  for (auto& entry : module_tensors(module)) {
    if (const parallel::TpSlice* slice = parallel::tp_slice_of(entry.second)) {
      // The slices of a tensor-parallel group, gathered whole (by every process of the group),
      // each first gathered from its shards under FULL_SHARD.
      auto value = parallel::whole_tensor(
          is_sharded(entry.second) ? gathered_value(entry.second) : entry.second, *slice);
      if (keep) out.emplace_back(entry.first, value.to(torch::kCPU));
    } else if (is_sharded(entry.second)) {
      // Every process takes part in the gather; only the keeper copies the value off the unit
      // (freed as the next units are gathered), into CPU memory (FSDP's FULL_STATE_DICT with
      // offload_to_cpu and rank0_only): one whole copy in all, on the host of the main process.
      auto value = gathered_value(entry.second);
      if (keep) {
        out.emplace_back(entry.first,
                         value.detach().to(torch::kCPU, /*non_blocking=*/false, /*copy=*/true));
      }
    } else if (keep) {
      out.push_back(std::move(entry));
    }
  }
  return out;
}

void load_module_tensors(torch::nn::Module& module,
                         const std::map<std::string, torch::Tensor>& tensors,
                         const std::string& path, bool part) {
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
    // A tensor-parallel slice takes its part of the whole tensor the file holds.
    const auto whole = parallel::whole_sizes(entry.second);
    TORCH_CHECK(it->second.sizes().vec() == whole, "accel: ", path, ": tensor '", entry.first,
                "' has shape ", it->second.sizes(), ", the model's has ", c10::IntArrayRef(whole));
    if (!it->second.is_same(entry.second))
      entry.second.copy_(parallel::this_part_of(it->second, entry.second));
    used.insert(entry.first);
    loaded.push_back(std::move(entry));
  }
  for (const auto& entry : tensors) {
    TORCH_CHECK(part || used.count(entry.first) != 0, "accel: ", path, " has a tensor '",
                entry.first, "', which the model does not have");
  }
}

namespace {

detail::SafetensorsHeader checked_header(const std::string& path) {
  try {
    return detail::read_safetensors_header(path);
  } catch (const detail::SafetensorsError& e) {
    TORCH_CHECK(false, "accel: ", e.what());
  }
}

/// The file's names and shapes are the module's: each of its tensors (a tied one under its first
/// name at least) and no other.
void check_header_matches(const torch::nn::Module& module, const detail::SafetensorsHeader& header,
                          const std::string& path, bool part) {
  for (const auto& entry : module_tensors(module)) {
    auto found = header.tensors.find(entry.first);
    TORCH_CHECK(found != header.tensors.end(), "accel: ", path, " has no tensor '", entry.first,
                "', which the model has");
    const auto whole = parallel::whole_sizes(entry.second);
    TORCH_CHECK(found->second.shape == whole, "accel: ", path, ": tensor '", entry.first,
                "' has shape ", c10::IntArrayRef(found->second.shape), ", the model's has ",
                c10::IntArrayRef(whole));
  }
  if (part) return;
  std::set<std::string> names;
  for (const auto& entry : all_named_tensors(module)) names.insert(entry.first);
  for (const auto& entry : header.tensors) {
    TORCH_CHECK(names.count(entry.first) != 0, "accel: ", path, " has a tensor '", entry.first,
                "', which the model does not have");
  }
}

}  // namespace

void check_module_file(const torch::nn::Module& module, const std::string& path, bool part) {
  check_header_matches(module, checked_header(path), path, part);
}

void read_module_tensors(torch::nn::Module& module, const std::string& path, bool part) {
  const detail::SafetensorsHeader header = checked_header(path);
  // Before the first byte is read into the module: a file of another model changes nothing.
  check_header_matches(module, header, path, part);
  const util::PositionalFile file(path);
  // Each tensor read straight into the module's, or else as a CPU tensor of the file's dtype.
  std::map<std::string, torch::Tensor> tensors;
  const uint64_t data_start = 8 + header.header_bytes;
  std::map<std::string, torch::Tensor> targets;
  for (auto& entry : all_named_tensors(module)) targets.emplace(entry.first, entry.second);
  for (const auto& entry : header.tensors) {
    const auto& info = entry.second;
    torch::Tensor into;
    auto target = targets.find(entry.first);
    if (part && target == targets.end()) continue;  // another stage's
    const char* target_dtype = target == targets.end()
                                   ? nullptr
                                   : util::safetensors_dtype_name(target->second.scalar_type());
    const bool direct = target_dtype != nullptr && info.dtype == target_dtype &&
                        target->second.is_cpu() && !is_sharded(target->second) &&
                        target->second.is_contiguous() &&
                        target->second.sizes().vec() == info.shape;
    if (direct) {
      into = target->second;
    } else {
      const auto type = util::safetensors_torch_dtype(info.dtype);
      TORCH_CHECK(type.has_value(), "accel: ", path, ": tensor '", entry.first, "' has dtype ",
                  info.dtype, ", which LibTorch does not have");
      into = torch::empty(info.shape, torch::dtype(*type));
    }
    {
      torch::NoGradGuard no_grad;
      file.read_at(into.data_ptr(), info.end - info.begin, data_start + info.begin, entry.first);
    }
    tensors.emplace(entry.first, into);
  }
  // Tensors read in place copy onto themselves: load_module_tensors still checks names and shapes.
  load_module_tensors(module, tensors, path, part);
}

}  // namespace sharding
}  // namespace accel
