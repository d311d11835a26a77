#pragma once

#include <accel/detail/multi_tensor_step.h>
#include <accel/detail/sharded_step.h>
#include <accel/detail/training_links.h>
#include <accel/grad_scaler.h>

#include <torch/optim/optimizer.h>
#include <torch/optim/schedulers/lr_scheduler.h>
#include <torch/serialize/archive.h>

#include <memory>
#include <optional>
#include <type_traits>
#include <utility>

namespace accel {

/// An optimizer prepared by `Accelerator::prepare`. It is an `O`, so it passes wherever the
/// program passed the optimizer before (including as `torch::optim::Optimizer&`), but `step()` and
/// `zero_grad()` do nothing on gradient-accumulation micro-steps (`sync_gradients()` false).
///
/// `zero_grad()` is not virtual in LibTorch; calls through a base reference are kept right
/// by the accumulate scope, which sets the parameter lists aside for the micro-step (see
/// `detail::OptimizerLink`).
template <typename O>
class AcceleratedOptimizer : public O {
  static_assert(std::is_base_of<torch::optim::Optimizer, O>::value,
                "AcceleratedOptimizer wraps a torch::optim::Optimizer");

 public:
  AcceleratedOptimizer(O&& optimizer, std::shared_ptr<detail::TrainingLoop> loop)
      : O(std::move(optimizer)), link_(std::move(loop), this) {}

  AcceleratedOptimizer(AcceleratedOptimizer&& other)
      : O(std::move(other)),
        sharded_(std::move(other.sharded_)),
        link_(std::move(other.link_), this),
        checked_(other.checked_) {}

  /// Steps the wrapped optimizer on synchronisation steps; returns an undefined tensor otherwise.
  /// With fp16 loss scaling the step goes through the scaler: it is skipped (and
  /// `optimizer_step_was_skipped()` is true) when a gradient is inf or nan.
  /// `torch::optim::AdamW`, `Adam` and `SGD` step through ATen's fused kernels, or its foreach ops
  /// where a tensor does not suit the kernel (see `AcceleratorOptions::fused_optimizer`); with
  /// fp16 on CUDA, the fused kernel also divides out the loss scale.
  ///
  /// With a sharding strategy, this process's optimizer steps only its shard of the parameters
  /// (see `detail::ShardedStep`): the gradients are averaged onto the shards first, and the
  /// updated shards gathered into the model's parameters after.
  torch::Tensor step(torch::optim::Optimizer::LossClosure closure = nullptr) override {
    if (!link_.sync_gradients()) return {};
    if (!checked_) {
      if (!sharded_) link_.check_parameters_averaged(*this);
      checked_ = true;
    }
    TORCH_CHECK(!(sharded_ && closure),
                "accel: a sharded optimizer's step takes no closure: the closure's backward "
                "would need the gradients averaged again");
    if (sharded_) {
      sharded_->reduce_gradients();
      sharded_->before_step(*this);
    }
    torch::Tensor loss;
    bool stepped = true;
    if (auto* scaler = link_.scaler()) {
      stepped = scaler->step(*this, [&] { loss = wrapped_step(std::move(closure)); });
      scaler->update();
    } else {
      loss = wrapped_step(std::move(closure));
    }
    if (sharded_) sharded_->after_step(*this);
    if (sharded_ && stepped) sharded_->gather_parameters();
    link_.after_step(*this, stepped, sharded_ != nullptr);
    return loss;
  }

  /// Clears the gradients on synchronisation steps only, so accumulation keeps them. As
  /// LibTorch's own, `set_to_none` (the default) leaves them undefined rather than zero.
  void zero_grad(bool set_to_none = true) {
    if (!link_.sync_gradients()) return;
    O::zero_grad(set_to_none);
    if (sharded_) sharded_->zero_full_gradients(set_to_none);
  }

  /// The optimizer as the program built it.
  O& optimizer() { return *this; }

  /// The sharding of this optimizer's parameters, or null: set by `Accelerator::prepare`, read by
  /// the runtime (the key is theirs alone; see `detail::ShardedStepKey`).
  const std::shared_ptr<detail::ShardedStep>& sharded_step(detail::ShardedStepKey) const {
    return sharded_;
  }
  void set_sharded_step(detail::ShardedStepKey, std::shared_ptr<detail::ShardedStep> sharded) {
    sharded_ = std::move(sharded);
  }

