// The scopes a program opens on its Accelerator (accel/scopes.h): each hands its work to the
// part of the Accelerator that keeps the state (the accumulation window, the prepared models,
// the join).

#include <accel/scopes.h>

#include "accelerator_impl.h"

#include <exception>
#include <utility>

namespace accel {

AccumulateScope::AccumulateScope(Accelerator* accelerator,
                                 std::vector<const torch::nn::Module*> models,
                                 std::optional<bool> sync)
    : accelerator_(accelerator), models_(std::move(models)), autocast_(accelerator->autocast()) {
  skipped_sync_ = accelerator_->impl_->window.begin(models_, sync);
}
AccumulateScope::AccumulateScope(AccumulateScope&& other) noexcept
    : accelerator_(other.accelerator_),
      models_(std::move(other.models_)),
      skipped_sync_(other.skipped_sync_),
      autocast_(std::move(other.autocast_)) {
  other.accelerator_ = nullptr;
}
AccumulateScope::~AccumulateScope() {
  if (accelerator_ != nullptr) accelerator_->impl_->window.end(models_, skipped_sync_);
}

NoSyncGuard::NoSyncGuard(Accelerator* accelerator, const torch::nn::Module* model)
    : accelerator_(accelerator), model_(model) {
  accelerator_->impl_->models.enter_no_sync(model_);
}
NoSyncGuard::NoSyncGuard(NoSyncGuard&& other) noexcept
    : accelerator_(other.accelerator_), model_(other.model_) {
  other.accelerator_ = nullptr;
}
NoSyncGuard::~NoSyncGuard() {
  if (accelerator_ != nullptr) accelerator_->impl_->models.exit_no_sync(model_);
}

MainProcessFirst::MainProcessFirst(Accelerator* accelerator, bool goes_first)
    : accelerator_(accelerator), goes_first_(goes_first) {
  if (!goes_first_) accelerator_->wait_for_everyone();
}
MainProcessFirst::MainProcessFirst(MainProcessFirst&& other) noexcept
    : accelerator_(other.accelerator_), goes_first_(other.goes_first_) {
  other.accelerator_ = nullptr;
}
MainProcessFirst::~MainProcessFirst() noexcept(false) {
  // While unwinding, a barrier could only add a second error; the others time out instead.
  if (accelerator_ != nullptr && goes_first_ && std::uncaught_exceptions() == 0) {
    accelerator_->wait_for_everyone();
  }
}

JoinScope::JoinScope(Accelerator* accelerator, std::vector<const torch::nn::Module*> models,
                     std::optional<bool> even_batches)
    : accelerator_(accelerator), models_(std::move(models)) {
  auto& impl = *accelerator_->impl_;
  const auto& sharding = impl.sharding;
  impl.join.begin(models_, even_batches,
                  sharding.sharded() ? std::optional(sharding.effective_strategy()) : std::nullopt);
}
JoinScope::JoinScope(JoinScope&& other) noexcept
    : accelerator_(other.accelerator_), models_(std::move(other.models_)) {
  other.accelerator_ = nullptr;
}
JoinScope::~JoinScope() noexcept(false) {
  // While unwinding, shadowing could only add a second error; the others time out instead.
  if (accelerator_ != nullptr && std::uncaught_exceptions() == 0) {
    auto& impl = *accelerator_->impl_;
    impl.join.end(models_, impl.other_processes());
  }
}

}  // namespace accel
