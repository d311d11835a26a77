#pragma once

// What a program added to save_state/load_state: objects registered for checkpointing, and the
// save and load pre-hooks with the handles that remove them. The Accelerator's register_* calls
// fill it; the checkpoint calls hand it to checkpoint/ as CheckpointInputs.

#include "checkpoint/training_state.h"

#include <accel/checkpointing.h>

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

namespace accel {
namespace core {

class CheckpointRegistrations {
 public:
  void add_object(detail::CheckpointHooks hooks) { objects_.push_back(std::move(hooks)); }
  /// Hooks run in registration order; the handle removes one, also after the Accelerator is gone.
  RemovableHandle add_save_hook(SaveStatePreHook hook);
  RemovableHandle add_load_hook(LoadStatePreHook hook);

  /// Points `run` at the registered objects and hooks.
  void hand_to(checkpoints::CheckpointInputs& run) {
    run.custom_objects = &objects_;
    run.save_pre_hooks = save_hooks_.get();
    run.load_pre_hooks = load_hooks_.get();
  }

 private:
  std::vector<detail::CheckpointHooks> objects_;
  // Shared with the handles, which may outlive the Accelerator.
  std::shared_ptr<std::map<int64_t, SaveStatePreHook>> save_hooks_ =
      std::make_shared<std::map<int64_t, SaveStatePreHook>>();
  std::shared_ptr<std::map<int64_t, LoadStatePreHook>> load_hooks_ =
      std::make_shared<std::map<int64_t, LoadStatePreHook>>();
  int64_t next_id_ = 0;
};

}  // namespace core
}  // namespace accel