  /// True when step() goes through the one-pass kernels: the optimizer is exactly AdamW, Adam or
  /// SGD, and fusing is on. Each step then takes the fused kernels (on the CPU accel's, bit for bit
  /// LibTorch's step; on CUDA ATen's), or the foreach ops where a CUDA tensor does not suit them;
  /// a sparse gradient, an integer parameter or a non-contiguous CPU parameter still takes
  /// LibTorch's own step.
  bool fused() const { return has_multi_tensor_step && link_.fused(); }

 private:
  // Exactly these types: a subclass may have changed step(), which the kernels would bypass.
  static constexpr bool has_multi_tensor_step = std::is_same_v<O, torch::optim::AdamW> ||
                                                std::is_same_v<O, torch::optim::Adam> ||
                                                std::is_same_v<O, torch::optim::SGD>;

  /// The path this step takes, from the tensors the optimizer holds now.
  detail::StepKernel kernel() const {
    if (!fused()) return detail::StepKernel::none;
    return detail::step_kernel(*this);
  }

  // A closure re-evaluates the loss inside step(); only LibTorch's own step supports it.
  torch::Tensor wrapped_step(torch::optim::Optimizer::LossClosure closure) {
    if constexpr (has_multi_tensor_step) {
      const auto path = closure ? detail::StepKernel::none : kernel();
      if (path != detail::StepKernel::none) {
        detail::multi_tensor_step(static_cast<O&>(*this), path);
        return {};
      }
    }
    return O::step(std::move(closure));
  }

  std::shared_ptr<detail::ShardedStep> sharded_;
  detail::OptimizerLink link_;
  bool checked_ = false;  // check_parameters_averaged passed (it runs before the first step)
};

/// When a prepared scheduler's `step()` advances it (a second argument of
/// `Accelerator::prepare(scheduler, ...)`).
///
/// Example: a StepLR stepped once after each epoch keeps its epochs on any process count:
///   auto scheduler = accelerator.prepare(torch::optim::StepLR(optimizer, 1, 0.5),
///                                        accel::SchedulerStepping::per_epoch);
enum class SchedulerStepping {
  /// Accelerate's rule for a scheduler stepped every batch: with the optimizer (only when it
  /// really stepped), `num_processes()` times per call unless batches are split; the options'
  /// `step_scheduler_with_optimizer(false)` makes it `per_epoch`.
  with_optimizer,
  /// Once per call, whatever the process count or accumulation: a scheduler stepped outside the
  /// batch loop. It is still saved and restored by `save_state` / `load_state`.
  per_epoch,
};

/// A learning-rate scheduler prepared by `Accelerator::prepare`: `step()` advances it only when
/// the optimizer really stepped, and `num_processes` times per step when batches are per process
/// (Accelerate's rule: the global batch grew by that factor).
///
/// `LRScheduler::step()` is not virtual: call `step()` on this object, not through a
/// `torch::optim::LRScheduler&`.
template <typename S>
class AcceleratedScheduler : public S, private detail::StatefulPart {
  static_assert(std::is_base_of<torch::optim::LRScheduler, S>::value,
                "AcceleratedScheduler wraps a torch::optim::LRScheduler");

 public:
  AcceleratedScheduler(S&& scheduler, std::shared_ptr<detail::TrainingLoop> loop,
                       bool step_with_optimizer, int64_t steps_per_optimizer_step)
      : S(std::move(scheduler)),
        step_with_optimizer_(step_with_optimizer),
        steps_per_optimizer_step_(steps_per_optimizer_step),
        link_(std::move(loop), this) {}

  AcceleratedScheduler(AcceleratedScheduler&& other)
      : S(std::move(other)),
        step_with_optimizer_(other.step_with_optimizer_),
        steps_per_optimizer_step_(other.steps_per_optimizer_step_),
        link_(std::move(other.link_), this) {}

  void step() {
    if (!step_with_optimizer_) {
      S::step();
      return;
    }
    if (!link_.optimizer_stepped()) return;
    for (int64_t i = 0; i < steps_per_optimizer_step_; ++i) S::step();
  }

  /// The scheduler as the program built it.
  S& scheduler() { return *this; }

 private:
  // The learning rates live in the optimizer's parameter groups (saved with the optimizer); the
  // scheduler's own state is its step count.
  void save_state(torch::serialize::OutputArchive& archive) const override {
    archive.write("step_count", torch::tensor(static_cast<int64_t>(this->step_count_)));
  }
  void load_state(torch::serialize::InputArchive& archive) override {
    torch::Tensor count;
    archive.read("step_count", count);
    this->step_count_ = static_cast<decltype(this->step_count_)>(count.template item<int64_t>());
  }

  bool step_with_optimizer_;
  int64_t steps_per_optimizer_step_;
  detail::SchedulerLink link_;
};

}  // namespace accel
