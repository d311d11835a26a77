#pragma once

// Loading a checkpoint into a (usually empty) model with its weights spread over GPUs, the CPU
// and the disk, and running it there.
//
// LibTorch modules have no forward hooks, so accel does not hook modules: a weight left on the
// CPU (with a GPU executing) or on the disk becomes an offloaded tensor, a storage-less tensor on
// the meta device that carries where its bytes are. When an operator receives one, accel's
// dispatcher fallback reads it to the execution device, runs the operator, and drops the copy
// as soon as nothing refers to it (for a Linear: after its matmul). The model's own forward is
// untouched; any module, built-in or user-written, works. Ops that receive no offloaded tensor
// run as usual. The dispatch key used is DeferredInit (torchdistX's), so the two cannot be used
// in one process.

#include <accel/detail/module_ref.h>
#include <accel/device_map.h>

#include <torch/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace accel {

/// How load_checkpoint_and_dispatch infers a device map (Accelerate's `device_map` strings).
enum class DeviceMapStrategy {
  /// "auto", the default: as Balanced.
  Auto,
  /// "balanced": spread over the GPUs, then CPU, then disk.
  Balanced,
  /// "balanced_low_0": as balanced, with as little as possible on GPU 0.
  BalancedLow0,
  /// "sequential": fill each device in turn.
  Sequential,
};
const char* to_string(DeviceMapStrategy strategy);
/// The strategy `name` spells (Accelerate's names); none for another name.
std::optional<DeviceMapStrategy> parse_device_map_strategy(std::string_view name);

class DispatchOptions {
 public:
  /// A map inferred by `strategy` (DeviceMapStrategy::Auto without a call).
  DispatchOptions& device_map(DeviceMapStrategy strategy);
  /// The same by Accelerate's name: "auto", "balanced", "balanced_low_0" or "sequential"; another
  /// name throws here, naming the choices.
  DispatchOptions& device_map(std::string_view strategy);
  /// An explicit map; every tensor of the model must be covered.
  DispatchOptions& device_map(DeviceMap map);
  TORCH_ARG(MaxMemory, max_memory);
  TORCH_ARG(std::vector<std::string>, no_split_module_classes);
  /// Where weights go that must live on disk but cannot be read from the checkpoint as they are
  /// (a dtype change). Needed only then.
  TORCH_ARG(std::string, offload_folder);
  /// Floating-point weights are converted to this dtype; others keep theirs.
  TORCH_ARG(std::optional<torch::ScalarType>, dtype) = std::nullopt;
  /// Offload buffers with their modules; by default they sit on the execution device.
  TORCH_ARG(bool, offload_buffers) = false;
  /// Weights placed on the CPU are views of the memory-mapped checkpoint instead of copies: the
  /// load costs no reading, and pages come in on first use.
  TORCH_ARG(bool, zero_copy) = false;

 public:
  DeviceMapStrategy strategy() const { return strategy_; }
  const DeviceMap& explicit_map() const { return map_; }

 private:
  DeviceMapStrategy strategy_ = DeviceMapStrategy::Auto;
  DeviceMap map_;
};

struct DispatchResult {
  /// The device map used (inferred or given).
  DeviceMap device_map;
  /// Where every operator runs: the first GPU in the map, else the CPU. Weights held on other
  /// GPUs are fetched from there; inputs should be on this device.
  torch::Device execution_device = torch::kCPU;
  /// Bytes of weights per device in the map.
  std::map<std::string, int64_t> bytes_per_device;
};

namespace detail {
DispatchResult dispatch_module(torch::nn::Module& model, const std::string& checkpoint,
                               const DispatchOptions& options);
}  // namespace detail

/// Loads `checkpoint` (a model.safetensors file, a model.safetensors.index.json, or a folder
/// holding either, as save_model writes) into `model` and places every weight where the device
/// map says. Weights mapped to "disk" stay in the checkpoint's file and are read for each op
/// that uses them. Every tensor of the model must be in the checkpoint with its shape; errors
/// name the file and the tensor. Results equal those of the fully loaded model.
template <typename M>
DispatchResult load_checkpoint_and_dispatch(M& model, const std::string& checkpoint,
                                            const DispatchOptions& options = {}) {
  return detail::dispatch_module(detail::module_ref(model), checkpoint, options);
}

struct LoadCheckpointOptions {
  /// Every tensor of the model must be in the checkpoint and every tensor of the checkpoint in
  /// the model; false: the model's missing ones keep their values, and the checkpoint's extra
  /// ones are left out (both listed in the result).
  TORCH_ARG(bool, strict) = true;
};

struct LoadCheckpointResult {
  std::vector<std::string> missing_keys;     // in the model, not in the checkpoint
  std::vector<std::string> unexpected_keys;  // in the checkpoint, not in the model
  int64_t bytes_read = 0;                    // read from the checkpoint's files by this process
};

namespace detail {
LoadCheckpointResult load_checkpoint_into(torch::nn::Module& model, const std::string& checkpoint,
                                          const LoadCheckpointOptions& options);
}  // namespace detail

/// Loads `checkpoint` (as load_checkpoint_and_dispatch takes it) into `model`'s tensors where
/// they are, each converted to its tensor's dtype and copied to its device (Accelerate's
/// load_checkpoint_in_model without a device map; with one, use load_checkpoint_and_dispatch).
/// Shapes must match. Everything is checked before any tensor is written: a refused checkpoint
/// leaves the model as it was. A model prepared with FULL_SHARD (after prepare(optimizer)) is
/// filled part by part: each process reads only the bytes of the elements its shards keep, so
/// a model built with init_empty_weights is loaded without a whole copy on any process
/// (fsdp_cpu_ram_efficient_loading).
template <typename M>
LoadCheckpointResult load_checkpoint_in_model(M& model, const std::string& checkpoint,
                                              const LoadCheckpointOptions& options = {}) {
  return detail::load_checkpoint_into(detail::module_ref(model), checkpoint, options);
}

/// What the offload fallback has done in this process.
struct OffloadStatistics {
  int64_t materialisations = 0;  // offloaded tensors brought to the execution device
  int64_t bytes_read = 0;        // bytes read from disk for them
  int64_t live_bytes = 0;        // bytes of CPU copies read from disk that are alive now
  int64_t peak_live_bytes = 0;   // the most alive at once
};
OffloadStatistics offload_statistics();
void reset_offload_statistics();

/// True when `tensor` is an offloaded weight (see above).
bool is_offloaded(const torch::Tensor& tensor);

}  // namespace accel
