// load_checkpoint_and_dispatch: resolving the checkpoint, choosing the device map, and placing
// each weight (resident on its device, or offloaded; see offload.h).

#include <accel/dispatch.h>
#include <accel/safetensors.h>

#include "accel_common/name_table.h"
#include "accel_common/safetensors_header.h"
#include "offload.h"
#include "sharding/module_tensors.h"
#include "sharding/sharded_parameter.h"
#include "util/positional_file.h"

#include <c10/util/Exception.h>
#include <torch/nn/module.h>
#include <torch/utils.h>

#ifdef ACCEL_WITH_CUDA
#include <torch/cuda.h>
#endif

#include <algorithm>
#include <array>
#include <filesystem>
#include <set>
#include <utility>

namespace accel {
namespace {

constexpr std::array<std::pair<DeviceMapStrategy, const char*>, 4> kStrategies = {{
    {DeviceMapStrategy::Auto, "auto"},
    {DeviceMapStrategy::Balanced, "balanced"},
    {DeviceMapStrategy::BalancedLow0, "balanced_low_0"},
    {DeviceMapStrategy::Sequential, "sequential"},
}};

namespace fs = std::filesystem;

/// One tensor of the checkpoint: which shard, and where in it.
struct StoredTensor {
  size_t shard = 0;
  detail::SafetensorsEntry entry;
  uint64_t data_start = 0;  // file offset of the shard's data buffer
  c10::ScalarType dtype = c10::ScalarType::Float;
};

struct Checkpoint {
  std::vector<std::string> shards;
  std::vector<std::shared_ptr<const util::PositionalFile>> files;
  std::map<std::string, StoredTensor> tensors;

