#pragma once

#include <torch/arg.h>
#include <torch/serialize/archive.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace torch::nn {
class Module;
}  // namespace torch::nn

namespace accel {

/// Where and how `Accelerator::save_state` keeps checkpoints (Accelerate's ProjectConfiguration).
///
/// Example:
/// ```
/// accel::Accelerator accelerator(accel::AcceleratorOptions().project_config(
///     accel::ProjectConfiguration().project_dir("runs/a").automatic_checkpoint_naming(true)
///                                  .total_limit(2)));
/// accelerator.save_state();  // runs/a/checkpoints/checkpoint_0
/// accelerator.load_state();  // the newest checkpoint
/// ```
struct ProjectConfiguration {
  /// The folder checkpoints (and logs) go under.
  TORCH_ARG(std::string, project_dir) = "";
  /// The folder trackers write under (each run in <logging_dir>/<project name>); empty: the
  /// project_dir.
  TORCH_ARG(std::string, logging_dir) = "";
  /// `save_state()` with no folder writes `project_dir/checkpoints/checkpoint_<iteration>`.
  TORCH_ARG(bool, automatic_checkpoint_naming) = false;
  /// With automatic naming, only this many checkpoints are kept: the oldest go once a new one is
  /// complete.
  TORCH_ARG(std::optional<int64_t>, total_limit) = std::nullopt;
  /// The number the next automatically named checkpoint gets; each save_state() increments it.
  TORCH_ARG(int64_t, iteration) = 0;
  /// Each machine's first process writes the checkpoint to its own disk (no shared filesystem);
  /// otherwise only the main process writes the shared files.
  TORCH_ARG(bool, save_on_each_node) = false;
};

/// How `Accelerator::save_model` writes a model's weights (Accelerate's max_shard_size and
/// safe_serialization).
struct SaveModelOptions {
  /// The largest safetensors file ("10GB", "2GiB", see parse_size); a larger model is written as
  /// shards of at most this size with an index.
  TORCH_ARG(std::string, max_shard_size) = "10GB";
  /// safetensors; false writes one LibTorch archive, `model.pt`, instead.
  TORCH_ARG(bool, safe_serialization) = true;
};

/// How `Accelerator::load_state` treats a checkpoint.
struct LoadStateOptions {
  /// Resume a checkpoint saved by a different number of processes instead of refusing it.
  /// Models, optimizers, schedulers, the scaler, registered objects and the step load as usual;
  /// data loaders resume at the round (one batch per process) holding the first batch no saved
  /// process had started, so mid-epoch up to one round's earlier batches are read again;
  /// processes without a saved generator keep their own. The main process says so on stderr.
  /// Not needed where the run or the checkpoint has a device mesh (a parallelism config): moving
  /// between layouts is what a mesh is for.
  TORCH_ARG(bool, allow_process_count_change) = false;
};

/// Removes the hook it was returned for (Accelerate's RemovableHandle). Removing twice, or after
/// the Accelerator is gone, does nothing.
class RemovableHandle {
 public:
  RemovableHandle() = default;
  explicit RemovableHandle(std::function<void()> remove) : remove_(std::move(remove)) {}
  void remove() {
    if (remove_) std::exchange(remove_, nullptr)();
  }

 private:
  std::function<void()> remove_;
};

/// Called by Accelerator::save_state on every process before anything is written, with the
/// prepared models and the folder being assembled (it becomes the checkpoint's folder once
/// complete). A hook may save models its own way into it and take them off the list: save_state
/// then skips them (the saved models are numbered as the list is left).
using SaveStatePreHook =
    std::function<void(std::vector<torch::nn::Module*>& models, const std::string& dir)>;
/// Called by Accelerator::load_state on every process before anything is read, with the prepared
/// models and the checkpoint's folder; models a hook takes off the list are not loaded.
using LoadStatePreHook =
    std::function<void(std::vector<torch::nn::Module*>& models, const std::string& dir)>;

namespace detail {

/// How save_state/load_state reach an object given to register_for_checkpointing.
struct CheckpointHooks {
  std::function<void(torch::serialize::OutputArchive&)> save;
  std::function<void(torch::serialize::InputArchive&)> load;
};

template <typename T, typename = void>
struct has_archive_save_load : std::false_type {};
template <typename T>
struct has_archive_save_load<
    T, decltype(std::declval<const T&>().save(std::declval<torch::serialize::OutputArchive&>()),
                std::declval<T&>().load(std::declval<torch::serialize::InputArchive&>()), void())>
    : std::true_type {};

}  // namespace detail

}  // namespace accel
