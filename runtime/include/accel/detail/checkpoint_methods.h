#pragma once

// What an Accelerator offers for saving a model or a value and for registering objects with
// save_state, written as templates over its non-template calls (accelerator.h declares
// save_state, load_state and the rest).

#include <accel/checkpointing.h>
#include <accel/detail/module_ref.h>
#include <accel/safetensors.h>

#include <torch/serialize.h>
#include <torch/serialize/archive.h>

#include <sstream>
#include <string>

namespace accel {
namespace detail {

/// Accelerator derives from CheckpointMethods<Accelerator>: these use its save_module,
/// state_dict_of, register_checkpoint_hooks, writes_files and write_saved.
template <typename Derived>
class CheckpointMethods {
 public:
  /// Saves `model`'s parameters and buffers to `dir` for inference or sharing; only the main
  /// process writes. safetensors: `model.safetensors`, or, above `max_shard_size` ("10GB",
  /// "2GiB", see parse_size), `model-0000k-of-0000N.safetensors` shards and
  /// `model.safetensors.index.json` (metadata.total_size, weight_map). Weight files an earlier
  /// save left in `dir` that this one does not rewrite are removed. With `safe_serialization`
  /// false, writes one LibTorch archive, `model.pt`, instead. Every file is written atomically.
  ///
  /// Example: `accelerator.save_model(model, "out",
  /// accel::SaveModelOptions().max_shard_size("2GB"));`
  template <typename M>
  void save_model(const M& model, const std::string& dir, const SaveModelOptions& options = {}) {
    self().save_module(module_ref(model), dir, options);
  }
  template <typename M>
  [[deprecated("use save_model(model, dir, SaveModelOptions().max_shard_size(...))")]] void
  save_model(const M& model, const std::string& dir, const std::string& max_shard_size,
             bool safe_serialization = true) {
    self().save_module(
        module_ref(model), dir,
        SaveModelOptions().max_shard_size(max_shard_size).safe_serialization(safe_serialization));
  }

  /// Adds `object` to what save_state/load_state handle. It needs
  /// `void save(torch::serialize::OutputArchive&) const` and
  /// `void load(torch::serialize::InputArchive&)` (as `torch::nn::Module` has), and must outlive
  /// the Accelerator's last save_state/load_state.
  template <typename T>
  void register_for_checkpointing(T& object) {
    static_assert(has_archive_save_load<T>::value,
                  "register_for_checkpointing needs an object with "
                  "save(torch::serialize::OutputArchive&) const and "
                  "load(torch::serialize::InputArchive&)");
    self().register_checkpoint_hooks(
        {[&object](torch::serialize::OutputArchive& archive) { object.save(archive); },
         [&object](torch::serialize::InputArchive& archive) { object.load(archive); }});
  }

  /// Writes `value` with torch::save (a module, tensor, vector of tensors, optimizer...) to
  /// `path`, atomically, from the main process only, or each machine's local main process with
  /// ProjectConfiguration::save_on_each_node (machines without a shared filesystem).
  template <typename T>
  void save(const T& value, const std::string& path) {
    if (!self().writes_files()) return;
    std::ostringstream bytes;
    torch::save(value, bytes);
    self().write_saved(path, bytes.str());
  }

  /// The model's parameters and buffers by name, as its whole tensors. For a model sharded by
  /// FULL_SHARD or HYBRID_SHARD they are gathered (every process must call), copied to the CPU,
  /// and returned on the main process only; other processes get an empty list. Otherwise they
  /// are the model's own tensors, detached.
  template <typename M>
  NamedTensors get_state_dict(const M& model) {
    return self().state_dict_of(module_ref(model));
  }

 protected:
  CheckpointMethods() = default;

 private:
  Derived& self() { return static_cast<Derived&>(*this); }
};

}  // namespace detail
}  // namespace accel