  const std::string& file_of(const std::string& name) const {
    return shards[tensors.at(name).shard];
  }
};

std::vector<std::string> shard_files(const std::string& path) {
  std::error_code error;
  if (fs::is_directory(path, error)) {
    const fs::path index = fs::path(path) / "model.safetensors.index.json";
    const fs::path single = fs::path(path) / "model.safetensors";
    if (fs::exists(index, error)) return shard_files(index.string());
    if (fs::exists(single, error)) return {single.string()};
    TORCH_CHECK(false, "accel: ", path,
                " holds neither model.safetensors nor model.safetensors.index.json; "
                "load_checkpoint_and_dispatch reads safetensors checkpoints "
                "(Accelerator::save_model writes them)");
  }
  TORCH_CHECK(fs::exists(path, error), "accel: checkpoint ", path, " does not exist");
  if (path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0) {
    try {
      return detail::read_safetensors_index(path);
    } catch (const detail::SafetensorsError& e) {
      TORCH_CHECK(false, "accel: ", e.what());
    }
  }
  return {path};
}

Checkpoint open_checkpoint(const std::string& path) {
  Checkpoint checkpoint;
  checkpoint.shards = shard_files(path);
  for (size_t i = 0; i < checkpoint.shards.size(); ++i) {
    const std::string& shard = checkpoint.shards[i];
    detail::SafetensorsHeader header;
    try {
      header = detail::read_safetensors_header(shard);
    } catch (const detail::SafetensorsError& e) {
      TORCH_CHECK(false, "accel: ", e.what());
    }
    for (auto& entry : header.tensors) {
      const auto type = util::safetensors_torch_dtype(entry.second.dtype);
      TORCH_CHECK(type.has_value(), "accel: ", shard, ": tensor '", entry.first, "' has dtype ",
                  entry.second.dtype, ", which LibTorch does not have");
      auto found = checkpoint.tensors.find(entry.first);
      TORCH_CHECK(found == checkpoint.tensors.end(), "accel: tensor '", entry.first,
                  "' is in both ",
                  found == checkpoint.tensors.end() ? "" : checkpoint.shards[found->second.shard],
                  " and ", shard);
      checkpoint.tensors.emplace(entry.first,
                                 StoredTensor{i, entry.second, 8 + header.header_bytes, *type});
    }
    checkpoint.files.push_back(std::make_shared<util::PositionalFile>(shard));
  }
  return checkpoint;
}

/// Elements [first, first + count) of a stored tensor (flattened), read from their bytes alone.
torch::Tensor read_stored_elements(const Checkpoint& checkpoint, const std::string& name,
                                   int64_t first, int64_t count) {
  const StoredTensor& stored = checkpoint.tensors.at(name);
  auto part = torch::empty({count}, torch::dtype(stored.dtype));
  const uint64_t element = c10::elementSize(stored.dtype);
  checkpoint.files[stored.shard]->read_at(
      part.data_ptr(), static_cast<uint64_t>(count) * element,
      stored.data_start + stored.entry.begin + static_cast<uint64_t>(first) * element, name);
  return part;
}

/// A stored tensor, whole (the header's byte range was checked against its shape and dtype).
torch::Tensor read_stored(const Checkpoint& checkpoint, const std::string& name) {
  const auto& shape = checkpoint.tensors.at(name).entry.shape;
  return read_stored_elements(checkpoint, name, 0, c10::multiply_integers(shape)).view(shape);
}

/// Elements a sharded load reads at once: 4 MiB of fp32.
constexpr int64_t kElementsPerRead = int64_t{1} << 20;

bool converts(c10::ScalarType type) {
  return c10::isFloatingType(type) || c10::isComplexType(type);
}

torch::Device device_of(const std::string& name) {
  return name == "cpu" || name == "disk" ? torch::Device(torch::kCPU) : torch::Device(name);
}

DeviceMap choose_device_map(const torch::nn::Module& model, const DispatchOptions& options) {
  if (!options.explicit_map().empty()) {
    for (const auto& entry : options.explicit_map())
      get_max_memory({{entry.second, 0}});  // checks the name
    return options.explicit_map();
  }
  const auto strategy = options.strategy();
  DeviceMapOptions map_options;
  map_options.max_memory(options.max_memory())
      .no_split_module_classes(options.no_split_module_classes())
      .dtype(options.dtype());
  if (strategy != DeviceMapStrategy::Sequential) {
    map_options.max_memory(
        get_balanced_memory(model, map_options, strategy == DeviceMapStrategy::BalancedLow0));
  }
  return infer_auto_device_map(model, map_options);
}

/// Every tensor of the model is in the checkpoint with its shape, and nothing else is. Checked
/// before any weight is touched: a refused checkpoint leaves the model as it was.
void check_checkpoint_matches(const Checkpoint& checkpoint, const NamedTensors& tensors,
                              const std::string& path) {
  std::set<std::string> wanted;
  for (const auto& entry : tensors) {
    auto stored = checkpoint.tensors.find(entry.first);
    TORCH_CHECK(stored != checkpoint.tensors.end(), "accel: checkpoint ", path, " has no tensor '",
                entry.first, "', which the model has");
    TORCH_CHECK(stored->second.entry.shape == entry.second.sizes().vec(),
                "accel: ", checkpoint.file_of(entry.first), ": tensor '", entry.first,
                "' has shape ", c10::IntArrayRef(stored->second.entry.shape), ", the model's has ",
                entry.second.sizes());
    wanted.insert(entry.first);
  }
  for (const auto& stored : checkpoint.tensors) {
    TORCH_CHECK(wanted.count(stored.first) != 0, "accel: ", checkpoint.file_of(stored.first),
                " has a tensor '", stored.first, "', which the model does not have");
  }
}

/// Each tensor's device under `device_map` ("cpu", "disk" or "cuda:N"); `execution_device`
/// becomes the lowest GPU used (the model computes there), and stays the CPU if none is.
std::map<std::string, std::string> place_tensors(const DeviceMap& device_map,
                                                 const NamedTensors& tensors,
                                                 torch::Device& execution_device) {
  std::map<std::string, std::string> placement;
  for (const auto& entry : tensors) placement[entry.first] = device_for(device_map, entry.first);
  for (const auto& entry : placement) {
    if (entry.second.rfind("cuda:", 0) != 0) continue;
#ifdef ACCEL_WITH_CUDA
    TORCH_CHECK(torch::cuda::is_available(), "accel: the device map puts '", entry.first, "' on ",
                entry.second, " but no CUDA device is available");
#else
    TORCH_CHECK(false, "accel: the device map puts '", entry.first, "' on ", entry.second,
                " but this build of libaccel has no CUDA");
#endif
    const torch::Device gpu(entry.second);
    if (execution_device.is_cpu() || gpu.index() < execution_device.index()) {
      execution_device = gpu;
    }
  }
  return placement;
}

/// The dtype a tensor is loaded in: DispatchOptions::dtype for floating-point ones, if set, else
/// the model's own; other tensors keep the checkpoint's.
c10::ScalarType target_dtype(const torch::Tensor& model_tensor, c10::ScalarType stored,
                             const DispatchOptions& options) {
  if (options.dtype() && converts(stored)) return *options.dtype();
  return converts(stored) ? model_tensor.scalar_type() : stored;
}

/// Buffers placed off the execution device stay on it unless DispatchOptions::offload_buffers; a
/// tensor offloaded to disk in a dtype other than the checkpoint's needs an offload folder for
/// its converted copy.
void settle_offloaded_places(const torch::nn::Module& model, const NamedTensors& tensors,
                             const Checkpoint& checkpoint, const DispatchOptions& options,
                             const torch::Device& execution_device,
                             std::map<std::string, std::string>& placement) {
  std::set<std::string> buffers;
  for (const auto& b : model.named_buffers()) buffers.insert(b.key());
  const std::map<std::string, torch::Tensor> by_name(tensors.begin(), tensors.end());
  const std::string execution = execution_device.str();
  for (auto& entry : placement) {
    const bool offloaded_place =
        entry.second == "disk" || (entry.second == "cpu" && execution != "cpu");
    if (buffers.count(entry.first) != 0 && offloaded_place && !options.offload_buffers())
      entry.second = execution;
    const c10::ScalarType stored = checkpoint.tensors.at(entry.first).dtype;
    const c10::ScalarType dtype = target_dtype(by_name.at(entry.first), stored, options);
    TORCH_CHECK(entry.second != "disk" || dtype == stored || !options.offload_folder().empty(),
                "accel: the device map puts '", entry.first, "' on disk in ", c10::toString(dtype),
                ", which differs from the checkpoint's ", c10::toString(stored),
                ": set DispatchOptions::offload_folder for the converted copy");
  }
}

/// Makes `weight` read from disk at each use: from the checkpoint's file where the dtype is the
/// checkpoint's, else from a copy converted once into the offload folder.
void point_at_disk(big_model::OffloadedWeight& weight, const Checkpoint& checkpoint,
                   const StoredTensor& stored, const DispatchOptions& options) {
  if (weight.dtype == stored.dtype) {
    weight.file = checkpoint.files[stored.shard];
    weight.offset = stored.data_start + stored.entry.begin;
    weight.stored_dtype = stored.dtype;
    return;
  }
  fs::create_directories(options.offload_folder());
  const std::string copy =
      (fs::path(options.offload_folder()) / (weight.name + ".safetensors")).string();
  save_safetensors(copy, {{weight.name, read_stored(checkpoint, weight.name).to(weight.dtype)}});
  weight.file = std::make_shared<util::PositionalFile>(copy);
  weight.offset = 8 + detail::read_safetensors_header(copy).header_bytes;
  weight.stored_dtype = weight.dtype;
}

}  // namespace

const char* to_string(DeviceMapStrategy strategy) { return name_in(kStrategies, strategy); }

std::optional<DeviceMapStrategy> parse_device_map_strategy(std::string_view name) {
  return value_in<DeviceMapStrategy>(kStrategies, name);
}

DispatchOptions& DispatchOptions::device_map(DeviceMapStrategy strategy) {
  strategy_ = strategy;
  map_.clear();
  return *this;
}

DispatchOptions& DispatchOptions::device_map(std::string_view strategy) {
  const auto parsed = parse_device_map_strategy(strategy);
  TORCH_CHECK(parsed.has_value(), "accel: device_map '", strategy,
              "' is not one of auto, balanced, balanced_low_0, sequential");
  return device_map(*parsed);
}

DispatchOptions& DispatchOptions::device_map(DeviceMap map) {
  map_ = std::move(map);
  return *this;
}

namespace detail {

DispatchResult dispatch_module(torch::nn::Module& model, const std::string& path,
                               const DispatchOptions& options) {
  const Checkpoint checkpoint = open_checkpoint(path);
  const NamedTensors tensors = sharding::module_tensors(model);
  check_checkpoint_matches(checkpoint, tensors, path);
  DispatchResult result;
  result.device_map = choose_device_map(model, options);
  auto placement = place_tensors(result.device_map, tensors, result.execution_device);
  settle_offloaded_places(model, tensors, checkpoint, options, result.execution_device, placement);

  // Zero-copy views, one mapping per shard, made only when asked for.
  std::vector<std::map<std::string, torch::Tensor>> mapped(checkpoint.shards.size());
  torch::NoGradGuard no_grad;
  for (const auto& entry : tensors) {
    const std::string& name = entry.first;
    const std::string& device = placement.at(name);
    const StoredTensor& stored = checkpoint.tensors.at(name);
    const c10::ScalarType dtype = target_dtype(entry.second, stored.dtype, options);
    const int64_t bytes = entry.second.numel() * static_cast<int64_t>(c10::elementSize(dtype));
    result.bytes_per_device[device] += bytes;

    big_model::OffloadedWeight weight;
    weight.name = name;
    weight.sizes = stored.entry.shape;
    weight.dtype = dtype;
    weight.execution_device = result.execution_device;
    if (device == "disk") {
      point_at_disk(weight, checkpoint, stored, options);
      big_model::offload_in_place(entry.second, std::move(weight));
      continue;
    }
    torch::Tensor value;
    if (options.zero_copy() && device == "cpu") {
      if (mapped[stored.shard].empty())
        mapped[stored.shard] = load_safetensors(checkpoint.shards[stored.shard]);
      value = mapped[stored.shard].at(name);
    } else {
      value = read_stored(checkpoint, name);
    }
    if (value.scalar_type() != dtype) value = value.to(dtype);
    const torch::Device home = device_of(device);
    if (value.device() != home) value = value.to(home);
    if (home == result.execution_device) {
      big_model::assign_in_place(entry.second, value);
    } else {
      weight.held = value;  // on the CPU or another GPU: fetched for each use
      big_model::offload_in_place(entry.second, std::move(weight));
    }
  }
  return result;
}

}  // namespace detail
LoadCheckpointResult detail::load_checkpoint_into(torch::nn::Module& model, const std::string& path,
                                                  const LoadCheckpointOptions& options) {
  const Checkpoint checkpoint = open_checkpoint(path);
  const NamedTensors tensors = sharding::module_tensors(model);
  LoadCheckpointResult result;
  std::set<std::string> in_model;
  for (const auto& entry : tensors) {
    in_model.insert(entry.first);
    auto stored = checkpoint.tensors.find(entry.first);
    if (stored == checkpoint.tensors.end()) {
      TORCH_CHECK(!options.strict(), "accel: checkpoint ", path, " has no tensor '", entry.first,
                  "', which the model has (LoadCheckpointOptions().strict(false) keeps the "
                  "model's value)");
      result.missing_keys.push_back(entry.first);
      continue;
    }
    TORCH_CHECK(stored->second.entry.shape == entry.second.sizes().vec(),
                "accel: ", checkpoint.file_of(entry.first), ": tensor '", entry.first,
                "' has shape ", c10::IntArrayRef(stored->second.entry.shape), ", the model's has ",
                entry.second.sizes());
  }
  for (const auto& stored : checkpoint.tensors) {
    if (in_model.count(stored.first) != 0) continue;
    TORCH_CHECK(!options.strict(), "accel: ", checkpoint.file_of(stored.first), " has a tensor '",
                stored.first, "', which the model does not have");
    result.unexpected_keys.push_back(stored.first);
  }
  torch::NoGradGuard no_grad;
  for (const auto& entry : tensors) {
    if (checkpoint.tensors.count(entry.first) == 0) continue;
    auto target = entry.second;
    if (auto* source = sharding::source_of(target)) {
      // A FULL_SHARD parameter: this process reads the bytes of the elements it keeps, and
      // nothing else (every process its own part: no collective, no whole copy). A piece at a
      // time, so that what a load holds beside the shards (the bytes read and their cast to the
      // parameter's dtype) stays a few MiB whatever the parameter's size.
      const auto [first, count] = source->kept_elements();
      for (int64_t done = 0; done < count; done += kElementsPerRead) {
        const int64_t piece = std::min(kElementsPerRead, count - done);
        auto part = read_stored_elements(checkpoint, entry.first, first + done, piece);
        result.bytes_read += static_cast<int64_t>(part.nbytes());
        source->assign_kept(part.to(target.scalar_type()), done);
      }
      continue;
    }
    auto value = read_stored(checkpoint, entry.first);
    result.bytes_read += static_cast<int64_t>(value.nbytes());
    target.copy_(value);
  }
  return result;
}

}  // namespace accel
