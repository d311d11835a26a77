#pragma once

#include <torch/arg.h>

#include <cstdint>
#include <optional>
#include <string>

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

/// How `Accelerator::load_state` treats a checkpoint.
struct LoadStateOptions {
  /// Resume a checkpoint saved by a different number of processes instead of refusing it.
  /// Models, optimizers, schedulers, the scaler, registered objects and the step load as usual;
  /// data loaders resume at the round (one batch per process) holding the first batch no saved
  /// process had started, so mid-epoch up to one round's earlier batches are read again;
  /// processes without a saved generator keep their own. The main process says so on stderr.
  TORCH_ARG(bool, allow_process_count_change) = false;
};

}  // namespace accel
