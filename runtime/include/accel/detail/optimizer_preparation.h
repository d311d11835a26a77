#pragma once

// Accelerator::prepare for optimizers held by pointer (raw, unique_ptr, shared_ptr) and for
// learning-rate schedulers.

#include <accel/optimizer.h>

#include <torch/optim/optimizer.h>
#include <torch/optim/schedulers/lr_scheduler.h>

#include <memory>
#include <type_traits>
#include <typeinfo>
#include <utility>

namespace accel {
namespace detail {

/// Accelerator derives from OptimizerPreparation<Accelerator>: these use its options(),
/// training_loop() and num_processes(), and its prepare(optimizer) by value, which stays in
/// accelerator.h: a base's prepare(O&&) would be hidden there by prepare(M&& model), whose
/// parameter list is the same.
template <typename Derived>
class OptimizerPreparation {
 public:
  /// Prepares an optimizer the program holds by pointer: the prepared optimizer takes the given
  /// one's place (the given object is taken over and deleted) and the caller owns the result as it
  /// owned the original, so `optimizer = accelerator.prepare(new torch::optim::Adam(...));` keeps
  /// a `torch::optim::Adam*` member and its `delete`. Through the base pointer, step() is the
  /// prepared one (virtual) and zero_grad() is kept right by the accumulate scope.
  template <typename O, typename = std::enable_if_t<std::is_base_of_v<torch::optim::Optimizer, O>>>
  AcceleratedOptimizer<O>* prepare(O* optimizer) {
    TORCH_CHECK(optimizer != nullptr, "accel: prepare() was given a null optimizer");
    std::unique_ptr<O> given(optimizer);
    return new AcceleratedOptimizer<O>(self().prepare(std::move(*given)));
  }
  /// The same for a `std::unique_ptr` (the result converts to `std::unique_ptr<O>`).
  template <typename O, typename = std::enable_if_t<std::is_base_of_v<torch::optim::Optimizer, O>>>
  std::unique_ptr<AcceleratedOptimizer<O>> prepare(std::unique_ptr<O> optimizer) {
    return std::unique_ptr<AcceleratedOptimizer<O>>(prepare(optimizer.release()));
  }
  /// The same for a `std::shared_ptr` held only here (the result converts to
  /// `std::shared_ptr<O>`).
  template <typename O, typename = std::enable_if_t<std::is_base_of_v<torch::optim::Optimizer, O>>>
  std::shared_ptr<AcceleratedOptimizer<O>> prepare(std::shared_ptr<O> optimizer) {
    TORCH_CHECK(optimizer != nullptr, "accel: prepare() was given a null optimizer");
    TORCH_CHECK(optimizer.use_count() == 1,
                "accel: prepare() replaces the optimizer; it must be the only owner of it");
    return std::make_shared<AcceleratedOptimizer<O>>(self().prepare(std::move(*optimizer)));
  }

  /// Prepares a learning-rate scheduler built on a prepared optimizer. `stepping` says whether
  /// it is stepped every batch (Accelerate's rule) or once an epoch.
  template <typename S,
            typename = std::enable_if_t<
                std::is_base_of<torch::optim::LRScheduler, std::decay_t<S>>::value>,
            typename = void>
  AcceleratedScheduler<std::decay_t<S>> prepare(
      S&& scheduler, SchedulerStepping stepping = SchedulerStepping::with_optimizer) {
    static_assert(!std::is_lvalue_reference<S>::value,
                  "prepare(scheduler) takes the scheduler by value");
    const bool with_optimizer = stepping == SchedulerStepping::with_optimizer &&
                                self().options().step_scheduler_with_optimizer;
    return AcceleratedScheduler<std::decay_t<S>>(
        std::move(scheduler), self().training_loop(), with_optimizer,
        self().options().split_batches ? 1 : self().num_processes());
  }

 protected:
  OptimizerPreparation() = default;

 private:
  Derived& self() { return static_cast<Derived&>(*this); }
};

}  // namespace detail
}  // namespace accel
