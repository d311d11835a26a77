#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

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

class GradScaler;

namespace detail {

class OptimizerGate;

/// A prepared object whose state `save_state` writes and `load_state` restores (schedulers, data
/// loaders).
class StatefulPart {
 public:
  virtual ~StatefulPart() = default;
  virtual void save_state(torch::serialize::OutputArchive& archive) const = 0;
  virtual void load_state(torch::serialize::InputArchive& archive) = 0;
};

/// Keeps a StatefulPart listed, in preparation order, for its lifetime; a moved-to object takes
/// over its place in the list.
class StatefulRegistration {
 public:
  StatefulRegistration(std::vector<StatefulPart*>* list, StatefulPart* part);
  StatefulRegistration(StatefulRegistration&& other, StatefulPart* part);
  StatefulRegistration(const StatefulRegistration&) = delete;
  StatefulRegistration& operator=(const StatefulRegistration&) = delete;
  ~StatefulRegistration();

 private:
  std::vector<StatefulPart*>* list_;
  StatefulPart* part_;
};

/// What the training loop knows about gradient synchronisation, shared by an Accelerator and the
/// optimizers, schedulers and data loaders it prepared (Accelerate's GradientState).
struct GradientState {
  /// False on accumulation micro-steps: optimizers and schedulers do not step.
  bool sync_gradients = true;
  /// True while a prepared data loader is handing out its last batch.
  bool end_of_dataloader = false;
  /// Real samples in the last global batch of the active loader; -1 when unknown or none are
  /// duplicated (drop_last).
  int64_t remainder = -1;
  /// Micro-steps counted by accumulate() since the last synchronisation.
  int64_t step = 0;
  /// Set by a prepared optimizer whose last step() did not update the parameters.
  bool optimizer_step_was_skipped = false;
  /// Gates of the live prepared optimizers (see OptimizerGate), in the order they were prepared.
  std::vector<OptimizerGate*> gates;
  /// Prepared AdamW, Adam and SGD step through ATen's fused kernels (AcceleratorOptions).
  bool fused_optimizer = true;
  /// The fp16 loss scaler prepared optimizers step through; null without fp16.
  std::shared_ptr<GradScaler> scaler;
  /// Live prepared schedulers and data loaders, in the order they were prepared.
  std::vector<StatefulPart*> schedulers;
  std::vector<StatefulPart*> loaders;
  /// join_uneven_inputs' even_batches, for the epochs its scope starts; unset: the loaders' own.
  std::optional<bool> even_batches_override;
  /// On several processes: the parameters of prepared models (whose gradients are averaged), by
  /// identity, each with its name ("model 0: fc1.weight"), and whether a prepared optimizer's
  /// first step refuses parameters outside them (AcceleratorOptions::allow_unprepared_parameters
  /// off). See check_parameters_averaged.
  std::unordered_map<const c10::TensorImpl*, std::string> averaged_parameters;
  bool refuse_unaveraged = false;
  /// With ACCEL_DEBUG on several processes: compares what every process must hold alike after a
  /// prepared optimizer's step, and throws naming the first parameter that differs.
  std::function<void(const GradientState&, const torch::optim::Optimizer&)> compare_after_step;
};

/// Before a prepared optimizer's first step on several processes: throws, on every process alike,
/// when some of its trainable parameters belong to no prepared model, whose gradients nothing
/// would average (each process would train a different model). Not for sharded optimizers, whose
/// step averages its own.
void check_parameters_averaged(const GradientState& state,
                               const torch::optim::Optimizer& optimizer);

/// Makes `Optimizer::zero_grad()` a no-op during accumulation micro-steps even when it is called
/// through `torch::optim::Optimizer&`, where it is not virtual (LibTorch 2.x): while closed, the
/// parameter groups' parameter lists are held aside, so the base class finds nothing to zero or
/// update. Options (learning rates) stay in place for schedulers. Registers itself with the
/// GradientState for its lifetime; the owning optimizer re-seats it when it is moved.
class OptimizerGate {
 public:
  OptimizerGate(GradientState* state, torch::optim::Optimizer* optimizer);
  OptimizerGate(const OptimizerGate&) = delete;
  OptimizerGate& operator=(const OptimizerGate&) = delete;
  /// Takes over `other`'s registration for `optimizer`, the moved-to object.
  OptimizerGate(OptimizerGate&& other, torch::optim::Optimizer* optimizer);
  ~OptimizerGate();

  void close();
  void open();
  bool closed() const { return closed_; }
  torch::optim::Optimizer* optimizer() const { return optimizer_; }

 private:
  GradientState* state_;
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
}  // namespace accel
