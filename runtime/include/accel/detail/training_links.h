#pragma once

// How a prepared optimizer, scheduler or data loader reaches the Accelerator that prepared it
// (Accelerate's GradientState): each holds one link, whose calls are the little it may ask or
// tell. The state behind the links is the runtime's (runtime/src/optim/training_loop.h) and only
// declared here; a link holds it by shared_ptr, so a prepared object may outlive its Accelerator.

#include <cstdint>
#include <memory>
#include <optional>
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

class GradScaler;

namespace detail {

/// The training loop's state shared by an Accelerator and what it prepared.
class TrainingLoop;
/// Holds a prepared optimizer's parameter lists aside on accumulation micro-steps.
class OptimizerGate;

/// A prepared object whose state a checkpoint saves and restores (schedulers, data loaders).
class StatefulPart {
 public:
  virtual ~StatefulPart() = default;
  virtual void save_state(torch::serialize::OutputArchive& archive) const = 0;
  virtual void load_state(torch::serialize::InputArchive& archive) = 0;
};

/// Keeps a StatefulPart listed with its loop, in preparation order, for its lifetime, so that
/// save_state finds it; a moved-to object takes over its place in the list.
class StatefulLink {
 public:
  enum class Kind { scheduler, data_loader };
  StatefulLink(std::shared_ptr<TrainingLoop> loop, Kind kind, StatefulPart* part);
  StatefulLink(StatefulLink&& other, StatefulPart* part);
  StatefulLink(const StatefulLink&) = delete;
  StatefulLink& operator=(const StatefulLink&) = delete;
  ~StatefulLink();

 protected:
  std::shared_ptr<TrainingLoop> loop_;

 private:
  Kind kind_;
  StatefulPart* part_;
};

/// A prepared scheduler's link.
class SchedulerLink : public StatefulLink {
 public:
  SchedulerLink(std::shared_ptr<TrainingLoop> loop, StatefulPart* part)
      : StatefulLink(std::move(loop), Kind::scheduler, part) {}
  SchedulerLink(SchedulerLink&& other, StatefulPart* part) : StatefulLink(std::move(other), part) {}

  /// This micro-step synchronises and the optimizers' last step was not skipped (fp16 found an
  /// inf or nan): a scheduler that steps with its optimizer steps now.
  bool optimizer_stepped() const;
};

/// A prepared data loader's link: it says where the pass stands, for end_of_dataloader(),
/// gather_for_metrics and sync_with_dataloader.
class LoaderLink : public StatefulLink {
 public:
  LoaderLink(std::shared_ptr<TrainingLoop> loop, StatefulPart* part)
      : StatefulLink(std::move(loop), Kind::data_loader, part) {}

  /// The batch handed out is the pass's last one.
  void set_end_of_dataloader(bool end);
  /// Real samples in the pass's last global batch; -1 when unknown or none are duplicated.
  void set_remainder(int64_t remainder);
  /// join_uneven_inputs' even_batches for the passes its scope starts; unset: the loader's own.
  std::optional<bool> even_batches_override() const;
};

/// A prepared optimizer's link: its gate, registered with the loop for its lifetime (the
/// accumulate scope closes it on micro-steps, a checkpoint opens it), and what its step asks.
class OptimizerLink {
 public:
  OptimizerLink(std::shared_ptr<TrainingLoop> loop, torch::optim::Optimizer* optimizer);
  /// Takes over `other`'s gate for `optimizer`, the moved-to object.
  OptimizerLink(OptimizerLink&& other, torch::optim::Optimizer* optimizer);
  OptimizerLink(const OptimizerLink&) = delete;
  OptimizerLink& operator=(const OptimizerLink&) = delete;
  ~OptimizerLink();

  /// This micro-step synchronises: the optimizer steps and clears its gradients.
  bool sync_gradients() const;
  /// AcceleratorOptions::fused_optimizer.
  bool fused() const;
  /// The fp16 loss scaler the step goes through; null without fp16.
  GradScaler* scaler() const;
  /// Before the first step on several processes: throws, on every process alike, when some of
  /// the optimizer's trainable parameters belong to no prepared model, whose gradients nothing
  /// would average. Not for sharded optimizers, whose step averages its own.
  void check_parameters_averaged(const torch::optim::Optimizer& optimizer) const;
  /// After a step: records whether it `stepped` (optimizer_step_was_skipped), and with
  /// ACCEL_DEBUG on several processes compares the parameters of a non-`sharded` optimizer
  /// across the processes, throwing at the first that differs.
  void after_step(const torch::optim::Optimizer& optimizer, bool stepped, bool sharded);

 private:
  std::shared_ptr<TrainingLoop> loop_;
  std::unique_ptr<OptimizerGate> gate_;
};

}  // namespace detail
}  // namespace accel
