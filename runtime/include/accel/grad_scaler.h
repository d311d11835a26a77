#pragma once

#include <torch/arg.h>
#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <utility>

namespace torch {
namespace optim {
class Optimizer;
}  // namespace optim
namespace serialize {
class InputArchive;
class OutputArchive;
}  // namespace serialize
}  // namespace torch

namespace accel {

/// Settings of the fp16 loss scaler (Accelerate's GradScalerKwargs, PyTorch's GradScaler defaults).
struct GradScalerOptions {
  /// The first scale the loss is multiplied by.
  TORCH_ARG(double, init_scale) = 65536.0;
  /// The scale is multiplied by this after `growth_interval` steps in a row without inf/nan.
  TORCH_ARG(double, growth_factor) = 2.0;
  /// The scale is multiplied by this after a step whose gradients had inf/nan.
  TORCH_ARG(double, backoff_factor) = 0.5;
  TORCH_ARG(int64_t, growth_interval) = 2000;
  /// A disabled scaler scales by 1 and never skips a step.
  TORCH_ARG(bool, enabled) = true;
};

/// Dynamic loss scaling for fp16 training, with the semantics of PyTorch's GradScaler. A prepared
/// optimizer drives it when mixed_precision is "fp16"; it is public so that code building its own
/// loop (and the tests) can use it directly.
///
/// Per step: `scale(loss).backward()`; optionally `unscale_(optimizer)` before clipping;
/// `step(optimizer, fn)` unscales (unless done), checks every gradient for inf/nan and runs `fn`
/// only if there was none; `update()` halves the scale after a skipped step and doubles it after
/// `growth_interval` clean ones. The check is one fused kernel per device on CUDA and the CPU
/// (LibTorch's), else two foreach passes (multiply, inf-norm) per device.
class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});

  /// `loss` times the current scale.
  torch::Tensor scale(const torch::Tensor& loss) const;
  /// Divides the optimizer's gradients by the scale in place and records whether any was inf/nan.
  /// At most once per optimizer between updates.
  void unscale_(torch::optim::Optimizer& optimizer);
  /// Whether unscale_() ran on `optimizer` since the last update().
  bool unscaled(const torch::optim::Optimizer& optimizer) const;
  /// Unscales if not done yet, then calls `step` unless the gradients had inf/nan. Returns whether
  /// `step` ran.
  bool step(torch::optim::Optimizer& optimizer, const std::function<void()>& step);
  /// In sharded training each process checks only its shard of the gradients: `any_process`
  /// turns this process's finding into the job's (true when any process found inf/nan), so that
  /// every process skips or steps alike.
  void set_found_inf_reduction(std::function<bool(bool)> any_process) {
    any_process_ = std::move(any_process);
  }
  /// Adjusts the scale from what this step's checks found, and starts the next step.
  void update();

  double get_scale() const { return options_.enabled() ? scale_ : 1.0; }
  /// Clean steps in a row since the scale last changed.
  int64_t growth_tracker() const { return growth_tracker_; }
  bool is_enabled() const { return options_.enabled(); }
  const GradScalerOptions& options() const { return options_; }

  void save(torch::serialize::OutputArchive& archive) const;
  void load(torch::serialize::InputArchive& archive);

 private:
  struct StepRecord {
    bool unscaled = false;
    bool found_inf = false;
  };

  /// Whether any of the optimizer's gradients is inf or nan, with `unscale_by` (1 / scale) applied
  /// on the way.
  bool check_gradients(torch::optim::Optimizer& optimizer, double unscale_by);

  GradScalerOptions options_;
  double scale_;
  int64_t growth_tracker_ = 0;
  std::map<const torch::optim::Optimizer*, StepRecord> this_step_;
  std::function<bool(bool)> any_process_;
};

}  // namespace accel
