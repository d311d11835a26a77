#pragma once

// The training loop's state an Accelerator shares with the optimizers, schedulers and data
// loaders it prepared (declared in accel/detail/training_links.h, reached by their links). Each
// job is a part with its own state and its own writer: the accumulation window decides whether a
// micro-step synchronises, the loaders say where their pass stands, the optimizers register their
// gates and record their steps, and the checkpoint walks the stateful parts.

#include <accel/detail/training_links.h>

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace accel {

class GradScaler;  // accel/grad_scaler.h (precision's): held here, stepped by the optimizers

namespace optim {

/// Whether the current micro-step synchronises (the accumulation window decides; a checkpoint
/// taken inside a window restores it) and whether the optimizers' last step really stepped.
class StepSync {
 public:
  bool sync_gradients() const { return sync_gradients_; }
  void set_sync_gradients(bool sync) { sync_gradients_ = sync; }
  /// The fp16 scaler skipped the last step (an inf or nan gradient).
  bool step_was_skipped() const { return step_was_skipped_; }
  void record_step(bool stepped) { step_was_skipped_ = !stepped; }

 private:
  bool sync_gradients_ = true;
  bool step_was_skipped_ = false;
};

/// Where the active prepared loader's pass stands (its loaders write it), and the even_batches
/// join_uneven_inputs gives the passes its scope starts (the join writes it).
class LoaderPosition {
 public:
  bool end_of_dataloader() const { return end_of_dataloader_; }
  void set_end_of_dataloader(bool end) { end_of_dataloader_ = end; }
  /// Real samples in the active pass's last global batch; -1 when unknown or none are duplicated.
  int64_t remainder() const { return remainder_; }
  void set_remainder(int64_t remainder) { remainder_ = remainder; }
  /// What gather_for_metrics drops: the duplicated samples' count's complement, on the last
  /// batch only; -1 elsewhere.
  int64_t last_batch_remainder() const {
    return end_of_dataloader_ && remainder_ > 0 ? remainder_ : -1;
  }
  std::optional<bool> even_batches_override() const { return even_batches_override_; }
  void override_even_batches(std::optional<bool> even_batches) {
    even_batches_override_ = even_batches;
  }

 private:
  bool end_of_dataloader_ = false;
  int64_t remainder_ = -1;
  std::optional<bool> even_batches_override_;
};

}  // namespace optim

namespace detail {

/// Makes `Optimizer::zero_grad()` a no-op during accumulation micro-steps even when it is called
/// through `torch::optim::Optimizer&`, where it is not virtual (LibTorch 2.x): while closed, the
/// parameter groups' parameter lists are held aside, so the base class finds nothing to zero or
/// update. Options (learning rates) stay in place for schedulers. Owned by the optimizer's link,
/// which re-seats it when the optimizer is moved.
class OptimizerGate {
 public:
  explicit OptimizerGate(torch::optim::Optimizer* optimizer) : optimizer_(optimizer) {}
  OptimizerGate(const OptimizerGate&) = delete;
  OptimizerGate& operator=(const OptimizerGate&) = delete;
  ~OptimizerGate() { open(); }

  void close();
  void open();
  bool closed() const { return closed_; }
  torch::optim::Optimizer* optimizer() const { return optimizer_; }
  void reseat(torch::optim::Optimizer* optimizer) { optimizer_ = optimizer; }

 private:
  torch::optim::Optimizer* optimizer_;
  bool closed_ = false;
  std::vector<std::vector<at::Tensor>> held_params_;
};

/// Opens a gate for its lifetime and closes it again if it was closed: save_state and load_state
/// inside an accumulation window need the optimizer's real parameter groups.
class OpenedGate {
 public:
  explicit OpenedGate(OptimizerGate& gate) : gate_(gate), was_closed_(gate.closed()) {
    gate_.open();
  }
  OpenedGate(const OpenedGate&) = delete;
  OpenedGate& operator=(const OpenedGate&) = delete;
  ~OpenedGate() {
    if (was_closed_) gate_.close();
  }

 private:
  OptimizerGate& gate_;
  bool was_closed_;
};

}  // namespace detail

namespace optim {

/// The live prepared optimizers' gates, in preparation order, and how they step: through the
/// fp16 loss scaler (null without fp16), through the fused kernels (AcceleratorOptions).
class OptimizerRegistry {
 public:
  const std::vector<detail::OptimizerGate*>& gates() const { return gates_; }
  void add(detail::OptimizerGate* gate) { gates_.push_back(gate); }
  void remove(detail::OptimizerGate* gate);
  /// The accumulate scope: every gate closed on a micro-step, opened after it.
  void close_all();
  void open_all();

  GradScaler* scaler() const { return scaler_.get(); }
  void set_scaler(std::shared_ptr<GradScaler> scaler) { scaler_ = std::move(scaler); }
  bool fused() const { return fused_; }
  void set_fused(bool fused) { fused_ = fused; }

 private:
  std::vector<detail::OptimizerGate*> gates_;
  std::shared_ptr<GradScaler> scaler_;
  bool fused_ = true;
};

/// Opens every live gate for its lifetime (a checkpoint reads and writes the real groups).
class AllGatesOpen {
 public:
  explicit AllGatesOpen(const OptimizerRegistry& optimizers);

 private:
  std::vector<std::unique_ptr<detail::OpenedGate>> opened_;
};

/// What a prepared optimizer's step is checked for on several processes: that every trainable
/// parameter it steps belongs to a prepared model (whose gradients are averaged), before its first
/// step; with ACCEL_DEBUG, that every process holds the same parameters after each step.
class StepChecks {
 public:
  /// ACCEL_DEBUG's comparison (core/step_checks.h builds it: it is a collective).
  using Comparison = std::function<void(const StepChecks&, const torch::optim::Optimizer&)>;

  /// Lists `model`'s parameters as averaged, named "model `index`: name".
  void record_averaged(const torch::nn::Module& model, size_t index);
  /// AcceleratorOptions::allow_unprepared_parameters off, on several processes.
  void refuse_unaveraged(bool refuse) { refuse_unaveraged_ = refuse; }
  void set_comparison(Comparison comparison) { comparison_ = std::move(comparison); }

  /// See OptimizerLink::check_parameters_averaged.
  void check_averaged(const torch::optim::Optimizer& optimizer) const;
  /// Runs the comparison, if there is one.
  void compare(const torch::optim::Optimizer& optimizer) const {
    if (comparison_) comparison_(*this, optimizer);
  }
  /// `p`'s name in a prepared model, or its `position` among the optimizer's parameters.
  std::string name_of(const at::Tensor& p, size_t position) const;

 private:
  std::unordered_map<const c10::TensorImpl*, std::string> averaged_;
  bool refuse_unaveraged_ = false;
  Comparison comparison_;
};

/// The live prepared schedulers and data loaders, each kind in preparation order: what a
/// checkpoint saves and restores besides the models and optimizers.
class StatefulParts {
 public:
  using Kind = detail::StatefulLink::Kind;
  const std::vector<detail::StatefulPart*>& of(Kind kind) const {
    return kind == Kind::scheduler ? schedulers_ : loaders_;
  }
  void add(Kind kind, detail::StatefulPart* part) { list(kind).push_back(part); }
  void replace(Kind kind, detail::StatefulPart* old_part, detail::StatefulPart* new_part);
  void remove(Kind kind, detail::StatefulPart* part);

 private:
  std::vector<detail::StatefulPart*>& list(Kind kind) {
    return kind == Kind::scheduler ? schedulers_ : loaders_;
  }
  std::vector<detail::StatefulPart*> schedulers_;
  std::vector<detail::StatefulPart*> loaders_;
};

}  // namespace optim

namespace detail {

class TrainingLoop {
 public:
  optim::StepSync sync;
  optim::LoaderPosition loader;
  optim::OptimizerRegistry optimizers;
  optim::StepChecks checks;
  optim::StatefulParts stateful;
};

}  // namespace detail
}  // namespace accel
